"""Sending one message to one channel, through apprise (one library for Slack, Microsoft Teams,
PagerDuty, Opsgenie, DingTalk, WeCom, Feishu/Lark, email and JSON webhooks: no hand-written
clients). A channel is an apprise URL; its kind is the apprise service it names.

`send` raises DeliveryError with the reason in words (secrets masked) and whether trying again
later may help (`transient`): the outbox (dashboard.alerting.outbox) retries those with backoff.
"""
from __future__ import annotations

import logging

import apprise

from streamoffsets.urls import mask_secrets

# apprise plugin class name -> Channel.Kind value.
_KIND_OF_PLUGIN = {
    "NotifySlack": "slack", "NotifyMSTeams": "msteams", "NotifyWorkflows": "msteams",
    "NotifyPagerDuty": "pagerduty", "NotifyOpsgenie": "opsgenie", "NotifyDingTalk": "dingtalk",
    "NotifyWeComBot": "wecom", "NotifyFeishu": "feishu", "NotifyLark": "feishu", "NotifyEmail": "email",
    "NotifyJSON": "webhook",
}


class DeliveryError(RuntimeError):
    def __init__(self, reason: str, *, transient: bool):
        super().__init__(reason)
        self.reason = reason
        self.transient = transient


def _plugin(url: str):
    plugin = apprise.Apprise.instantiate(url.strip())
    if plugin is None:
        raise ValueError(f"not a channel URL apprise understands: {masked(url)} (docs/alerting.md lists the forms)")
    return plugin


def channel_kind(url: str) -> str:
    """The Channel.Kind of an apprise URL; ValueError naming the problem (URL masked) otherwise."""
    plugin = _plugin(url)
    kind = _KIND_OF_PLUGIN.get(type(plugin).__name__)
    if kind is None:
        raise ValueError(f"{type(plugin).service_name} channels are not supported: use Slack, Microsoft Teams, "
                         "PagerDuty, Opsgenie, DingTalk, WeCom, Feishu/Lark, email or a JSON webhook")
    return kind


def masked(url: str) -> str:
    """The URL with its secrets hidden (apprise's privacy form where it parses)."""
    try:
        plugin = apprise.Apprise.instantiate(url.strip())
    except Exception:  # masking must never fail
        plugin = None
    if plugin is not None:
        return plugin.url(privacy=True).split("?", 1)[0]
    return mask_secrets(url.split("?", 1)[0])


def send(url: str, *, title: str, body: str) -> None:
    """Deliver one message; DeliveryError when it was not delivered."""
    plugin = _plugin(url)
    with apprise.LogCapture(level=logging.WARNING) as log:
        ok = plugin.notify(title=title, body=body)
    if not ok:
        said = " ".join(line.split(" - ", 2)[-1] for line in log.getvalue().splitlines()[-3:])
        raise DeliveryError(mask_secrets(said.strip() or "apprise reported a failure"), transient=True)
