"""The notification outbox (dashboard.alerting.outbox) against the JSON-webhook peer (tests/peers): delivered once,
retried with backoff on failures until sent, given up with the reason after the retries, never
sent twice by two workers, nothing sent to a disabled channel; the admin's test message."""
from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from dashboard.alerting import outbox
from dashboard.audit.actor import Actor
from dashboard.models import AuditEvent, Channel, Notification
from dashboard.monitoring.pruning import history_prune
from tests.peers.network import SECRETS

pytestmark = pytest.mark.django_db(transaction=True)


def enqueue(channel: Channel, title="[Offset Watch] ERR: orders / etl (prod)") -> Notification:
    [row] = outbox.notifications_enqueue([outbox.notification_new(channel=channel, event="incident.opened",
                                                                  title=title, body="stopped", now=timezone.now())])
    return row


@pytest.fixture
def hook(peers):
    return Channel.objects.create(name="hook", kind="webhook", url=peers.urls["webhook"])


def titles(peers) -> list[str]:
    return [r.json["title"] for r in peers.received("webhook") if r.status == 200]


def test_delivered_once(peers, hook):
    n = enqueue(hook)
    assert outbox.notification_deliver(n.pk) == "sent"
    assert outbox.notification_deliver(n.pk) is None  # sent: nothing more to do
    assert outbox.notifications_sweep() == 0
    assert titles(peers) == ["[Offset Watch] ERR: orders / etl (prod)"]


def test_failures_are_retried_with_growing_pauses_until_sent(settings, peers, hook):
    settings.NOTIFY_BACKOFF_S, settings.NOTIFY_RETRIES = 5.0, 5
    peers.fail("webhook", 503, times=2)
    n = enqueue(hook)
    assert outbox.notification_deliver(n.pk) == "pending"
    n.refresh_from_db()
    first_pause = (n.next_attempt_at - timezone.now()).total_seconds()
    assert 3.0 < first_pause <= 5.0 and n.attempts == 1 and n.last_error
    assert outbox.notifications_sweep() == 0  # not due yet
    later = n.next_attempt_at + timedelta(seconds=1)
    assert outbox.notifications_sweep(now=later) == 1
    n.refresh_from_db()
    second_pause = (n.next_attempt_at - timezone.now()).total_seconds()
    assert n.attempts == 2 and 8.0 < second_pause <= 10.0  # doubled
    assert outbox.notifications_sweep(now=n.next_attempt_at + timedelta(seconds=1)) == 1
    n.refresh_from_db()
    assert (n.status, n.attempts, n.last_error) == ("sent", 3, "") and len(peers.received("webhook")) == 3


def test_given_up_after_the_retries_with_the_reason_and_no_secret(settings, peers, hook, caplog):
    settings.NOTIFY_BACKOFF_S, settings.NOTIFY_RETRIES = 0.0, 2
    peers.fail("webhook", 503, times=10)
    n = enqueue(hook)
    with caplog.at_level(logging.INFO):
        statuses = [outbox.notification_deliver(n.pk) for _ in range(4)]
    assert statuses == ["pending", "pending", "failed", None]
    n.refresh_from_db()
    assert n.status == "failed" and n.attempts == 3 and n.last_error
    assert "giving up" in caplog.text and "503" in n.last_error
    assert SECRETS["webhook"][0] not in caplog.text + n.last_error


def test_a_refusal_is_not_retried(peers, hook):
    peers.fail("webhook", 400)
    n = enqueue(hook)
    assert outbox.notification_deliver(n.pk) == "failed"
    n.refresh_from_db()
    assert n.attempts == 1 and "400" in n.last_error


def test_two_workers_never_send_one_message_twice(peers, hook):
    n = enqueue(hook)
    locked, release = threading.Event(), threading.Event()

    def other_worker():  # holds the row as a worker sending it would
        from django.db import transaction

        try:
            with transaction.atomic():
                Notification.objects.select_for_update().get(pk=n.pk)
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    t = threading.Thread(target=other_worker)
    t.start()
    assert locked.wait(10)
    try:
        assert outbox.notification_deliver(n.pk) is None  # skipped, not waited for, not sent
    finally:
        release.set()
        t.join()
    assert peers.received("webhook") == []


