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

from dashboard.audit.actor import Actor
from dashboard.models import AuditEvent
from streamoffsets.urls import mask_url

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
    *, actor: Actor, action: str, subject: str, pipeline=None, before=None, after=None, details: dict | None = None, at: datetime | None = None,
) -> AuditEvent:
    """Append one event to the chain, by `actor` (who, their user id, from where), in the caller's transaction (so it commits or rolls back
    with the change it records). JSON values go through a round trip first: what is hashed is
    exactly what the database gives back."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        head = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS
        event = AuditEvent(
            at=at or timezone.now(),
            actor=actor.who[:300], actor_user_id=actor.user_id, remote_addr=(actor.remote_addr or "")[:100],
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


# --- before/after of model changes --------------------------------------------------------------

# Never written to the log, whatever the model: a secret in an append-only table cannot be removed.
_SECRET_FIELDS = {"password", "token_hash"}
# Masked even without a scheme: a bootstrap list may be "user:password@host:9092".
_URL_FIELDS = {"url", "bootstrap_servers"}


def model_snapshot(obj, *, fields: list[str] | None = None) -> dict:
    """The recordable values of a model instance's editable fields (or `fields`): foreign keys by
    their name (what a reader knows them by), times as ISO text, URLs through mask_url (user
    passwords, tokens and secret query parameters masked), secret fields left out."""
    values = {}
    for field in obj._meta.concrete_fields:
        if field.primary_key or not field.editable or field.name in _SECRET_FIELDS:
            continue
        if fields is not None and field.name not in fields:
            continue
        if field.is_relation:
            related = getattr(obj, field.name, None)
            value = None if related is None else str(related)
        else:
            value = field.value_from_object(obj)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, str) and ("://" in value or field.name in _URL_FIELDS):
                value = mask_url(value)
        values[field.name] = value
    return values


def changed_values(before: dict, after: dict) -> tuple[dict, dict]:
    """Only the keys whose values differ, from both sides."""
    keys = [k for k in {**before, **after} if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after.get(k) for k in keys}


# --- showing changes ----------------------------------------------------------------------------


def _shown(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, list) and all(isinstance(v, (str, int)) for v in value):
        return ", ".join(map(str, value)) if value else "(none)"  # roles: "operator, viewer"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def change_lines(before, after) -> list[str]:
    """A change, compactly, one line per key: offsets per partition as "p0: 120 → 40", other
    values as "url: a → b"; a side that is not a mapping is shown whole."""
    if not isinstance(before, dict) and not isinstance(after, dict):
        if before is None and after is None:
            return []
        return [f"{_shown(before)} → {_shown(after)}"]
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    keys = list(dict.fromkeys([*before, *after]))
    if all(str(k).isdigit() for k in keys):  # partitions: numeric order, "p" names them
        keys.sort(key=lambda k: int(k))
        return [f"p{k}: {_shown(before.get(k))} → {_shown(after.get(k))}" for k in keys]
    return [f"{k}: {_shown(before.get(k))} → {_shown(after.get(k))}" for k in keys]


# The families of actions, for the audit page's filter (a family matches "<family>.<anything>",
# so actions added later, e.g. by the rewind workflow, are found without a change here).
ACTION_FAMILIES = {
    "login": "logins",  # lockouts and unlocks (dashboard/accounts/lockout.py)
    "rewind": "rewinds",
    "store": "stores",
    "cluster": "clusters",
    "pipeline": "pipelines",
    "user": "users and roles",
    "group": "groups and their permissions",
    "token": "tokens",
    "start_report": "jobs' start reports",
    "incident": "incidents",
    "store_problem": "store problems",
    "source_health": "source health",
    "login_attempt": "login attempts (deleted in the admin)",
    "login_failure": "login failure logs (deleted in the admin)",
    "channel": "alert channels",
    "route": "alert routes",
    "silence": "silences",
    "notification": "notifications (deleted in the admin)",
}
# The actions this module's callers write outside the rewind workflow (which names its own).
KNOWN_ACTIONS = (
    "login.locked_out", "login.unlocked",
    "cluster.created", "cluster.changed", "cluster.deleted",
    "store.created", "store.changed", "store.deleted",
    "pipeline.created", "pipeline.declared", "pipeline.changed", "pipeline.deleted",
    "user.created", "user.changed", "user.roles_changed", "user.password_changed", "user.deleted",
    "group.created", "group.changed", "group.deleted",
    "token.issued", "token.revoked", "token.deleted",
    "start_report.received", "start_report.deleted", "incident.deleted", "store_problem.deleted",
    "source_health.deleted", "login_attempt.deleted", "login_failure.deleted",
    "channel.created", "channel.changed", "channel.deleted", "channel.tested",
    "route.created", "route.changed", "route.deleted",
    "silence.created", "silence.changed", "silence.cancelled", "silence.deleted",
    "incident.acknowledged", "notification.deleted", "pipeline.archived", "pipeline.unarchived",
)
