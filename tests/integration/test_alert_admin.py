"""The admin of alerting (issue #15): a channel's kind from its URL, its URL never shown or
recorded whole, "send test" through the outbox, routes' statuses as checkboxes, the outbox's rows
read-only; a pipeline's owner and retired flag edited and audited. Every change's audit event is
checked by tests/integration/test_audit_coverage.py; here, what each admin adds."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEvent, Channel, Notification, Route
from tests.factories import pipeline_row

pytestmark = pytest.mark.django_db

SECRET = "TIiajkdnlazkcOXrIdevi7FQ"
SLACK = f"slack://T1JJ3T3L2/A1BRTD4JD/{SECRET}"


@pytest.fixture
def root(db) -> Client:
    client = Client(REMOTE_ADDR="198.51.100.30")
    client.force_login(User.objects.create_superuser("root", "root@example.com", None))
    return client


def _add_channel(client, url: str, name: str = "on-call"):
    return client.post(reverse("admin:dashboard_channel_add"), {"name": name, "url": url, "enabled": "on"})


@pytest.mark.parametrize("url,expected", [
    ("not a url", "not a channel URL (no scheme://)"),
    ("tgram://123456789:abcdefg_hijklmnop/12315544/", "Telegram channels are not supported"),
])
def test_a_channel_url_apprise_cannot_use_is_a_form_error(root, url, expected):
    response = _add_channel(root, url)
    assert response.status_code == 200 and expected in response.content.decode()
    assert not Channel.objects.exists() and not AuditEvent.objects.filter(action="channel.created").exists()


def test_the_kind_comes_from_the_url_and_the_secret_is_never_shown_or_recorded(root):
    assert _add_channel(root, SLACK).status_code == 302
    channel = Channel.objects.get()
    assert channel.kind == "slack" and channel.url == SLACK
    listing = root.get(reverse("admin:dashboard_channel_changelist")).content.decode()
    assert channel.name in listing and SECRET not in listing and "Slack" in listing
    form = root.get(reverse("admin:dashboard_channel_change", args=[channel.pk])).content.decode()
    assert SECRET not in form and 'id="send-test"' in form
    event = AuditEvent.objects.get(action="channel.created")
    assert event.after["kind"] == "slack" and event.after["url"].startswith("slack://")
    assert SECRET not in json.dumps([event.before, event.after, event.details, event.subject])

    # A blank URL keeps the saved one; a new token is recorded as replaced, never shown.
    response = root.post(reverse("admin:dashboard_channel_change", args=[channel.pk]), {"name": "on-call", "url": ""})
    assert response.status_code == 302 and Channel.objects.get().url == SLACK
    new_secret = "ZZiajkdnlazkcOXrIdevi7QQ"
    response = root.post(reverse("admin:dashboard_channel_change", args=[channel.pk]),
                         {"name": "on-call", "url": SLACK.replace(SECRET, new_secret), "enabled": "on"})
    assert response.status_code == 302
    event = AuditEvent.objects.filter(action="channel.changed").latest("id")
    assert (event.before["url_secret"], event.after["url_secret"]) == ("previous", "replaced")
    assert new_secret not in json.dumps([event.before, event.after]) and SECRET not in json.dumps([event.before, event.after])


def test_send_test_goes_through_the_outbox_and_is_audited(root):
    channel = Channel.objects.create(name="hooks", kind="webhook", url="json://hooks.example.com/offsetwatch")
    response = root.post(reverse("admin:dashboard_channel_changelist"),
                         {"action": "send_test", "_selected_action": [channel.pk]}, follow=True)
    assert "Test message #" in response.content.decode() and "queued for hooks" in response.content.decode()
    n = Notification.objects.get(channel=channel)
    assert n.event == "channel.test" and n.status == Notification.Status.PENDING
    assert AuditEvent.objects.get(action="channel.tested").details == {"channel": channel.pk, "notification": n.pk}
    # The change form's button does the same, then shows the row's status.
    response = root.post(reverse("admin:dashboard_channel_change", args=[channel.pk]),
                         {"name": "hooks", "url": "", "enabled": "on", "_send_test": "1"}, follow=True)
    assert response.status_code == 200 and Notification.objects.filter(channel=channel).count() == 2
    assert "channel.test: pending" in response.content.decode()
    assert AuditEvent.objects.filter(action="channel.tested").count() == 2


def test_route_statuses_are_checkboxes(root):
    channel = Channel.objects.create(name="hooks", kind="webhook", url="json://hooks.example.com/offsetwatch")
    form = root.get(reverse("admin:dashboard_route_add")).content.decode()
    assert 'type="checkbox" name="statuses" value="STALLED"' in form and 'value="OK"' not in form
    response = root.post(reverse("admin:dashboard_route_add"), {
        "name": "payments", "channel": channel.pk, "owner_pattern": "team-pay*", "statuses": ["STOPPED", "ERR"],
        "enabled": "on"})
    assert response.status_code == 302
    route = Route.objects.get()
    assert route.statuses == ["STOPPED", "ERR"] and route.rewinds is False and route.owner_pattern == "team-pay*"
    assert AuditEvent.objects.get(action="route.created").after["statuses"] == ["STOPPED", "ERR"]
    response = root.post(reverse("admin:dashboard_route_add"), {"name": "bad", "channel": channel.pk,
                                                                "statuses": ["CRITICAL"]})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()


def test_notifications_are_read_only_and_filtered_by_status(root):
    channel = Channel.objects.create(name="hooks", kind="webhook", url="json://hooks.example.com/offsetwatch")
    now = datetime.now(timezone.utc)
    failed = Notification.objects.create(channel=channel, event="incident.opened", title="t", body="b", status="failed",
                                         last_error="refused by https://user:pa55word@hooks.example.com/x",
                                         next_attempt_at=now, created_at=now)
    Notification.objects.create(channel=channel, event="channel.test", title="t", body="b", status="sent",
                                next_attempt_at=now, created_at=now)
    listing = root.get(reverse("admin:dashboard_notification_changelist"), {"status__exact": "failed"}).content.decode()
    assert '<td class="field-event">incident.opened</td>' in listing and "pa55word" not in listing
    assert '<td class="field-event">channel.test</td>' not in listing
    change_url = reverse("admin:dashboard_notification_change", args=[failed.pk])
    assert "pa55word" not in root.get(change_url).content.decode()
    assert root.post(change_url, {"status": "sent"}).status_code == 403
    assert root.get(reverse("admin:dashboard_notification_add")).status_code == 403


def test_a_pipelines_owner_and_retired_flag_are_edited_and_audited(root, unique_name):
    p = pipeline_row(unique_name("own"))
    response = root.post(reverse("admin:dashboard_pipeline_change", args=[p.pk]), {
        "store": p.store_id, "topic": p.topic, "group": p.group, "owner": "team-payments", "retired": "on"})
    assert response.status_code == 302
    p.refresh_from_db()
    assert (p.owner, p.retired) == ("team-payments", True)
    event = AuditEvent.objects.get(action="pipeline.changed")
    assert event.before == {"owner": "", "retired": False} and event.after == {"owner": "team-payments", "retired": True}
    assert event.pipeline_id == p.pk
