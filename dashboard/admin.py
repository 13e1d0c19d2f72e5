from django.contrib import admin

from dashboard.models import Cluster, Pipeline, SourceHealth, Store, StoreProblem


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
