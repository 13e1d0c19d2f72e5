"""Sending one message to one channel, through apprise (one library for Slack, Microsoft Teams,
PagerDuty, Opsgenie, DingTalk, WeCom, Feishu/Lark, email and JSON webhooks: no hand-written
clients). A channel is an apprise URL; its kind is the apprise service it names. docs/alerting.md
lists the URL forms an admin pastes.

`send` raises DeliveryError with the reason in words (secrets masked) and whether trying again
later may help (`transient`): the outbox (dashboard.alerting.outbox) retries those with backoff.
apprise only answers True/False and logs why, so the reason and the HTTP or SMTP status it
quotes are read from its log (LogCapture) for that one call.

Secrets. A channel URL is a secret as a whole (webhook tokens, routing keys, passwords). The
secret pieces of a URL apprise reads are the ones its privacy form hides: comparing its URL with
and without privacy names them for every kind, whatever field a plugin keeps them in.
"""
from __future__ import annotations

import base64
import logging
import re
from urllib.parse import quote, unquote

import apprise
from apprise.common import NotifyFormat, OverflowMode
from apprise.plugins.opsgenie import OpsgenieAlertAction
from django.conf import settings

from streamoffsets.urls import MASK, MIN_SECRET_CHARS, mask_secrets, mask_url

# apprise plugin class name -> Channel.Kind value. NotifyMSTeams (msteams://) is apprise 1.x only:
# apprise 2 dropped it when Microsoft retired Teams' incoming webhooks for Workflows.
_KIND_OF_PLUGIN = {
    "NotifySlack": "slack", "NotifyMSTeams": "msteams", "NotifyWorkflows": "msteams",
    "NotifyPagerDuty": "pagerduty", "NotifyOpsgenie": "opsgenie", "NotifyDingTalk": "dingtalk",
    "NotifyWeComBot": "wecom", "NotifyFeishu": "feishu", "NotifyLark": "feishu", "NotifyEmail": "email",
    "NotifyJSON": "webhook",
}
_SUPPORTED = ("Slack, Microsoft Teams (Workflows), PagerDuty, Opsgenie, DingTalk, WeCom, Feishu/Lark, "
              "email or a JSON webhook")

# Pasted forms apprise does not read, and what to paste instead (matched on the URL's start).
_HINTS = (
    (re.compile(r"msteams://|https://[^/]*(webhook\.office\.com|outlook\.office(365)?\.com)/", re.I),
     "Teams incoming webhooks (Office 365 connectors) are retired and apprise no longer sends to them: in Teams, "
     "add the workflow 'Send webhook alerts to a channel' and paste the URL it gives (https://...logic.azure.com/"
     "workflows/... or https://...powerplatform.com/...)"),
    (re.compile(r"https://oapi\.dingtalk\.com/", re.I),
     "apprise does not read DingTalk's own webhook URL: paste dingtalk://<access_token> (the access_token= of it)"),
    (re.compile(r"https://open\.feishu\.cn/", re.I),
     "apprise does not read Feishu's own webhook URL: paste feishu://<token> (the last part of its path)"),
)

# The pieces of a URL between its delimiters: apprise's privacy form replaces whole pieces.
_PIECE = re.compile(r"[^/:@?&=#]+")
# The status apprise quotes: "...error=503." (most plugins), "Lark notification failed: 503 - ...".
_HTTP_STATUS = re.compile(r"\berror=(\d{3})\b|\bnotification failed: (\d{3})\b")
# An SMTP reply smtplib quotes: "(451, b'4.3.0 ...')", or a refused recipient "refused: 550 ...".
_SMTP_REPLY = re.compile(r"\((\d{3}), b['\"]|\brefused: (\d{3})\b")
_MAX_REASON = 500


class DeliveryError(RuntimeError):
    def __init__(self, reason: str, *, transient: bool):
        super().__init__(reason)
        self.reason = reason
        self.transient = transient


def _records(log: apprise.LogCapture) -> list[tuple[str, str]]:
    """(level, message) of each captured record; a message may span lines."""
    return [tuple(r.split("\x1f", 1)) for r in log.getvalue().split("\x1e") if "\x1f" in r]


