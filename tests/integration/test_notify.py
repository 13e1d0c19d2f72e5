"""Rewind notifications: the message, the webhook and email channels against real local peers
(an HTTP server and an SMTP server on 127.0.0.1, each in a thread), retries, and the null
notifier when nothing is configured."""
from __future__ import annotations

import email
import json
import logging
import socketserver
import threading
import time
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dashboard.notifications import services as notify
from dashboard.tasks import notify_deliver

SUMMARY = {
    "id": 42, "pipeline": 7, "topic": "orders", "group": "billing", "store": "prod-hbase", "status": "requested",
    "requested_by": "olga", "approved_by": None, "reason": "replay after the parser fix",
    "ticket_url": "https://tickets.example.com/OPS-12", "target": {"kind": "time", "at": "2026-11-22T10:00:00+00:00"},
    "before": {"0": 120, "1": 300, "10": 5}, "after": {"0": 40, "1": 290, "10": 5},
    "url": "https://offsetwatch.example.com/rewinds/42",
}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up (the timeout test) leaves a broken pipe here: expected, not news.
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class Webhook:
    """A real HTTP peer: answers each POST with the next scripted status (the last one repeats)
    after `delay_s`, and keeps what it received."""

    def __init__(self, statuses=(200,), delay_s: float = 0.0):
        self.statuses, self.delay_s, self.received = list(statuses), delay_s, []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                time.sleep(hook.delay_s)
                status = hook.statuses.pop(0) if len(hook.statuses) > 1 else hook.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):  # keep the test output quiet
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        # A secret in the path, as Slack's and Teams' webhook URLs have: it must never be logged.
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T0-secret-path"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class SMTPPeer:
    """A minimal real SMTP server (RFC 5321's commands Django's backend sends), keeping each
    message; RCPT is answered with `rcpt_reply`."""

    def __init__(self, rcpt_reply: bytes = b"250 OK"):
        self.messages, peer = [], self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                say = lambda text: self.wfile.write(text + b"\r\n")
                say(b"220 localhost test SMTP")
                rcpts, lines, in_data = [], [], False
                while line := self.rfile.readline():
                    if in_data:
                        if line == b".\r\n":
                            peer.messages.append({"rcpt": rcpts, "data": b"".join(lines)})
                            rcpts, lines, in_data = [], [], False
                            say(b"250 queued")
                        else:
                            lines.append(line[1:] if line.startswith(b"..") else line)
                        continue
                    verb = line[:4].upper()
                    if verb in (b"EHLO", b"HELO"):
                        say(b"250 localhost")
                    elif verb == b"RCPT":
                        if rcpt_reply.startswith(b"2"):
                            rcpts.append(line.split(b":", 1)[1].strip().strip(b"<>").decode())
                        say(rcpt_reply)
                    elif verb == b"DATA":
                        say(b"354 end with <CRLF>.<CRLF>")
                        in_data = True
                    elif verb == b"QUIT":
                        say(b"221 bye")
                        return
                    else:  # MAIL, RSET, NOOP
                        say(b"250 OK")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def nothing_configured(settings):
    settings.NOTIFY_WEBHOOK_URL, settings.NOTIFY_EMAILS = "", []
    return settings


@pytest.fixture
def webhook_only(settings):
    settings.NOTIFY_EMAILS = []
    settings.NOTIFY_TIMEOUT_S = 2.0
    return settings


def test_the_message_names_pipeline_rewind_people_reason_target_and_offsets():
    message = notify.rewind_message(event="rewind.approved", rewind_summary={**SUMMARY, "approved_by": "amir"})
    assert message["event"] == "approved"
    assert message["title"] == "[Offset Watch] rewind 42 approved: orders / billing (prod-hbase)"
    text = message["text"]
    for line in ("Rewind 42 approved: orders / billing (prod-hbase)",
                 "pipeline: topic orders, group billing, store prod-hbase (pipeline 7)",
                 "requested by: olga", "approved by: amir", "reason: replay after the parser fix",
                 "ticket: https://tickets.example.com/OPS-12",
                 'target: {"at": "2026-11-22T10:00:00+00:00", "kind": "time"}',
                 "  p0: 120 → 40", "  p1: 300 → 290", "  p10: 5 → 5", "https://offsetwatch.example.com/rewinds/42"):
        assert line + "\n" in text, line
    assert text.index("p1:") < text.index("p10:")  # partitions in numeric order
    assert message["rewind"] == {**SUMMARY, "approved_by": "amir"}


def test_the_webhook_receives_the_message_as_json(webhook_only):
    with Webhook() as hook:
        webhook_only.NOTIFY_WEBHOOK_URL = hook.url
        message = notify.rewind_message(event="requested", rewind_summary=SUMMARY)
        notify.deliver(channel="webhook", message=message)
    request, = hook.received
    assert request["path"] == "/hooks/T0-secret-path"
    assert request["headers"]["Content-Type"] == "application/json; charset=utf-8"
    sent = json.loads(request["body"])
    assert sent["event"] == "requested" and sent["rewind"]["before"] == {"0": 120, "1": 300, "10": 5}
    assert sent["rewind"]["requested_by"] == "olga" and "p0: 120 → 40" in sent["text"]


def test_transient_failures_are_retried_by_the_task_until_delivered(webhook_only):
    """apply() runs the task here, with its retries one after the other (no broker, no pauses)."""
    with Webhook(statuses=(503, 502, 200)) as hook:
        webhook_only.NOTIFY_WEBHOOK_URL = hook.url
        webhook_only.NOTIFY_RETRIES = 5
        notify_deliver.apply(args=["webhook", notify.rewind_message(event="requested", rewind_summary=SUMMARY)])
    assert len(hook.received) == 3
    assert [json.loads(r["body"])["rewind"]["id"] for r in hook.received] == [42, 42, 42]
    assert [notify.retry_pause_s(n) for n in range(7)] == [15, 30, 60, 120, 240, 480, 600]


