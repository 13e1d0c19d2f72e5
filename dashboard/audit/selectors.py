"""Reads of the audit log: filtered pages, the streamed export, and the cached chain verification
shown on the pages and /healthz."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from django.db.models import Q
from django.utils import timezone

from dashboard.audit.services import ACTION_FAMILIES, audit_verify
from dashboard.models import AuditEvent, Pipeline


def _audit_filtered(*, pipeline_id: int | None = None, actor: str | None = None, action: str | None = None,
                    q: str | None = None, since: datetime | None = None, until: datetime | None = None):

    rows = AuditEvent.objects.all()
    if pipeline_id is not None:
        rows = rows.filter(pipeline_id=pipeline_id)
    if actor:
        rows = rows.filter(actor__icontains=actor)
    if action:
        # A family ("rewind") matches every action of it ("rewind.requested", ...).
        rows = rows.filter(action__startswith=action + ".") if action in ACTION_FAMILIES else rows.filter(action=action)
    if q:
        rows = rows.filter(Q(subject__icontains=q) | Q(pipeline_label__icontains=q))
    if since is not None:
        rows = rows.filter(at__gte=since)
    if until is not None:
        rows = rows.filter(at__lt=until)
    return rows


def audit_events_page(*, before_id: int | None = None, limit: int = 50, **filters) -> tuple[list[dict], int | None]:
    """Events matching the filters (see _audit_filtered), newest first, at most `limit`, older
    than `before_id` (the cursor: keyset on the primary key, so an old page costs what the first
    does). Returns (rows, the next page's cursor or None). Each row says whether its pipeline
    still exists (one query for the page)."""
    rows = _audit_filtered(**filters)
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    found = list(rows.order_by("-id").values(
        "id", "at", "actor", "remote_addr", "action", "subject", "pipeline_id", "pipeline_label", "before", "after",
        "details")[:limit + 1])
    page = found[:limit]
    alive = set(Pipeline.objects.filter(pk__in={r["pipeline_id"] for r in page if r["pipeline_id"]})
                .values_list("pk", flat=True))
    for row in page:
        row["pipeline_exists"] = row["pipeline_id"] in alive
    return page, (page[-1]["id"] if len(found) > limit else None)


def audit_events_export(*, chunk_size: int = 2000, **filters) -> Iterator[dict]:
    """Every event matching the filters, oldest first (the chain's order), read in chunks."""
    return (_audit_filtered(**filters).order_by("id").values(
        "id", "at", "actor", "actor_user_id", "remote_addr", "action", "subject", "pipeline_id", "pipeline_label",
        "before", "after", "details", "prev_hash", "hash").iterator(chunk_size=chunk_size))


@dataclass(frozen=True)
class AuditCheck:
    """A verification of the chain and when it was made."""

    result: object  # dashboard.audit.services.Verification
    checked_at: datetime


_audit_checked: tuple[float, AuditCheck] | None = None  # (monotonic time, check), per process


def audit_verification(*, max_age_s: float = 60.0, refresh: bool = False) -> AuditCheck:
    """The chain's verification (dashboard.audit.services.audit_verify), at most `max_age_s` old: it walks
    the whole log, so pages reuse one result per process for a minute instead of each walking it.
    `refresh` walks it now ("verify now")."""
    import time

    global _audit_checked
    cached = _audit_checked
    if not refresh and cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    check = AuditCheck(audit_verify(), timezone.now())
    _audit_checked = (time.monotonic(), check)
    return check


def audit_verification_forget() -> None:
    """Drop the cached verification (tests; a restore of the log)."""
    global _audit_checked
    _audit_checked = None
