"""Notifications of rewinds: a JSON POST to a webhook and/or an email, sent by a Celery task
after the transaction that recorded the rewind commits.

The rewind workflow calls `notify_rewind(event=..., rewind_summary=...)` and nothing else: it
never waits on the network and is never failed by a notification. Which channels exist is
decided once from the settings (OFFSETWATCH_NOTIFY_WEBHOOK_URL, OFFSETWATCH_NOTIFY_EMAILS); with
none, `notifier()` is a NullNotifier that does nothing (Burrow's notifiers, healthchecks'
integrations: one class per channel, no `if settings.X` scattered around).

A delivery that fails transiently (HTTP 5xx/408/429, a timeout, a refused connection, an SMTP
4xx) raises TransientDeliveryError and the task retries it with growing pauses; a permanent
failure (HTTP 4xx, SMTP 5xx) and the last failed retry are logged at ERROR, naming the rewind,
the channel and the reason.
"""
from __future__ import annotations

import json
import logging
import smtplib
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from celery import current_app
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction

from dashboard.audit.services import change_lines
from streamoffsets.visible import visible

log = logging.getLogger(__name__)

NOTIFY_DELIVER_TASK = "dashboard.tasks.notify_deliver"  # a task name is part of the deployment: kept


class TransientDeliveryError(RuntimeError):
    """Worth trying again later: the peer is down, slow or overloaded."""


class PermanentDeliveryError(RuntimeError):
    """Trying again would fail the same way (a wrong URL, a refused address)."""


# --- the message --------------------------------------------------------------------------------


