"""Start reports: what a job says it applied when it starts (offsets per partition, the rewind it
applied), validated, stored and audited; rewinds are verified against them."""
from __future__ import annotations

import logging

from django.db import transaction

from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import (
    Pipeline,
    StartReport,
)
from streamoffsets.types import Offsets, OffsetsError

log = logging.getLogger(__name__)


class InvalidReport(ValueError):
    """A start report that does not have the shape streamoffsets.restart produces."""


@transaction.atomic
def start_report_record(*, pipeline: Pipeline, report: dict, actor: Actor = Actor.SYSTEM) -> StartReport:
    """Record where a job started, audited (`actor`: the pipeline token, Actor.of_job); the
    report must be for the token's own pipeline."""
    if not isinstance(report, dict):
        raise InvalidReport("the report must be a JSON object")
    if report.get("topic") != pipeline.topic or report.get("group") != pipeline.group:
        raise InvalidReport(
            f"the report is for {report.get('topic')!r}/{report.get('group')!r} but the token belongs to "
            f"{pipeline.topic!r}/{pipeline.group!r}"
        )
    offsets = report.get("offsets")
    try:
        Offsets.from_json(offsets if isinstance(offsets, dict) else [])  # checked; recorded as the job sent them
    except OffsetsError:
        raise InvalidReport("'offsets' must map partition ids to non-negative integers") from None
    clamps = report.get("clamps") or []
    if not isinstance(clamps, list) or not all(isinstance(c, dict) for c in clamps):
        raise InvalidReport("'clamps' must be a list of objects")
    try:
        lost = sum(int(c.get("messages_lost", 0)) for c in clamps)
    except (TypeError, ValueError):
        raise InvalidReport("'clamps[].messages_lost' must be integers") from None
    start = StartReport.objects.create(
        pipeline=pipeline, report=report, first_start=bool(report.get("first_start")),
        clamped_partitions=len(clamps), messages_lost=lost,
    )
    audit_append(action="start_report.received", subject=f"start report #{start.pk} of {pipeline}", pipeline=pipeline,
                 after=offsets, actor=actor,
                 details={"id": start.pk, "instance": str(report.get("instance", ""))[:300],
                          "first_start": start.first_start, "clamped_partitions": start.clamped_partitions,
                          "messages_lost": start.messages_lost})
    return start
