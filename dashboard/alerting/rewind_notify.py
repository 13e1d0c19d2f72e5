"""Rewind notifications on the alert channels: a rewind's transitions (requested, approved,
rejected) go to the channels of the enabled routes that take rewinds and match the pipeline,
through the outbox (written in the rewind's transaction, sent after it commits). The rewind
workflow calls `rewind_notify` and nothing else: it never waits on the network and is never
failed by a notification.
"""
from __future__ import annotations

import json
import logging

from django.utils import timezone

from dashboard.alerting import selectors
from dashboard.alerting.outbox import notification_new, notifications_enqueue
from dashboard.audit.services import change_lines
from dashboard.models import Notification, Pipeline
from streamoffsets.visible import visible

log = logging.getLogger(__name__)


def rewind_notify(*, pipeline: Pipeline, event: str, rewind_summary: dict) -> list[Notification]:
    """Announce a rewind's transition ("requested", "approved", ...) on the channels routed to
    for the pipeline's rewinds. Never raises because of a message or a channel."""
    try:
        message = rewind_message(event=event, rewind_summary=rewind_summary)
    except Exception:  # a malformed summary must not fail the rewind it describes
        rewind_id = rewind_summary.get("id") if isinstance(rewind_summary, dict) else None
        log.exception("notification of rewind %s %s could not be built", rewind_id, event)
        return []
    found = selectors.channels_for(selectors.pipeline_names(pipeline), selectors.routes_enabled(), rewinds=True)
    now = timezone.now()
    return notifications_enqueue([
        notification_new(channel=channel, event=f"rewind.{message['event']}", title=message["title"],
                         body=message["text"], pipeline=pipeline, now=now)
        for channel in found])


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
            "rewind": json.loads(json.dumps(r, default=str))}  # plain JSON, for machines
