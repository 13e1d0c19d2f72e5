from django.contrib import admin

from dashboard.models import ApiToken, Cluster, Incident, Pipeline, PipelineToken, SourceHealth, StartReport, Store, StoreProblem


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ("name", "bootstrap_servers")


@admin.register(Store)
class StoreAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "url", "cluster", "enabled")


@admin.register(Pipeline)
class PipelineAdmin(admin.ModelAdmin):
    list_display = ("topic", "group", "store", "first_seen_at")
    list_filter = ("store",)


@admin.register(SourceHealth)
class SourceHealthAdmin(admin.ModelAdmin):
    list_display = ("label", "last_success_at", "consecutive_failures", "last_error_at")


@admin.register(StoreProblem)
class StoreProblemAdmin(admin.ModelAdmin):
    list_display = ("store", "key", "problem", "occurrences", "last_seen_at")


@admin.register(PipelineToken)
class PipelineTokenAdmin(admin.ModelAdmin):
    # Tokens are issued by `manage.py issue_pipeline_token` (shown once); here they are listed and revoked.
    list_display = ("prefix", "name", "pipeline", "created_at", "revoked_at")
    readonly_fields = ("pipeline", "name", "prefix", "token_hash", "created_at")

    def has_add_permission(self, request):
        return False


@admin.register(StartReport)
class StartReportAdmin(admin.ModelAdmin):
    list_display = ("pipeline", "received_at", "first_start", "clamped_partitions", "messages_lost")


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ("pipeline", "opened_at", "closed_at", "worst_status")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    # Issued by `manage.py issue_api_token` (shown once); here they are listed and revoked.
    list_display = ("prefix", "name", "user", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("user", "name", "prefix", "token_hash", "created_at", "last_used_at")

    def has_add_permission(self, request):
        return False
