"""The admin: every change made here appends an audit event in the change's transaction.

Every registered model admin is an AuditedAdmin (dashboard/audit/admin.py;
tests/integration/test_audit_coverage.py walks admin.site's registry and fails for one that is
not): additions, changes (many-to-many fields such as a group's permissions included) and
deletions. The alerting admins (channels, routes, silences, notifications) are in
dashboard/alerting/admin.py, registered here. Rows the collectors or the jobs write
(source health, store problems, incidents, start reports) are read-only here; deleting them is
allowed and audited.
"""
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db import transaction

from dashboard.accounts.lockout import attempt_subject, unlocking_by
from dashboard.accounts.tokens import api_token_revoke, pipeline_token_revoke
from dashboard.alerting import admin as alerting_admin
from dashboard.audit.actor import Actor
from dashboard.audit.admin import AuditedAdmin, ReadOnlyAuditedAdmin, admin_snapshot, list_changes
from dashboard.audit.services import audit_append, changed_values, model_snapshot
from dashboard.models import ApiToken, Cluster, Incident, Pipeline, PipelineToken, SourceHealth, StartReport, Store, StoreProblem
from dashboard.monitoring.forms import StoreAdminForm


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
    list_display = ("topic", "group", "store", "owner", "retired", "archived_at", "first_seen_at")
    list_filter = ("store", "retired")
    search_fields = ("topic", "group", "owner")
    audit_kind = "pipeline"
    # What a person declares (the owning team matched by alert routes and silences; retired: the job
    # is gone, archive it once silent); the collectors' bookkeeping (newest batch times, import
    # flag, when it was archived) is theirs, shown read-only.
    fields = ("store", "topic", "group", "owner", "retired", "archived_at")
    readonly_fields = ("archived_at",)

    def audit_subject(self, obj) -> str:
        return f"pipeline {obj} in store {obj.store.name}"

    def audit_pipeline(self, obj):
        return obj

    def audit_snapshot(self, obj) -> dict:
        # What a person edits; the collectors' bookkeeping (recent batch times, import flag) is not a change of theirs.
        return model_snapshot(obj, fields=["store", "topic", "group", "owner", "retired"])


@admin.register(SourceHealth)
class SourceHealthAdmin(ReadOnlyAuditedAdmin):
    list_display = ("label", "last_success_at", "consecutive_failures", "last_error_at")
    audit_kind = "source_health"

    def audit_subject(self, obj) -> str:
        return f"health of {obj.label}"


@admin.register(StoreProblem)
class StoreProblemAdmin(ReadOnlyAuditedAdmin):
    list_display = ("store", "key", "problem", "occurrences", "last_seen_at")
    audit_kind = "store_problem"

    def audit_subject(self, obj) -> str:
        return f"problem of store {obj.store.name}: {obj.key}"


class TokenAdmin(AuditedAdmin):
    """Tokens are issued by management commands (shown once); here they are listed, revoked (an
    action, so every revocation goes through the service that audits it) and deleted."""

    audit_kind = "token"
    actions = ["revoke"]
    # Every field is read-only (below): a token is changed only by revoking it.

    def has_add_permission(self, request):
        return False

    def audit_snapshot(self, obj) -> dict:
        return model_snapshot(obj, fields=["name", "prefix", "pipeline", "user", "revoked_at"])  # never the hash

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        revoke = pipeline_token_revoke if queryset.model is PipelineToken else api_token_revoke
        count = 0
        with transaction.atomic():
            for token in queryset.filter(revoked_at=None):
                revoke(token=token, actor=Actor.of_request(request))
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
class StartReportAdmin(ReadOnlyAuditedAdmin):
    list_display = ("pipeline", "received_at", "first_start", "clamped_partitions", "messages_lost")
    audit_kind = "start_report"

    def audit_subject(self, obj) -> str:
        return f"start report #{obj.pk} of {obj.pipeline}"

    def audit_pipeline(self, obj):
        return obj.pipeline


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAuditedAdmin):
    list_display = ("pipeline", "partition", "opened_at", "closed_at", "worst_status")
    audit_kind = "incident"

    def audit_subject(self, obj) -> str:
        of = obj.pipeline if obj.partition is None else f"{obj.pipeline} partition {obj.partition}"
        return f"incident #{obj.pk} of {of} opened {obj.opened_at.isoformat(timespec='seconds')}"

    def audit_pipeline(self, obj):
        return obj.pipeline


