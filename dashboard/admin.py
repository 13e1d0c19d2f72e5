from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import transaction

from dashboard import services
from dashboard.audit import audit_append, changed_values, model_snapshot, request_actor
from dashboard.forms import StoreAdminForm
from dashboard.models import ApiToken, Cluster, Incident, Pipeline, PipelineToken, SourceHealth, StartReport, Store, StoreProblem


class AuditedDeletionMixin:
    """Deletions in the admin, one by one or "delete selected", append one audit event per row
    (the class's `_audit_deletion`) in the deletion's transaction, before the row goes."""

    def delete_model(self, request, obj):
        with transaction.atomic():
            self._audit_deletion(request, obj)  # first: the event still sees the row and its relations
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset:
                self._audit_deletion(request, obj)
            super().delete_queryset(request, queryset)


class AuditedAdmin(AuditedDeletionMixin, admin.ModelAdmin):
    """Adds, changes and deletes made in the admin append audit events (who, from where, the
    changed fields before and after) in the same transaction as the change."""

    audit_kind = ""  # the action family: "store" -> store.created / store.changed / store.deleted

    def audit_subject(self, obj) -> str:
        return f"{self.audit_kind} {obj}"

    def audit_pipeline(self, obj):
        """The pipeline an event is about (filtering the log by pipeline finds it), if any."""
        return None

    def audit_snapshot(self, obj) -> dict:
        return model_snapshot(obj)

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            before = self.audit_snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
            super().save_model(request, obj, form, change)
            after = self.audit_snapshot(obj)
            if change:
                before, after = changed_values(before, after)
                if not after:  # saved without a change: nothing happened worth a record
                    return
            audit_append(action=f"{self.audit_kind}.{'changed' if change else 'created'}",
                         subject=self.audit_subject(obj), pipeline=self.audit_pipeline(obj), before=before,
                         after=after, details={"id": obj.pk}, **request_actor(request))

    def _audit_deletion(self, request, obj) -> None:
        audit_append(action=f"{self.audit_kind}.deleted", subject=self.audit_subject(obj),
                     pipeline=self.audit_pipeline(obj), before=self.audit_snapshot(obj), after=None,
                     details={"id": obj.pk, **self.audit_deletion_details(obj)}, **request_actor(request))

    def audit_deletion_details(self, obj) -> dict:
        return {}



@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    list_display = ("name", "bootstrap_servers")
    audit_kind = "cluster"


@admin.register(Store)
class StoreAdmin(AuditedAdmin):
    form = StoreAdminForm  # the URL checked by kind and the server asked what it is
    list_display = ("name", "kind", "url", "cluster", "enabled")
    audit_kind = "store"

    def audit_deletion_details(self, obj) -> dict:
        # Its pipelines (and their history) go with it; each is not recorded on its own.
        return {"pipelines_deleted": obj.pipelines.count()}


@admin.register(Pipeline)
class PipelineAdmin(AuditedAdmin):
    list_display = ("topic", "group", "store", "first_seen_at")
    list_filter = ("store",)
    audit_kind = "pipeline"

    def audit_subject(self, obj) -> str:
        return f"pipeline {obj} in store {obj.store.name}"

    def audit_pipeline(self, obj):
        return obj

    def audit_snapshot(self, obj) -> dict:
        # What a person edits; the collectors' bookkeeping (recent batch times, import flag) is not a change of theirs.
        return model_snapshot(obj, fields=["store", "topic", "group"])


@admin.register(SourceHealth)
class SourceHealthAdmin(admin.ModelAdmin):
    list_display = ("label", "last_success_at", "consecutive_failures", "last_error_at")


@admin.register(StoreProblem)
class StoreProblemAdmin(admin.ModelAdmin):
    list_display = ("store", "key", "problem", "occurrences", "last_seen_at")