def _capture() -> apprise.LogCapture:
    return apprise.LogCapture(level=logging.DEBUG, fmt="\x1e%(levelname)s\x1f%(message)s")


def _instantiate(url: str):
    """The apprise plugin for `url` and apprise's words when it could not read it."""
    with _capture() as log:
        try:
            plugin = apprise.Apprise.instantiate(url)
        except Exception:  # a plugin's parser may raise on odd input: apprise could not read it
            plugin = None
    return plugin, [m for level, m in _records(log) if level in ("WARNING", "ERROR")]


def _unread_masked(url: str) -> str:
    """A URL apprise could not read, shown without anything that may be secret: the scheme, and
    the host of an http(s) URL (a service's public host)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return MASK
    if scheme.lower() in ("http", "https"):
        return f"{scheme}://{rest.split('/', 1)[0].rpartition('@')[2]}/{MASK}"
    return f"{scheme}://{MASK}"


def _scrub_unread(text: str, url: str) -> str:
    """apprise's words about a URL it could not read, without any piece of that URL (it quotes
    the token it found invalid) beyond what _unread_masked shows."""
    shown = _unread_masked(url)
    if url.partition("://")[2]:
        text = text.replace(url, shown)
    pieces = {unquote(p) for p in _PIECE.findall(url.partition("://")[2])} - set(_PIECE.findall(shown))
    for piece in sorted(pieces, key=len, reverse=True):
        if len(piece) >= 3:
            text = text.replace(piece, MASK)
    return mask_secrets(text, [url])


def _plugin(url: str):
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the channel URL is empty")
    url = url.strip()
    for pattern, hint in _HINTS:
        if pattern.match(url):
            raise ValueError(f"{_unread_masked(url)}: {hint}")
    if "://" not in url:
        raise ValueError(f"not a channel URL (no scheme://): {_unread_masked(url)}; use {_SUPPORTED} "
                         "(docs/alerting.md lists the forms)")
    plugin, said = _instantiate(url)
    if plugin is None:
        why = " ".join(m.strip() for m in said if not m.startswith(("Could not load", "Unparseable", "Unsupported")))
        scheme = url.partition("://")[0]
        problem = (f"apprise could not read this {scheme}:// URL: {_scrub_unread(why, url)}" if why else
                   f"{scheme}:// is not a channel URL apprise reads; use {_SUPPORTED}")
        raise ValueError(f"{_unread_masked(url)}: {problem} (docs/alerting.md lists the forms)")
    return plugin


def _secrets(plugin) -> set[str]:
    """The secret pieces of a parsed URL: those apprise's privacy form hides, the private
    fields of its plugin, and any header value (json:// may carry an Authorization header)."""
    plain, private = _PIECE.findall(plugin.url(privacy=False)), _PIECE.findall(plugin.url(privacy=True))
    if len(plain) == len(private):
        found = {unquote(a) for a, b in zip(plain, private) if a != b}
    else:  # not aligned: hold every piece but the scheme secret
        found = {unquote(a) for a in plain[1:]}
    specs = {**plugin.template_tokens, **plugin.template_args}
    for name, spec in specs.items():
        value = getattr(plugin, spec.get("map_to", name), None) if spec.get("private") else None
        found.update(v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str))
    found.update(v for v in (getattr(plugin, "headers", None) or {}).values() if isinstance(v, str))
    user, password = getattr(plugin, "user", None), getattr(plugin, "password", None)
    if isinstance(user, str) and isinstance(password, str):  # as a Basic Authorization header quotes them
        found.add(base64.b64encode(f"{user}:{password}".encode()).decode().rstrip("="))
    return {s for s in found if s}


def _without(text: str, secrets: set[str], shortest: int = 1) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= shortest:
            for form in {secret, quote(secret, safe=""), quote(secret)}:
                text = text.replace(form, MASK)
    return text