def _shown(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return str(value)


def rewind_message(*, event: str, rewind_summary: dict) -> dict:
    """What every channel sends: a title, a plain-text body for people, and the summary itself for
    machines. `event` is "requested", "approved", ... ("rewind.requested" is read the same)."""
    event = event.removeprefix("rewind.")
    r = rewind_summary
    # Title and text are read by people: names through `visible` (a right-to-left override in a
    # group name is shown, not obeyed); the summary under "rewind" keeps them raw for machines.
    topic, group, store = (visible(r.get(k)) if r.get(k) is not None else None for k in ("topic", "group", "store"))
    what = f"rewind {r.get('id')} {event}: {topic} / {group} ({store})"
    title = f"[Offset Watch] {what}"
    lines = [
        "R" + what[1:],
        "",
        f"pipeline: topic {_shown(topic)}, group {_shown(group)}, store {_shown(store)}"
        + (f" (pipeline {r['pipeline']})" if r.get("pipeline") is not None else ""),
        f"status: {_shown(r.get('status'))}",
        f"requested by: {visible(_shown(r.get('requested_by')))}",
        f"approved by: {visible(_shown(r.get('approved_by')))}",
        f"reason: {visible(_shown(r.get('reason')), keep=chr(10) + chr(9))}",
    ]
    if r.get("ticket_url"):
        lines.append(f"ticket: {visible(str(r['ticket_url']))}")
    lines.append(f"target: {_shown(r.get('target'))}")
    lines.append("offsets (before → after):")
    lines += [f"  {line}" for line in change_lines(r.get("before"), r.get("after"))] or ["  —"]
    if r.get("url"):
        lines += ["", str(r["url"])]
    return {"event": event, "title": title, "text": "\n".join(lines) + "\n",
            "rewind": json.loads(json.dumps(r, default=str))}  # plain JSON: what a Celery task can carry


# --- channels -----------------------------------------------------------------------------------


class Channel(Protocol):
    name: str

    def deliver(self, message: dict) -> None:
        """Send one message; raise TransientDeliveryError or PermanentDeliveryError."""

    def describe(self) -> str:
        """Where it sends to, fit for a log line (no secrets)."""


@dataclass(frozen=True)
class WebhookChannel:
    url: str
    timeout_s: float
    name: str = "webhook"

    def describe(self) -> str:
        # Webhook URLs often carry their secret in the path (Slack, Teams): only the host is logged.
        parts = urlsplit(self.url)
        return f"webhook {parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"

    def deliver(self, message: dict) -> None:
        body = json.dumps(message, ensure_ascii=False).encode()
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json; charset=utf-8", "User-Agent": "offset-watch-notify/1"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read(65536)
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code} {exc.reason}"
            if exc.code >= 500 or exc.code in (408, 429):
                raise TransientDeliveryError(reason) from None
            raise PermanentDeliveryError(reason) from None
        except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as exc:
            raise TransientDeliveryError(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None


@dataclass(frozen=True)
class EmailChannel:
    recipients: tuple[str, ...]
    name: str = "email"

    def describe(self) -> str:
        return f"email to {', '.join(self.recipients)} via {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"

    def deliver(self, message: dict) -> None:
        mail = EmailMessage(subject=message["title"], body=message["text"], from_email=settings.DEFAULT_FROM_EMAIL,
                            to=list(self.recipients), connection=get_connection(fail_silently=False))
        try:
            mail.send()
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            error = TransientDeliveryError if all(400 <= c < 500 for c in codes) else PermanentDeliveryError
            raise error(f"recipients refused: {exc.recipients}") from None
        except smtplib.SMTPResponseException as exc:
            error = TransientDeliveryError if 400 <= exc.smtp_code < 500 else PermanentDeliveryError
            raise error(f"SMTP {exc.smtp_code} {exc.smtp_error!r}") from None
        except (smtplib.SMTPException, OSError) as exc:  # disconnected, refused, timed out
            raise TransientDeliveryError(f"{type(exc).__name__}: {exc}") from None


# --- the notifier ---------------------------------------------------------------------------------


class Notifier:
    """Sends each message on every configured channel, one Celery task per channel (a webhook
    being down does not resend the email)."""

    def __init__(self, channels: list[Channel]):
        self.channels = {c.name: c for c in channels}

    def send(self, message: dict) -> None:
        # After commit: a rolled-back request is never announced, and the task finds it committed.
        transaction.on_commit(lambda: self._enqueue(message), robust=True)

    def _enqueue(self, message: dict) -> None:
        for name in self.channels:
            try:
                # By name (dashboard.tasks imports this module): what notify_deliver.delay sends.
                current_app.send_task(NOTIFY_DELIVER_TASK, args=(name, message))
            except Exception as exc:  # the broker is away: said, and the rewind itself goes on
                log.error("notification %r via %s not queued (is Redis running?): %s", message["title"],
                          self.channels[name].describe(), exc)

    def channel(self, name: str) -> Channel | None:
        return self.channels.get(name)


class NullNotifier(Notifier):
    """No channel configured: every message is dropped here, by design."""

    def __init__(self):
        super().__init__([])

    def send(self, message: dict) -> None:
        pass


def notifier() -> Notifier:
    """The notifier the settings describe (read each time: cheap, and tests change settings)."""
    channels: list[Channel] = []
    if settings.NOTIFY_WEBHOOK_URL:
        channels.append(WebhookChannel(url=settings.NOTIFY_WEBHOOK_URL, timeout_s=settings.NOTIFY_TIMEOUT_S))
    if settings.NOTIFY_EMAILS:
        channels.append(EmailChannel(recipients=tuple(settings.NOTIFY_EMAILS)))
    return Notifier(channels) if channels else NullNotifier()


# --- the interface ------------------------------------------------------------------------------


def notify_rewind(*, event: str, rewind_summary: dict) -> None:
    """Announce a rewind's transition ("requested", "approved", ...) on every configured channel,
    once the current transaction commits. Never raises because of a channel; returns at once.

    rewind_summary keys: id, pipeline, topic, group, store, status, requested_by, approved_by,
    reason, ticket_url, target, before, after ({partition: offset}), url."""
    try:
        message = rewind_message(event=event, rewind_summary=rewind_summary)
    except Exception:  # a malformed summary must not fail the rewind it describes
        rewind_id = rewind_summary.get("id") if isinstance(rewind_summary, dict) else None
        log.exception("notification of rewind %s %s could not be built", rewind_id, event)
        return
    notifier().send(message)


def deliver(*, channel: str, message: dict) -> None:
    """Deliver one message on one channel now (the task's body). Raises TransientDeliveryError
    for the task to retry; logs and swallows permanent failures and channels no longer configured."""
    found = notifier().channel(channel)
    if found is None:
        log.warning("notification %r: channel %s is no longer configured; dropped", message.get("title"), channel)
        return
    try:
        found.deliver(message)
    except PermanentDeliveryError as exc:
        log.error("notification %r via %s failed, not retried: %s", message.get("title"), found.describe(), exc)
        return
    log.info("notification %r sent via %s", message.get("title"), found.describe())


def delivery_abandoned(*, channel: str, message: dict, attempts: int, error: Exception) -> None:
    """The clear log line when the last retry failed too."""
    found = notifier().channel(channel)
    log.error("notification %r via %s failed after %d attempts, giving up: %s", message.get("title"),
              found.describe() if found else channel, attempts, error)


def retry_pause_s(retries: int) -> float:
    """Seconds before retry number `retries` + 1: 15 s, 30 s, 1 min, 2 min, 4 min, then 10 min."""
    return min(600.0, 15.0 * 2 ** retries)
