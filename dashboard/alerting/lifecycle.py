"""Archived pipelines: a job retired long ago must not stay ERR forever with an incident open.

A pipeline is archived while it has had no batch for OFFSETWATCH_ARCHIVE_AFTER (7 days) and its
topic is gone from the cluster or its job is marked retired (Pipeline.retired, set in the
admin). Archived: its status is OK with the reason, it opens no incident (an open one closes
without a notification), and the default overview hides it. The rule is applied at every
cycle, so any new batch (or un-retiring a job whose topic exists) brings the pipeline back.
Each change is audited, by the system.
"""
from __future__ import annotations

from datetime import datetime

from django.conf import settings

from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import Incident, Pipeline
from streamoffsets.evaluation import Status, human_duration


def archive_reason(pipeline: Pipeline, now: datetime, *, topic_gone: bool) -> str | None:
    """Why the pipeline is archived now, in words; None when it is not."""
    if not (topic_gone or pipeline.retired):
        return None
    last = pipeline.last_batch_time or pipeline.first_seen_at
    silent_s = (now - last).total_seconds()
    if silent_s <= settings.ARCHIVE_AFTER_S:
        return None
    why = "its topic is gone" if topic_gone else "its job is retired"
    return f"archived: no batch for {human_duration(silent_s)} and {why}"


def archived_record(pipelines: dict[Pipeline, str | None], now: datetime) -> None:
    """Record which of `pipelines` are archived (pipeline -> archive_reason, None: not archived):
    sets or clears archived_at where it changes, closes the open incidents of the newly archived
    (silently: nothing was resolved), and audits each change."""
    archived = [p for p, why in pipelines.items() if why and p.archived_at is None]
    back = [p for p, why in pipelines.items() if not why and p.archived_at is not None]
    for p in archived:
        p.archived_at = now
        audit_append(action="pipeline.archived", subject=f"pipeline {p}", pipeline=p, actor=Actor.SYSTEM,
                     details={"reason": pipelines[p]})
    for p in back:
        p.archived_at = None
        audit_append(action="pipeline.unarchived", subject=f"pipeline {p}", pipeline=p, actor=Actor.SYSTEM,
                     details={"reason": "a new batch, or its topic is back and its job not retired"})
    if archived or back:
        Pipeline.objects.bulk_update(archived + back, ["archived_at"])
    if archived:
        Incident.objects.filter(pipeline__in=archived, closed_at=None).update(closed_at=now, status=int(Status.OK))