def channel_kind(url: str) -> str:
    """The Channel.Kind of an apprise URL; ValueError naming the problem (URL masked) otherwise."""
    plugin = _plugin(url)
    kind = _KIND_OF_PLUGIN.get(type(plugin).__name__)
    if kind is None:
        raise ValueError(f"{masked(url)}: {plugin.service_name} channels are not supported; use {_SUPPORTED}")
    return kind


def masked(url: str) -> str:
    """The URL as pasted, with every secret piece replaced by ***."""
    if not isinstance(url, str) or not url.strip():
        return ""
    url = url.strip()
    plugin, _ = _instantiate(url) if "://" in url else (None, [])
    if plugin is None:
        return _unread_masked(url)
    return mask_url(_without(url, _secrets(plugin)))


def _bounded(plugin, timeout_s: float):
    """The plugin set to send one plain-text message in one call within about `timeout_s`."""
    # Connect and read timeouts (the URL's cto/rto): requests and smtplib wait at most this long.
    plugin.socket_connect_timeout = plugin.socket_read_timeout = float(timeout_s)
    # apprise's own retries would multiply the time spent; the outbox retries instead.
    plugin.retry = 0
    # A long body is cut, not split into several messages.
    plugin.overflow_mode = OverflowMode.TRUNCATE
    # Sent as the plain text it is: in a plugin's own format (Markdown for Teams, HTML for email)
    # apprise would escape it (a backslash before each "(" in a Teams card) or re-flow it (an email's lines joined).
    plugin.notify_format = NotifyFormat.TEXT
    if type(plugin).__name__ == "NotifyOpsgenie":
        # apprise maps an info message to "add a note to the alert it opened before", which a
        # fresh plugin never has: it would send nothing and report success. Open an alert.
        plugin.action = OpsgenieAlertAction.NEW
    return plugin


def _is_transient(records: list[tuple[str, str]]) -> bool:
    """HTTP 408, 429 and 5xx, SMTP 4xx, a connection error or timeout, or anything unknown: yes.
    HTTP 4xx otherwise, SMTP 5xx: no (the URL or the message is wrong; retrying cannot help)."""
    said = "\n".join(m for level, m in records if level in ("WARNING", "ERROR"))
    status = next((int(a or b) for a, b in _HTTP_STATUS.findall(said)), None)
    if status is not None:
        return status in (408, 429) or status >= 500 or status < 400
    smtp = next((int(a or b) for a, b in _SMTP_REPLY.findall("\n".join(m for _, m in records))), None)
    if smtp is not None:
        return smtp < 500
    return True


def _reason(records: list[tuple[str, str]]) -> str:
    said = " ".join(m.strip() for level, m in records if level in ("WARNING", "ERROR")) or "apprise reported a failure"
    detail = next((m.split(":", 1)[1].strip() for level, m in records
                   if level == "DEBUG" and m.startswith(("Socket Exception:", "Response Details:"))), "")
    if detail[:2] in ("b'", 'b"') and detail[-1:] == detail[1]:  # apprise logs the response body as bytes
        detail = detail[2:-1]
    detail = " ".join(detail.split())[:200]
    return f"{said} ({detail})" if detail else said


def send(url: str, *, title: str, body: str, timeout_s: float | None = None) -> None:
    """Deliver one message (title and plain-text body) in one call, waiting about `timeout_s`
    (default NOTIFY_TIMEOUT_S) at most; DeliveryError when it was not delivered."""
    try:
        plugin = _plugin(url)
    except ValueError as exc:  # a URL that stopped being readable (an apprise upgrade): no retry helps
        raise DeliveryError(str(exc), transient=False) from None
    _bounded(plugin, settings.NOTIFY_TIMEOUT_S if timeout_s is None else timeout_s)
    with _capture() as log:
        ok = plugin.notify(title=title, body=body, body_format=NotifyFormat.TEXT)
    if ok:
        return
    records = _records(log)
    reason = _without(_reason(records), _secrets(plugin), shortest=MIN_SECRET_CHARS)
    raise DeliveryError(mask_secrets(reason, [url.strip()])[:_MAX_REASON], transient=_is_transient(records))
