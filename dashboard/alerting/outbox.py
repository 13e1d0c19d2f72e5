"""The notification outbox: every message to send is a Notification row, written in the
transaction that decided it (a collection cycle's incidents, a rewind's transition, an admin's
"send test"), so a crash or a broker outage after the decision loses nothing.

After the transaction commits, each new row is handed to a Celery task by name (never waited
for: a broker outage only delays delivery); beat's sweep (every NOTIFY_SWEEP_INTERVAL_S) delivers
any row still due, so a lost task or a dead worker delays a notification by one sweep at most.
A delivery locks its row (SKIP LOCKED: two workers never send one message twice), sends through
dashboard.alerting.channels, and records the outcome: sent; or, on a transient error, tried again
after NOTIFY_BACKOFF_S doubled per attempt (at most 10 min) until NOTIFY_RETRIES retries are
spent; or failed, with the reason.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard.alerting import channels
from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import Channel, Incident, Notification, Pipeline

log = logging.getLogger(__name__)

# Task names are part of the deployment (queued tasks and beat entries carry them).
NOTIFICATION_DELIVER_TASK = "dashboard.tasks.notification_deliver"
NOTIFICATIONS_SWEEP_TASK = "dashboard.tasks.notifications_sweep"


def notifications_enqueue(rows: list[Notification]) -> list[Notification]:
    """Write the rows (in the caller's transaction) and hand them to the workers once it commits."""
    if not rows:
        return []
    created = Notification.objects.bulk_create(rows)
    ids = [n.pk for n in created]
    transaction.on_commit(lambda: _dispatch(ids), robust=True)
    return created


def notification_new(*, channel: Channel, event: str, title: str, body: str, now: datetime,
                     incident: Incident | None = None, pipeline: Pipeline | None = None) -> Notification:
    """One unsaved outbox row (notifications_enqueue writes it)."""
    return Notification(channel=channel, event=event, title=title[:500], body=body, incident=incident,
                        pipeline=pipeline, next_attempt_at=now, created_at=now)


def _dispatch(ids: list[int]) -> None:
    for pk in ids:
        try:
            current_app.send_task(NOTIFICATION_DELIVER_TASK, args=(pk,), retry=False)
        except Exception as exc:  # the broker is away: the sweep delivers it once it is back
            log.warning("notification %s not queued now (is Redis running?), the sweep will send it: %s", pk, exc)
            return


def backoff_s(attempts: int) -> float:
    """The pause after the `attempts`-th failed attempt: NOTIFY_BACKOFF_S, doubled each time, at most 10 min."""
    return min(600.0, settings.NOTIFY_BACKOFF_S * 2 ** max(0, attempts - 1))


def notification_deliver(notification_id: int, *, now: datetime | None = None) -> str | None:
    """Deliver one due notification now (the task's body). Returns its new status, or None when
    there is nothing to do (sent, failed, not due yet, or another worker holds it)."""
    with transaction.atomic():
        n = (Notification.objects.select_for_update(skip_locked=True, of=("self",)).select_related("channel")
             .filter(pk=notification_id, status=Notification.Status.PENDING).first())
        now = now or timezone.now()
        if n is None or n.next_attempt_at > now:
            return None
        n.attempts += 1
        if not n.channel.enabled:
            n.status, n.last_error = Notification.Status.FAILED, "the channel was disabled"
        else:
            try:
                channels.send(n.channel.url, title=n.title, body=n.body)
            except channels.DeliveryError as exc:
                n.last_error = exc.reason[:2000]
                if exc.transient and n.attempts <= settings.NOTIFY_RETRIES:
                    n.next_attempt_at = timezone.now() + timedelta(seconds=backoff_s(n.attempts))
                    log.warning("notification %s (%s) to channel %r: attempt %d failed, trying again at %s: %s",
                                n.pk, n.event, n.channel.name, n.attempts, n.next_attempt_at.isoformat(), exc.reason)
                else:
                    n.status = Notification.Status.FAILED
                    log.error("notification %s (%s) to channel %r failed after %d attempt(s), giving up: %s",
                              n.pk, n.event, n.channel.name, n.attempts, exc.reason)
            else:
                n.status, n.sent_at, n.last_error = Notification.Status.SENT, timezone.now(), ""
                log.info("notification %s (%s) sent to channel %r", n.pk, n.event, n.channel.name)
        n.save(update_fields=["status", "attempts", "next_attempt_at", "last_error", "sent_at"])
        _channel_state_record(n)
        return n.status


def _channel_state_record(n: Notification) -> None:
    """The channel's last success or failure (a failed attempt counts at once, retried or not: on-call
    must know the channel is failing before the retries run out)."""
    at = timezone.now()
    if n.status == Notification.Status.SENT:
        Channel.objects.filter(pk=n.channel_id).update(last_sent_at=n.sent_at or at)
    elif n.last_error:
        Channel.objects.filter(pk=n.channel_id).update(last_failure_at=at, last_failure=n.last_error)


def notifications_sweep(*, now: datetime | None = None, limit: int = 200) -> int:
    """Deliver the pending notifications that are due (oldest first, at most `limit`): what a lost
    task, a dead worker or a broker outage left behind, and the retries. Returns how many were tried."""
    now = now or timezone.now()
    due = list(Notification.objects.filter(status=Notification.Status.PENDING, next_attempt_at__lte=now)
               .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    for pk in due:
        notification_deliver(pk, now=now)
    return len(due)


def channel_test(*, channel: Channel, actor: Actor) -> Notification:
    """The admin's "send test": one message to this channel, through the outbox like any other, audited."""
    now = timezone.now()
    with transaction.atomic():
        [row] = notifications_enqueue([notification_new(
            channel=channel, event="channel.test", now=now,
            title="[Offset Watch] test notification",
            body=f"A test from Offset Watch, sent by {actor.who} to the channel {channel.name!r}. "
                 "If you read this, incidents routed here will reach you.")])
        audit_append(action="channel.tested", subject=f"channel {channel.name}", pipeline=None, before=None,
                     after=None, details={"channel": channel.pk, "notification": row.pk}, actor=actor)
    return row


def notifications_prune(*, now: datetime) -> int:
    """Drop delivered and given-up notifications older than RETENTION_BATCHES_S (the prune task);
    pending ones stay whatever their age: they are still to be sent."""
    until = now - timedelta(seconds=settings.RETENTION_BATCHES_S)
    return Notification.objects.filter(created_at__lt=until).exclude(status=Notification.Status.PENDING).delete()[0]