def test_nothing_is_sent_to_a_disabled_channel(peers, hook):
    n = enqueue(hook)
    Channel.objects.filter(pk=hook.pk).update(enabled=False)
    assert outbox.notification_deliver(n.pk) == "failed"
    n.refresh_from_db()
    assert n.last_error == "the channel was disabled" and peers.received("webhook") == []


def test_the_admins_test_message_goes_through_the_outbox_and_is_audited(peers, hook, amir):
    n = outbox.channel_test(channel=hook, actor=Actor.of_user(amir, "10.0.0.7"))
    assert outbox.notifications_sweep() == 1
    [got] = peers.received("webhook")
    assert got.json["title"] == "[Offset Watch] test notification" and "amir" in got.json["message"]
    event = AuditEvent.objects.get(action="channel.tested")
    assert (event.actor, event.remote_addr, event.details["notification"]) == ("amir", "10.0.0.7", n.pk)


def test_a_failing_channel_is_said_on_the_overview_and_in_metrics_until_it_delivers_again(peers, hook, client, vera):
    """A failed attempt (retried or given up) marks the channel failing at once: on-call sees that
    its pages are not arriving, on the overview and as offsetwatch_channel_up 0; its URL never shows."""
    client.force_login(vera)
    assert outbox.notification_deliver(enqueue(hook).pk) == "sent"
    hook.refresh_from_db()
    assert not hook.failing and hook.last_sent_at is not None
    assert b"channel-failing" not in client.get("/").content
    assert 'offsetwatch_channel_up{channel="hook",kind="webhook"} 1' in client.get("/metrics").content.decode()

    peers.fail("webhook", 503, times=1)
    assert outbox.notification_deliver(enqueue(hook).pk) == "pending"  # retried later, but failing now
    hook.refresh_from_db()
    assert hook.failing and "503" in hook.last_failure
    page = client.get("/").content.decode()
    assert "channel-failing" in page and "Alert channel hook" in page and "503" in page
    metrics = client.get("/metrics").content.decode()
    assert 'offsetwatch_channel_up{channel="hook",kind="webhook"} 0' in metrics
    for secret in SECRETS["webhook"]:
        assert secret not in page + metrics

    assert outbox.notifications_sweep(now=timezone.now() + timedelta(hours=1)) == 1  # the retry delivers
    hook.refresh_from_db()
    assert not hook.failing
    assert "channel-failing" not in client.get("/").content.decode()


def test_a_disabled_channel_is_not_said_failing(peers, hook, client, vera):
    peers.fail("webhook", 400)
    assert outbox.notification_deliver(enqueue(hook).pk) == "failed"
    client.force_login(vera)
    assert "channel-failing" in client.get("/").content.decode()
    hook.enabled = False
    hook.save()
    assert "channel-failing" not in client.get("/").content.decode()
    assert "offsetwatch_channel_up" not in client.get("/metrics").content.decode()


def test_old_sent_and_failed_notifications_are_pruned_pending_ones_kept(peers, hook, settings):
    settings.RETENTION_BATCHES_S = 3600.0
    sent, failed, pending = enqueue(hook), enqueue(hook), enqueue(hook)
    Notification.objects.filter(pk=sent.pk).update(status="sent")
    Notification.objects.filter(pk=failed.pk).update(status="failed")
    long_ago = timezone.now() - timedelta(hours=2)
    Notification.objects.filter(pk__in=[sent.pk, failed.pk, pending.pk]).update(created_at=long_ago)
    fresh = enqueue(hook)
    Notification.objects.filter(pk=fresh.pk).update(status="sent")
    assert history_prune(now=timezone.now())["Notification expired"] == 2
    assert set(Notification.objects.values_list("pk", flat=True)) == {pending.pk, fresh.pk}
