"""The notification outbox (dashboard.alerting.outbox) against a real HTTP peer: delivered once,
retried with backoff on failures until sent, given up with the reason after the retries, never
sent twice by two workers, nothing sent to a disabled channel; the admin's test message."""
from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connections
from django.utils import timezone

from dashboard.alerting import outbox
from dashboard.audit.actor import Actor
from dashboard.models import AuditEvent, Channel, Notification

pytestmark = pytest.mark.django_db(transaction=True)


class Peer:
    """A JSON webhook peer answering each POST with the next scripted status (the last repeats)."""

    def __init__(self, statuses=(200,)):
        self.statuses, self.received = list(statuses), []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                peer.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status = peer.statuses.pop(0) if len(peer.statuses) > 1 else peer.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        # The secret part of a webhook URL lives in its path (Slack, Teams): it must never be shown.
        self.url = f"json://127.0.0.1:{self.server.server_port}/hooks/T0-secret-path"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def peer_of():
    peers = []

    def make(*statuses):
        peers.append(Peer(statuses or (200,)))
        return peers[-1]

    yield make
    for p in peers:
        p.close()


def enqueue(channel: Channel, title="[Offset Watch] ERR: orders / etl (prod)") -> Notification:
    [row] = outbox.notifications_enqueue([outbox.notification_new(channel=channel, event="incident.opened",
                                                                  title=title, body="stopped", now=timezone.now())])
    return row


def test_delivered_once(peer_of):
    peer = peer_of(200)
    n = enqueue(Channel.objects.create(name="hook", kind="webhook", url=peer.url))
    assert outbox.notification_deliver(n.pk) == "sent"
    assert outbox.notification_deliver(n.pk) is None  # sent: nothing more to do
    assert outbox.notifications_sweep() == 0
    assert [m["title"] for m in peer.received] == ["[Offset Watch] ERR: orders / etl (prod)"]


def test_failures_are_retried_with_growing_pauses_until_sent(settings, peer_of):
    settings.NOTIFY_BACKOFF_S, settings.NOTIFY_RETRIES = 5.0, 5
    peer = peer_of(503, 503, 200)
    n = enqueue(Channel.objects.create(name="hook", kind="webhook", url=peer.url))
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
    assert (n.status, n.attempts, n.last_error) == ("sent", 3, "") and len(peer.received) == 3


def test_given_up_after_the_retries_with_the_reason_and_no_secret(settings, peer_of, caplog):
    settings.NOTIFY_BACKOFF_S, settings.NOTIFY_RETRIES = 0.0, 2
    peer = peer_of(503)
    n = enqueue(Channel.objects.create(name="hook", kind="webhook", url=peer.url))
    with caplog.at_level(logging.INFO):
        statuses = [outbox.notification_deliver(n.pk) for _ in range(4)]
    assert statuses == ["pending", "pending", "failed", None]
    n.refresh_from_db()
    assert n.status == "failed" and n.attempts == 3 and n.last_error
    assert "giving up" in caplog.text and "T0-secret-path" not in caplog.text + n.last_error


def test_two_workers_never_send_one_message_twice(peer_of):
    peer = peer_of(200)
    n = enqueue(Channel.objects.create(name="hook", kind="webhook", url=peer.url))
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
    assert peer.received == []


def test_nothing_is_sent_to_a_disabled_channel(peer_of):
    peer = peer_of(200)
    channel = Channel.objects.create(name="hook", kind="webhook", url=peer.url)
    n = enqueue(channel)
    Channel.objects.filter(pk=channel.pk).update(enabled=False)
    assert outbox.notification_deliver(n.pk) == "failed"
    n.refresh_from_db()
    assert n.last_error == "the channel was disabled" and peer.received == []


def test_the_admins_test_message_goes_through_the_outbox_and_is_audited(peer_of, amir):
    peer = peer_of(200)
    channel = Channel.objects.create(name="hook", kind="webhook", url=peer.url)
    n = outbox.channel_test(channel=channel, actor=Actor.of_user(amir, "10.0.0.7"))
    assert outbox.notifications_sweep() == 1
    assert peer.received[0]["title"] == "[Offset Watch] test notification" and "amir" in peer.received[0]["message"]
    event = AuditEvent.objects.get(action="channel.tested")
    assert (event.actor, event.remote_addr, event.details["notification"]) == ("amir", "10.0.0.7", n.pk)
