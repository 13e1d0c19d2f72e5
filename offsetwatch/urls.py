from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard.web import alert_views, audit_views, rewind_views
from dashboard.web.chart_views import (
    export_job_download,
    export_job_new,
    export_jobs,
    export_jobs_live,
    pipeline_batches_csv,
    pipeline_chart_data,
    pipeline_chart_image,
    pipeline_lag_chart,
)
from dashboard.web.views import (
    collectors,
    healthz,
    metrics_view,
    overview,
    overview_live,
    pipeline_detail,
    pipeline_live,
    pipeline_status,
    plotly_js,
)

# A server error: a database one is a 503, an API one stays JSON (dashboard/unavailable.py).
handler500 = "dashboard.unavailable.server_error"

urlpatterns = [
    path("", overview, name="overview"),
    path("live/overview/", overview_live, name="overview_live"),
    path("pipelines/<int:pipeline_id>/", pipeline_detail, name="pipeline"),
    path("pipelines/<int:pipeline_id>/live/", pipeline_live, name="pipeline_live"),
    path("pipelines/<int:pipeline_id>/status/", pipeline_status, name="pipeline_status"),
    path("pipelines/<int:pipeline_id>/lag-chart.json", pipeline_lag_chart, name="pipeline_lag_chart"),
    path("pipelines/<int:pipeline_id>/chart.png", pipeline_chart_image, {"fmt": "png"}, name="pipeline_chart_png"),
    path("pipelines/<int:pipeline_id>/chart.svg", pipeline_chart_image, {"fmt": "svg"}, name="pipeline_chart_svg"),
    path("pipelines/<int:pipeline_id>/chart.csv", pipeline_chart_data, {"fmt": "csv"}, name="pipeline_chart_csv"),
    path("pipelines/<int:pipeline_id>/chart.json", pipeline_chart_data, {"fmt": "json"}, name="pipeline_chart_json"),
    path("pipelines/<int:pipeline_id>/batches.csv", pipeline_batches_csv, name="pipeline_batches_csv"),
    path("pipelines/<int:pipeline_id>/exports/", export_job_new, name="export_job_new"),
    path("exports/", export_jobs, name="export_jobs"),
    path("exports/live/", export_jobs_live, name="export_jobs_live"),
    path("exports/<int:job_id>/download", export_job_download, name="export_job_download"),
    path("collectors/", collectors, name="collectors"),
    path("pipelines/<int:pipeline_id>/rewind/", rewind_views.rewind_new, name="rewind_new"),
    path("rewinds/", rewind_views.rewind_list, name="rewinds"),
    path("rewinds/<int:rewind_id>/", rewind_views.rewind_detail, name="rewind"),
    path("rewinds/<int:rewind_id>/decide", rewind_views.rewind_decide, name="rewind_decide"),
    path("rewinds/<int:rewind_id>/cancel", rewind_views.rewind_cancel, name="rewind_cancel"),
    path("rewinds/<int:rewind_id>/write", rewind_views.rewind_write, name="rewind_write"),
    path("pipelines/<int:pipeline_id>/incidents/<int:incident_id>/acknowledge", alert_views.incident_acknowledge,
         name="incident_acknowledge"),
    path("pipelines/<int:pipeline_id>/silence", alert_views.pipeline_silence, name="pipeline_silence"),
    path("silences/", alert_views.silences, name="silences"),
    path("silences/new", alert_views.silence_new, name="silence_new"),
    path("silences/<int:silence_id>/cancel", alert_views.silence_cancel, name="silence_cancel"),
    path("audit/", audit_views.audit_log, name="audit"),
    path("audit/verify", audit_views.audit_verify_now, name="audit_verify"),
    path("audit/export.csv", audit_views.audit_export, {"fmt": "csv"}, name="audit_export_csv"),
    path("audit/export.json", audit_views.audit_export, {"fmt": "json"}, name="audit_export_json"),
    path("assets/plotly.min.js", plotly_js, name="plotly_js"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", include("dashboard.api.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