def test_the_last_failure_is_logged_clearly_never_raised_and_without_the_secret(webhook_only, caplog):
    with Webhook(statuses=(503,)) as hook:
        webhook_only.NOTIFY_WEBHOOK_URL = hook.url
        webhook_only.NOTIFY_RETRIES = 2
        with caplog.at_level(logging.INFO, logger="dashboard.notifications.services"):
            result = notify_deliver.apply(args=["webhook", notify.rewind_message(event="requested",
                                                                                 rewind_summary=SUMMARY)])
    assert result.successful() and len(hook.received) == 3
    port = hook.server.server_address[1]
    assert (f"notification '[Offset Watch] rewind 42 requested: orders / billing (prod-hbase)' via webhook "
            f"http://127.0.0.1:{port} failed after 3 attempts, giving up: HTTP 503") in caplog.text
    assert "secret-path" not in caplog.text


def test_a_permanent_failure_is_logged_once_and_not_retried(webhook_only, caplog):
    with Webhook(statuses=(404,)) as hook:
        webhook_only.NOTIFY_WEBHOOK_URL = hook.url
        with caplog.at_level(logging.ERROR, logger="dashboard.notifications.services"):
            notify_deliver.apply(args=["webhook", notify.rewind_message(event="requested", rewind_summary=SUMMARY)])
    assert len(hook.received) == 1
    assert "failed, not retried: HTTP 404 Not Found" in caplog.text


def test_a_slow_or_absent_peer_is_a_transient_error_within_the_timeout(webhook_only):
    message = notify.rewind_message(event="requested", rewind_summary=SUMMARY)
    with Webhook(delay_s=3.0) as hook:
        webhook_only.NOTIFY_WEBHOOK_URL, webhook_only.NOTIFY_TIMEOUT_S = hook.url, 0.5
        started = time.monotonic()
        with pytest.raises(notify.TransientDeliveryError, match="timed out"):
            notify.deliver(channel="webhook", message=message)
        assert time.monotonic() - started < 2.5
    webhook_only.NOTIFY_WEBHOOK_URL = hook.url  # the server is closed now: connection refused
    with pytest.raises(notify.TransientDeliveryError, match="Connection refused"):
        notify.deliver(channel="webhook", message=message)


def test_email_goes_to_every_address_through_a_real_smtp_server(settings):
    with SMTPPeer() as smtp:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
        settings.DEFAULT_FROM_EMAIL = "offsetwatch@example.com"
        settings.NOTIFY_WEBHOOK_URL, settings.NOTIFY_EMAILS = "", ["oncall@example.com", "data-leads@example.com"]
        notify.deliver(channel="email", message=notify.rewind_message(event="requested", rewind_summary=SUMMARY))
    sent, = smtp.messages
    assert sent["rcpt"] == ["oncall@example.com", "data-leads@example.com"]
    mail = email.message_from_bytes(sent["data"], policy=email_policy)
    assert mail["Subject"] == "[Offset Watch] rewind 42 requested: orders / billing (prod-hbase)"
    assert mail["From"] == "offsetwatch@example.com"
    body = mail.get_content()
    assert "requested by: olga" in body and "  p1: 300 → 290" in body


@pytest.mark.parametrize("reply,error", [(b"451 try again later", notify.TransientDeliveryError),
                                         (b"550 no such user", notify.PermanentDeliveryError)])
def test_smtp_refusals_are_transient_or_permanent_by_their_code(settings, reply, error):
    with SMTPPeer(rcpt_reply=reply) as smtp:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
        channel = notify.EmailChannel(recipients=("oncall@example.com",))
        with pytest.raises(error, match=reply.decode()[:3]):
            channel.deliver(notify.rewind_message(event="requested", rewind_summary=SUMMARY))
    assert smtp.messages == []


@pytest.mark.django_db
def test_nothing_configured_is_a_null_notifier_that_queues_nothing(nothing_configured,
                                                                     django_capture_on_commit_callbacks):
    assert isinstance(notify.notifier(), notify.NullNotifier)
    with django_capture_on_commit_callbacks() as callbacks:
        notify.notify_rewind(event="requested", rewind_summary=SUMMARY)
    assert callbacks == []


@pytest.mark.django_db
def test_a_configured_channel_is_queued_after_commit_only(webhook_only, django_capture_on_commit_callbacks):
    webhook_only.NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/hook"
    webhook_only.NOTIFY_EMAILS = ["oncall@example.com"]
    assert set(notify.notifier().channels) == {"webhook", "email"}
    with django_capture_on_commit_callbacks() as callbacks:  # not executed: the test has no worker
        notify.notify_rewind(event="approved", rewind_summary=SUMMARY)
    assert len(callbacks) == 1


@pytest.mark.django_db
def test_a_malformed_summary_is_logged_and_never_fails_the_caller(webhook_only, caplog,
                                                                 django_capture_on_commit_callbacks):
    webhook_only.NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/hook"
    with caplog.at_level(logging.ERROR, logger="dashboard.notifications.services"), django_capture_on_commit_callbacks() as callbacks:
        notify.notify_rewind(event="requested", rewind_summary={"id": 5, "before": "not offsets", "after": 3})
        notify.notify_rewind(event="requested", rewind_summary=None)  # type: ignore[arg-type]
    assert len(callbacks) == 1  # the odd but readable one is still sent
    assert "notification of rewind" in caplog.text and "could not be built" in caplog.text
