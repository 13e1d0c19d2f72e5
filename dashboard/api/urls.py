"""/api/v1/: every route here is described in dashboard/openapi.json (tests/integration/test_api.py checks)."""
from django.urls import path, re_path

from dashboard.api.job_views import api_rewind_applied, api_rewind_claim, api_rewind_failed, api_rewind_pending, api_start_report
from dashboard.api.views import (
    api_collectors,
    api_not_found,
    api_openapi,
    api_pipeline,
    api_pipeline_batches,
    api_pipeline_lag,
    api_pipeline_partitions,
    api_pipelines,
)

urlpatterns = [
    path("pipelines", api_pipelines, name="api_pipelines"),
    path("pipelines/<int:pipeline_id>", api_pipeline, name="api_pipeline"),
    path("pipelines/<int:pipeline_id>/partitions", api_pipeline_partitions, name="api_pipeline_partitions"),
    path("pipelines/<int:pipeline_id>/batches", api_pipeline_batches, name="api_pipeline_batches"),
    path("pipelines/<int:pipeline_id>/lag", api_pipeline_lag, name="api_pipeline_lag"),
    path("collectors", api_collectors, name="api_collectors"),
    path("start-reports", api_start_report, name="api_start_report"),
    path("rewinds/pending", api_rewind_pending, name="api_rewind_pending"),
    path("rewinds/<int:rewind_id>/claim", api_rewind_claim, name="api_rewind_claim"),
    path("rewinds/<int:rewind_id>/applied", api_rewind_applied, name="api_rewind_applied"),
    path("rewinds/<int:rewind_id>/failed", api_rewind_failed, name="api_rewind_failed"),
    path("openapi.json", api_openapi, name="api_openapi"),
    # Last: anything else under /api/v1/ is a JSON 404 (not in the spec: it is not an endpoint).
    re_path(r"^(?P<rest>.*)$", api_not_found, name="api_not_found"),
]