@admin.register(ApiToken)
class ApiTokenAdmin(TokenAdmin):
    list_display = ("prefix", "name", "user", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("user", "name", "prefix", "token_hash", "created_at", "last_used_at", "revoked_at")

    def audit_subject(self, obj) -> str:
        return f"API token {obj.prefix}… ({obj.name}) acting as {obj.user.get_username()}"


alerting_admin.register(admin.site)  # channels, routes, silences, notifications


# --- users and groups: Django's own admins, audited ---------------------------------------------

User = get_user_model()
admin.site.unregister(User)
admin.site.unregister(Group)

_USER_FIELDS = ["username", "email", "first_name", "last_name", "is_active", "is_staff", "is_superuser"]
# What a user may do: roles are groups, direct permissions add to them, superuser status grants
# everything, staff status opens the admin, an inactive account can do nothing.
_USER_ACCESS = {"is_active", "is_staff", "is_superuser", "groups", "user_permissions"}


@admin.register(User)
class AuditedUserAdmin(AuditedAdmin, UserAdmin):
    """Django's user admin, with creation, changes, password changes and deletion audited. A
    change of access (flags, groups, direct permissions) is its own event, `user.roles_changed`,
    with what was added and removed. Never the password or its hash."""

    audit_kind = "user"

    def audit_subject(self, obj) -> str:
        return f"user {obj.get_username()}"

    def audit_snapshot(self, obj) -> dict:
        return admin_snapshot(obj, fields=[*_USER_FIELDS, "groups", "user_permissions"])

    def audit_saved(self, request, obj, before: dict | None, change: bool) -> None:
        after = self.audit_snapshot(obj)
        if not change:
            audit_append(action="user.created", subject=self.audit_subject(obj),
                         after={**after, "password": "set" if obj.has_usable_password() else "none"},
                         details={"user_id": obj.pk}, actor=Actor.of_request(request))
            return
        before, after = changed_values(before or {}, after)
        for action, keys in (("user.changed", set(after) - _USER_ACCESS), ("user.roles_changed", set(after) & _USER_ACCESS)):
            if keys:
                old, new = {k: before[k] for k in before if k in keys}, {k: after[k] for k in after if k in keys}
                audit_append(action=action, subject=self.audit_subject(obj), before=old, after=new,
                             details={"user_id": obj.pk, **list_changes(old, new)}, actor=Actor.of_request(request))

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic():  # the new password and its event commit together
            response = super().user_change_password(request, id, form_url)
            # Success is a redirect after a POST; a refused password renders the form again.
            if request.method == "POST" and response.status_code == 302:
                user = User.objects.get(pk=id)
                audit_append(action="user.password_changed", subject=f"user {user.get_username()}",
                             after={"password": "set" if user.has_usable_password() else "none"},
                             details={"user_id": user.pk}, actor=Actor.of_request(request))
        return response

    def _audit_deletion(self, request, obj) -> None:
        audit_append(action="user.deleted", subject=self.audit_subject(obj), before=self.audit_snapshot(obj),
                     details={"user_id": obj.pk}, actor=Actor.of_request(request))


@admin.register(Group)
class AuditedGroupAdmin(AuditedAdmin, GroupAdmin):
    """Django's group admin (the roles are groups), audited: a change of a group's permissions
    names the permissions added and removed (`permissions_added`, `permissions_removed`)."""

    audit_kind = "group"

    def audit_subject(self, obj) -> str:
        return f"group {obj.name}"

    def audit_deletion_details(self, obj) -> dict:
        # Its members lose what it granted.
        return {"members": sorted(obj.user_set.values_list("username", flat=True))}


# django-axes' models, audited: registered from the app's ready(), after the admin registered axes' own.
def register_lockout_admin() -> None:
    """Replace axes' admins with audited ones (every admin is: tests/integration/test_audit_coverage.py walks
    the registry). Deleting access attempts is an unlock when one was in force, named with the
    admin who did it; attempts and failure logs are read-only rows whose deletion is audited;
    the success log is off (AXES_DISABLE_ACCESS_LOG), so its admin is not shown. Called from the
    app's ready(), after the admin registered axes'."""
    from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django.contrib import admin

    class AuditedAccessAttemptAdmin(ReadOnlyAuditedAdmin, AccessAttemptAdmin):
        audit_kind = "login_attempt"

        def audit_subject(self, obj) -> str:
            return f"login attempts {attempt_subject(obj.username or '', obj.ip_address)}"

        def delete_model(self, request, obj):
            with unlocking_by(Actor.of_request(request)):
                super().delete_model(request, obj)

        def delete_queryset(self, request, queryset):
            with unlocking_by(Actor.of_request(request)):
                super().delete_queryset(request, queryset)

    class AuditedAccessFailureLogAdmin(ReadOnlyAuditedAdmin, AccessFailureLogAdmin):
        audit_kind = "login_failure"

        def audit_subject(self, obj) -> str:
            return f"login failure {attempt_subject(obj.username or '', obj.ip_address)}"

    for model, model_admin in ((AccessAttempt, AuditedAccessAttemptAdmin),
                               (AccessFailureLog, AuditedAccessFailureLogAdmin), (AccessLog, None)):
        if admin.site.is_registered(model):
            admin.site.unregister(model)
        if model_admin is not None:
            admin.site.register(model, model_admin)
