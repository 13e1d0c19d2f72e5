from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("live/overview/", views.overview_live, name="overview_live"),
    path("pipelines/<int:pipeline_id>/", views.pipeline_detail, name="pipeline"),
    path("pipelines/<int:pipeline_id>/live/", views.pipeline_live, name="pipeline_live"),
    path("pipelines/<int:pipeline_id>/status/", views.pipeline_status, name="pipeline_status"),
    path("pipelines/<int:pipeline_id>/lag-chart.json", views.pipeline_lag_chart, name="pipeline_lag_chart"),
    path("collectors/", views.collectors, name="collectors"),
    path("api/v1/collectors", views.api_collectors, name="api_collectors"),
    path("api/v1/pipelines", views.api_pipelines, name="api_pipelines"),
    path("assets/plotly.min.js", views.plotly_js, name="plotly_js"),
    path("healthz", views.healthz, name="healthz"),
    path("api/v1/start-reports", views.api_start_report, name="api_start_report"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
