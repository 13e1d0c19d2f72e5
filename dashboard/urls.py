from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("live/overview/", views.overview_live, name="overview_live"),
    path("pipelines/<int:pipeline_id>/", views.pipeline_detail, name="pipeline"),
    path("pipelines/<int:pipeline_id>/live/", views.pipeline_live, name="pipeline_live"),
    path("pipelines/<int:pipeline_id>/status/", views.pipeline_status, name="pipeline_status"),
    path("pipelines/<int:pipeline_id>/lag-chart.json", views.pipeline_lag_chart, name="pipeline_lag_chart"),
    path("collectors/", views.collectors, name="collectors"),
    path("assets/plotly.min.js", views.plotly_js, name="plotly_js"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics_view, name="metrics"),
    path("api/v1/", include("dashboard.api_urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
