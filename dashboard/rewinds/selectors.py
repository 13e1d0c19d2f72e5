"""Reads of rewinds: a pipeline's, the open ones, one with its events."""
from __future__ import annotations

from dashboard.models import AuditEvent, Pipeline, RewindRequest


def pipeline_rewinds(*, pipeline: Pipeline, limit: int = 20) -> list:
    return list(RewindRequest.objects.filter(pipeline=pipeline).select_related("requested_by", "decided_by")
                .order_by("-requested_at")[:limit])


def rewinds_list(*, open_only: bool = False, limit: int = 200) -> list:
    """Rewinds, open ones first, newest first."""

    rows = RewindRequest.objects.select_related("pipeline", "pipeline__store", "requested_by", "decided_by")
    if open_only:
        rows = rows.filter(status__in=RewindRequest.OPEN)
    return sorted(rows.order_by("-requested_at")[:limit], key=lambda r: not r.is_open)


def rewind_get(*, rewind_id: int):
    return RewindRequest.objects.select_related("pipeline", "pipeline__store", "pipeline__store__cluster",
                                                "requested_by", "decided_by").get(pk=rewind_id)


def rewind_events(*, rewind_id: int) -> list:
    """The audit events of one rewind, oldest first (its timeline)."""

    return list(AuditEvent.objects.filter(action__startswith="rewind.", subject__startswith=f"rewind #{rewind_id} ")
                .order_by("id"))
