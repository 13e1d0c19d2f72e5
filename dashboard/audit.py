"""The audit log: append-only, hash-chained events (who, when, from where, what, before/after).

Every transition of a rewind and every change of stores, pipelines, roles and tokens appends an
event in the same transaction as the change, through `audit_append`. Each event's hash is
sha256 over the previous event's hash and the event's canonical JSON, so the log is a chain:
changing, inserting or deleting a row behind the application's back breaks it at that row, and
`audit_verify` (the `verify_audit` command, the audit page) says where.

Appends are serialised by a transaction-scoped PostgreSQL advisory lock, so ids follow the
chain; SQLite (the demo) serialises write transactions anyway.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from dashboard.models import AuditEvent

GENESIS = "0" * 64
_LOCK_KEY = 0x6F77_6175  # "owau": the advisory lock id of the chain's head


def _canonical(event: AuditEvent) -> str:
    payload = {
        "at": event.at.isoformat(), "actor": event.actor, "actor_user_id": event.actor_user_id,
        "remote_addr": event.remote_addr, "action": event.action, "subject": event.subject,
        "pipeline_id": event.pipeline_id, "pipeline_label": event.pipeline_label,
        "before": event.before, "after": event.after, "details": event.details,
    }
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def event_hash(prev_hash: str, event: AuditEvent) -> str:
    return hashlib.sha256(f"{prev_hash}\n{_canonical(event)}".encode()).hexdigest()


def audit_append(
    *, actor: str, action: str, subject: str, actor_user_id: int | None = None, remote_addr: str = "",
    pipeline=None, before=None, after=None, details: dict | None = None, at: datetime | None = None,
) -> AuditEvent:
    """Append one event to the chain, in the caller's transaction (so it commits or rolls back
    with the change it records). JSON values go through a round trip first: what is hashed is
    exactly what the database gives back."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        head = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS
        event = AuditEvent(
            at=at or timezone.now(),
            actor=actor[:300], actor_user_id=actor_user_id, remote_addr=(remote_addr or "")[:100],
            action=action[:100], subject=subject[:500],
            pipeline_id=getattr(pipeline, "pk", None),
            pipeline_label=(f"{pipeline.topic} / {pipeline.group} ({pipeline.store.name})" if pipeline else "")[:1300],
            before=_json_round_trip(before), after=_json_round_trip(after), details=_json_round_trip(details or {}),
            prev_hash=head,
        )
        event.hash = event_hash(head, event)
        event.save(force_insert=True)
        return event


def _json_round_trip(value):
    return None if value is None else json.loads(json.dumps(value, default=str))


@dataclass
class Verification:
    ok: bool
    checked: int
    broken_at: int | None = None  # id of the first event that does not chain
    reason: str = ""


def audit_verify() -> Verification:
    """Walk the chain in id order; the first event whose prev_hash is not its predecessor's hash,
    or whose hash does not match its content, is where the log was tampered with."""
    prev, prev_id, checked = GENESIS, None, 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev:
            after = f"event {prev_id}" if prev_id else "the start of the log"
            return Verification(False, checked, event.pk,
                                f"event {event.pk} ({event.action}) does not chain to {after}: an event between them was "
                                f"removed or inserted, or {after} was changed")
        if event_hash(prev, event) != event.hash:
            return Verification(False, checked, event.pk,
                                f"event {event.pk} ({event.action}) was changed after it was written")
        prev, prev_id, checked = event.hash, event.pk, checked + 1
    return Verification(True, checked)
