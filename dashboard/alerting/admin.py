"""The admins of alerting: channels, routes, silences and the notification outbox, each audited
(dashboard.audit.admin.AuditedAdmin), registered by dashboard/admin.py (`register`).

A channel's URL carries its secrets (webhook tokens, routing keys, passwords): it is never shown
whole once saved (the list, the change form and the audit log show it masked by
dashboard.alerting.channels.masked; the form takes a new URL, or keeps the old one when left
blank). Its kind is derived from the URL on save; a URL apprise does not understand, or of a
kind not supported, is a form error naming the problem.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.utils import timezone

from dashboard.alerting import channels, outbox
from dashboard.alerting.actions import SILENCE_MAX_S, silence_subject
from dashboard.audit.actor import Actor
from dashboard.audit.admin import AuditedAdmin, ReadOnlyAuditedAdmin
from dashboard.audit.services import model_snapshot
from dashboard.models import Channel, Notification, Route, Silence
from streamoffsets.evaluation import Status
from streamoffsets.urls import mask_secrets

RECENT_NOTIFICATIONS = 10


# --- channels --------------------------------------------------------------------------------------------


class ChannelAdminForm(forms.ModelForm):
    # Never rendered with its value: the saved URL holds secrets; its masked form is the placeholder.
    url = forms.CharField(max_length=2000, required=False, label="URL", widget=forms.TextInput(attrs={"size": 80}),
                          help_text="An apprise URL, e.g. slack://T000/B000/XXXX or json://hooks.example.com/offsetwatch "
                                    "(docs/alerting.md). Saved URLs are not shown: leave blank to keep it.")

    class Meta:
        model = Channel
        fields = ("name", "url", "enabled")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["url"] = ""
        if self.instance.pk:
            self.fields["url"].widget.attrs["placeholder"] = channels.masked(self.instance.url)

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        if not url:
            if self.instance.pk:
                return self.instance.url  # kept
            raise forms.ValidationError("a channel needs its URL")
        try:
            self.instance.kind = channels.channel_kind(url)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return url


class ChannelAdmin(AuditedAdmin):
    form = ChannelAdminForm
    list_display = ("name", "kind", "url_masked", "enabled", "last_notification")
    list_filter = ("kind", "enabled")
    readonly_fields = ("kind", "recent_notifications")
    actions = ["send_test"]
    audit_kind = "channel"
    change_form_template = "admin/dashboard/channel/change_form.html"

    def get_fields(self, request, obj=None):
        return ("name", "url", "kind", "enabled", "recent_notifications") if obj else ("name", "url", "enabled")

    def audit_subject(self, obj) -> str:
        return f"channel {obj.name}"

    def audit_snapshot(self, obj) -> dict:
        values = model_snapshot(obj, fields=["name", "enabled"])
        values["kind"], values["url"] = obj.kind, channels.masked(obj.url)  # kind: not editable, derived
        if getattr(obj, "_audit_url_secret", None):
            values["url_secret"] = obj._audit_url_secret
        return values

    def save_model(self, request, obj, form, change):
        request._channel_url_replaced = change and "url" in form.changed_data and \
            Channel.objects.filter(pk=obj.pk).exclude(url=obj.url).exists()
        super().save_model(request, obj, form, change)

    def audit_saved(self, request, obj, before: dict | None, change: bool) -> None:
        if change and getattr(request, "_channel_url_replaced", False):
            # The masked forms may be equal (a new token): say the URL was replaced, never how.
            before = {**(before or {}), "url_secret": "previous"}
            obj._audit_url_secret = "replaced"
        super().audit_saved(request, obj, before, change)

    @admin.display(description="URL")
    def url_masked(self, obj) -> str:
        return channels.masked(obj.url)

    @admin.display(description="last notification")
    def last_notification(self, obj) -> str:
        n = obj.notifications.order_by("-created_at").first()
        if n is None:
            return "none yet"
        return f"{n.status} ({n.event}, {timezone.localtime(n.created_at):%Y-%m-%d %H:%M})"

    @admin.display(description="recent notifications")
    def recent_notifications(self, obj) -> str:
        rows = list(obj.notifications.order_by("-created_at")[:RECENT_NOTIFICATIONS])
        if not rows:
            return "none yet"
        return "\n".join(
            f"{timezone.localtime(n.created_at):%Y-%m-%d %H:%M:%S} {n.event}: {n.status}"
            + (f" after {n.attempts} attempt(s): {mask_secrets(n.last_error)}" if n.last_error else "")
            for n in rows)

    @admin.action(description="Send a test message to the selected channels", permissions=["change"])
    def send_test(self, request, queryset):
        for channel in queryset:
            self._send_test(request, channel)

    def _send_test(self, request, channel: Channel) -> None:
        row = outbox.channel_test(channel=channel, actor=Actor.of_request(request))
        state = "" if channel.enabled else " (the channel is disabled: it will be marked failed)"
        self.message_user(request, f"test message #{row.pk} queued for {channel.name}{state}; its status shows "
                                   "under recent notifications in a few seconds", messages.SUCCESS)

    def response_change(self, request, obj):
        if "_send_test" in request.POST and self.has_change_permission(request, obj):
            self._send_test(request, obj)
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)


# --- routes --------------------------------------------------------------------------------------------------

_ROUTE_STATUSES = [(s.name, s.name) for s in Status if s is not Status.OK]


class RouteAdminForm(forms.ModelForm):
    statuses = forms.MultipleChoiceField(
        choices=_ROUTE_STATUSES, required=False, widget=forms.CheckboxSelectMultiple,
        help_text="Incidents opened at, or worsened to, one of these are sent; none: no incident (rewinds only)")

    class Meta:
        model = Route
        fields = ("name", "channel", "store_pattern", "topic_pattern", "group_pattern", "owner_pattern",
                  "statuses", "rewinds", "enabled")
        help_texts = {name: "a shell glob (payments-*), case-sensitive; blank matches anything" for name in
                      ("store_pattern", "topic_pattern", "group_pattern", "owner_pattern")}


class RouteAdmin(AuditedAdmin):
    form = RouteAdminForm
    list_display = ("name", "channel", "store_pattern", "topic_pattern", "group_pattern", "owner_pattern",
                    "statuses_shown", "rewinds", "enabled")
    list_filter = ("enabled", "channel")
    audit_kind = "route"

    def audit_subject(self, obj) -> str:
        return f"route {obj.name} to channel {obj.channel.name}"

    @admin.display(description="statuses")
    def statuses_shown(self, obj) -> str:
        return ", ".join(obj.statuses or []) or "(rewinds only)"


# --- silences -----------------------------------------------------------------------------------------------


class SilenceAdminForm(forms.ModelForm):
    class Meta:
        model = Silence
        fields = ("pipeline", "store_pattern", "topic_pattern", "group_pattern", "owner_pattern", "starts_at",
                  "ends_at", "reason", "cancelled_at")

    def clean(self):
        data = super().clean()
        patterns = [data.get(n) for n in ("store_pattern", "topic_pattern", "group_pattern", "owner_pattern")]
        if data.get("pipeline") and any(patterns):
            raise forms.ValidationError("silence either one pipeline or the pipelines matching patterns, not both")
        if not data.get("pipeline") and not any(patterns):
            raise forms.ValidationError("choose a pipeline or give at least one pattern")
        starts, ends = data.get("starts_at"), data.get("ends_at")
        if starts and ends:
            if ends <= starts:
                self.add_error("ends_at", "a silence ends after it starts")
            elif (ends - starts).total_seconds() > SILENCE_MAX_S:
                self.add_error("ends_at", f"a silence lasts at most {SILENCE_MAX_S // 86400} days")
        if not (data.get("reason") or "").strip():
            self.add_error("reason", "say why")
        return data


class SilenceAdmin(AuditedAdmin):
    form = SilenceAdminForm
    list_display = ("what", "starts_at", "ends_at", "cancelled_at", "created_by", "reason")
    list_filter = ("cancelled_at",)
    raw_id_fields = ("pipeline",)
    audit_kind = "silence"

    def audit_subject(self, obj) -> str:
        return silence_subject(obj)

    def audit_pipeline(self, obj):
        return obj.pipeline

    @admin.display(description="silences")
    def what(self, obj) -> str:
        return silence_subject(obj).split(" of ", 1)[-1]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


# --- the outbox ----------------------------------------------------------------------------------------------


class NotificationAdmin(ReadOnlyAuditedAdmin):
    """The outbox's rows: shown (the reason a delivery failed, secrets masked), deleted audited."""

    list_display = ("created_at", "channel", "event", "status", "attempts", "pipeline", "sent_at", "error")
    list_filter = ("status", "event", "channel")
    list_select_related = ("channel", "pipeline")
    readonly_fields = ("channel", "event", "incident", "pipeline", "title", "body", "status", "attempts",
                       "next_attempt_at", "error", "created_at", "sent_at")
    exclude = ("last_error",)
    audit_kind = "notification"

    def audit_subject(self, obj) -> str:
        return f"notification #{obj.pk} ({obj.event}) to channel {obj.channel.name}"

    def audit_pipeline(self, obj):
        return obj.pipeline

    def audit_snapshot(self, obj) -> dict:
        values = model_snapshot(obj, fields=["channel", "event", "incident", "pipeline", "title", "status",
                                             "attempts", "created_at", "sent_at"])
        values["last_error"] = mask_secrets(obj.last_error)
        return values

    @admin.display(description="last error")
    def error(self, obj) -> str:
        return mask_secrets(obj.last_error)


def register(site: admin.AdminSite) -> None:
    for model, model_admin in ((Channel, ChannelAdmin), (Route, RouteAdmin), (Silence, SilenceAdmin),
                               (Notification, NotificationAdmin)):
        site.register(model, model_admin)

