"""The audited admin base: every change made through a model admin built on AuditedAdmin appends
an audit event in the change's transaction (additions, changes with their many-to-many fields,
deletions one by one or "delete selected"). Here, not in dashboard/admin.py, so that the admins of
an area (dashboard/alerting/admin.py) build on it and dashboard/admin.py registers them without
an import cycle."""
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.db import transaction

from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append, changed_values, model_snapshot


def _related_names(obj, field) -> list[str]:
    """A many-to-many field's values as a reader knows them: permissions by `app.codename`
    (what a permission check names), anything else by its text."""
    related = getattr(obj, field.name).all()
    if field.related_model is Permission:
        return sorted(f"{p.content_type.app_label}.{p.codename}" for p in related.select_related("content_type"))
    return sorted(str(r) for r in related)


def admin_snapshot(obj, *, fields: list[str] | None = None) -> dict:
    """model_snapshot plus the many-to-many fields (a group's permissions, a user's groups and
    direct permissions), which the admin saves after the row itself."""
    values = model_snapshot(obj, fields=fields)
    if obj.pk is not None:
        for field in obj._meta.many_to_many:
            if fields is None or field.name in fields:
                values[field.name] = _related_names(obj, field)
    return values


def list_changes(before: dict, after: dict) -> dict:
    """What was added to and removed from each list-valued field (`permissions_added`, ...)."""
    details = {}
    for key, new in after.items():
        old = before.get(key)
        if isinstance(new, list) and isinstance(old, list):
            details[f"{key}_added"] = sorted(set(new) - set(old))
            details[f"{key}_removed"] = sorted(set(old) - set(new))
    return details


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
    changed fields before and after, many-to-many fields included) in the same transaction as
    the change (the admin's change form runs in one; save_related opens one anyway)."""

    audit_kind = ""  # the action family: "store" -> store.created / store.changed / store.deleted

    def audit_subject(self, obj) -> str:
        return f"{self.audit_kind} {obj}"

    def audit_pipeline(self, obj):
        """The pipeline an event is about (filtering the log by pipeline finds it), if any."""
        return None

    def audit_snapshot(self, obj) -> dict:
        return admin_snapshot(obj)

    def save_model(self, request, obj, form, change):
        # What the row was, read before the save. The event is written in save_related, once the
        # many-to-many fields (saved after the row) hold their new values too.
        request._audit_before = self.audit_snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        with transaction.atomic():
            super().save_related(request, form, formsets, change)
            self.audit_saved(request, form.instance, getattr(request, "_audit_before", None), change)

    def audit_saved(self, request, obj, before: dict | None, change: bool) -> None:
        after = self.audit_snapshot(obj)
        details = {"id": obj.pk}
        if change:
            before, after = changed_values(before or {}, after)
            if not after:  # saved without a change: nothing happened worth a record
                return
            details.update(list_changes(before, after))
        audit_append(action=f"{self.audit_kind}.{'changed' if change else 'created'}",
                     subject=self.audit_subject(obj), pipeline=self.audit_pipeline(obj), before=before,
                     after=after, details=details, actor=Actor.of_request(request))

    def _audit_deletion(self, request, obj) -> None:
        audit_append(action=f"{self.audit_kind}.deleted", subject=self.audit_subject(obj),
                     pipeline=self.audit_pipeline(obj), before=self.audit_snapshot(obj), after=None,
                     details={"id": obj.pk, **self.audit_deletion_details(obj)}, actor=Actor.of_request(request))

    def audit_deletion_details(self, obj) -> dict:
        return {}


class ReadOnlyAuditedAdmin(AuditedAdmin):
    """Rows the collectors or the jobs write: shown, and deleted (audited), never added or edited
    by hand (an edited incident or start report would be a false record)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