class TokenAdmin(AuditedAdmin):
    """Tokens are issued by management commands (shown once); here they are listed, revoked (an
    action, so every revocation goes through the service that audits it) and deleted."""

    audit_kind = "token"
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def audit_snapshot(self, obj) -> dict:
        return model_snapshot(obj, fields=["name", "prefix", "pipeline", "user", "revoked_at"])  # never the hash

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        revoke = services.pipeline_token_revoke if queryset.model is PipelineToken else services.api_token_revoke
        count = 0
        with transaction.atomic():
            for token in queryset.filter(revoked_at=None):
                revoke(token=token, **request_actor(request))
                count += 1
        self.message_user(request, f"revoked {count} token(s)", messages.SUCCESS)


@admin.register(PipelineToken)
class PipelineTokenAdmin(TokenAdmin):
    list_display = ("prefix", "name", "pipeline", "created_at", "revoked_at")
    readonly_fields = ("pipeline", "name", "prefix", "token_hash", "created_at", "revoked_at")

    def audit_subject(self, obj) -> str:
        return f"pipeline token {obj.prefix}… ({obj.name}) for {obj.pipeline}"

    def audit_pipeline(self, obj):
        return obj.pipeline


@admin.register(StartReport)
class StartReportAdmin(admin.ModelAdmin):
    list_display = ("pipeline", "received_at", "first_start", "clamped_partitions", "messages_lost")


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ("pipeline", "opened_at", "closed_at", "worst_status")


@admin.register(ApiToken)
class ApiTokenAdmin(TokenAdmin):
    list_display = ("prefix", "name", "user", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("user", "name", "prefix", "token_hash", "created_at", "last_used_at", "revoked_at")

    def audit_subject(self, obj) -> str:
        return f"API token {obj.prefix}… ({obj.name}) acting as {obj.user.get_username()}"


# --- users: Django's own admin, audited ----------------------------------------------------------

User = get_user_model()
admin.site.unregister(User)

_USER_FIELDS = ["username", "email", "first_name", "last_name", "is_active", "is_staff", "is_superuser"]


def _groups(user) -> list[str]:
    return sorted(user.groups.values_list("name", flat=True))


@admin.register(User)
class AuditedUserAdmin(AuditedDeletionMixin, UserAdmin):
    """Django's user admin, with creation, changes (roles are groups; superuser status grants
    every role), password changes and deletion audited. Never the password or its hash."""

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            old = User.objects.get(pk=obj.pk) if change else None
            # The groups are saved after this (save_related); what they were is kept for it.
            request._audit_groups_before = _groups(old) if change else []
            super().save_model(request, obj, form, change)
            if not change:
                after = {**model_snapshot(obj, fields=_USER_FIELDS),
                         "password": "set" if obj.has_usable_password() else "none"}
                audit_append(action="user.created", subject=f"user {obj.get_username()}", after=after,
                             details={"user_id": obj.pk}, **request_actor(request))
                return
            before, after = changed_values(model_snapshot(old, fields=_USER_FIELDS),
                                           model_snapshot(obj, fields=_USER_FIELDS))
            if after:
                audit_append(action="user.roles_changed" if "is_superuser" in after else "user.changed",
                             subject=f"user {obj.get_username()}", before=before, after=after,
                             details={"user_id": obj.pk}, **request_actor(request))

    def save_related(self, request, form, formsets, change):
        with transaction.atomic():
            super().save_related(request, form, formsets, change)
            before, after = getattr(request, "_audit_groups_before", []), _groups(form.instance)
            if before != after:
                audit_append(action="user.roles_changed", subject=f"user {form.instance.get_username()}",
                             before={"groups": before}, after={"groups": after},
                             details={"user_id": form.instance.pk}, **request_actor(request))

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic():  # the new password and its event commit together
            response = super().user_change_password(request, id, form_url)
            # Success is a redirect after a POST; a refused password renders the form again.
            if request.method == "POST" and response.status_code == 302:
                user = User.objects.get(pk=id)
                audit_append(action="user.password_changed", subject=f"user {user.get_username()}",
                             after={"password": "set" if user.has_usable_password() else "none"},
                             details={"user_id": user.pk}, **request_actor(request))
        return response

    def _audit_deletion(self, request, obj) -> None:
        audit_append(action="user.deleted", subject=f"user {obj.get_username()}",
                     before={**model_snapshot(obj, fields=_USER_FIELDS), "groups": _groups(obj)},
                     details={"user_id": obj.pk}, **request_actor(request))

