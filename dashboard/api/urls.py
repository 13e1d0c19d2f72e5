"""/api/v1/: every route here is described in dashboard/openapi.json (tests/integration/test_api.py checks)."""
from django.urls import path, re_path

from dashboard.api import views as api

urlpatterns = [
    path("pipelines", api.api_pipelines, name="api_pipelines"),
    path("pipelines/<int:pipeline_id>", api.api_pipeline, name="api_pipeline"),
    path("pipelines/<int:pipeline_id>/partitions", api.api_pipeline_partitions, name="api_pipeline_partitions"),
    path("pipelines/<int:pipeline_id>/batches", api.api_pipeline_batches, name="api_pipeline_batches"),
    path("pipelines/<int:pipeline_id>/lag", api.api_pipeline_lag, name="api_pipeline_lag"),
    path("collectors", api.api_collectors, name="api_collectors"),
    path("start-reports", api.api_start_report, name="api_start_report"),
    path("rewinds/pending", api.api_rewind_pending, name="api_rewind_pending"),
    path("rewinds/<int:rewind_id>/claim", api.api_rewind_claim, name="api_rewind_claim"),
    path("rewinds/<int:rewind_id>/applied", api.api_rewind_applied, name="api_rewind_applied"),
    path("rewinds/<int:rewind_id>/failed", api.api_rewind_failed, name="api_rewind_failed"),
    path("openapi.json", api.api_openapi, name="api_openapi"),
    # Last: anything else under /api/v1/ is a JSON 404 (not in the spec: it is not an endpoint).
    re_path(r"^(?P<rest>.*)$", api.api_not_found, name="api_not_found"),
]
