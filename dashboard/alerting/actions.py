"""What the people on call do: acknowledge an open incident, silence a pipeline (or every pipeline
matching patterns) for a while, cancel a silence. Each is one transaction that appends its audit
event (audit_append), by the `actor` given.

Who may: a user with the operator or the approver role (the people on call); a viewer, a user
without a role or an actor that is no user (a job, a command) is refused with 403. Refusals are
ActionRefused, with the message a person reads and the HTTP status a page or an API answers with
(400 bad input, 403 not allowed, 404 no such row, 409 the row's state forbids it).

An incident is acknowledged once: a second acknowledgement is refused (409) and names who
acknowledged it, so the record of who took it never changes hands silently.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from dashboard import params
from dashboard.accounts.roles import APPROVER, OPERATOR, user_has_role
from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import Incident, Pipeline, Silence

NOTE_MAX_CHARS = 2000
PATTERN_MAX_CHARS = 1000  # Silence.*_pattern
SILENCE_MIN_S = 5 * 60
SILENCE_MAX_S = 30 * 86400
# A silence may be planned ahead (maintenance tomorrow), at most this far.
SILENCE_START_MAX_AHEAD_S = 30 * 86400
ON_CALL_ROLES = (OPERATOR, APPROVER)


class ActionRefused(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


def may_act_on_call(user) -> bool:
    """Whether the user may acknowledge and silence (the pages show the forms to them only)."""
    return any(user_has_role(user, role) for role in ON_CALL_ROLES)


def _check_on_call(actor: Actor, doing: str) -> None:
    user = None if actor.user_id is None else get_user_model().objects.filter(pk=actor.user_id).first()
    if user is None:
        raise ActionRefused(f"{doing} is done by a person with the operator or approver role; {actor.who!r} is not one", 403)
    if not may_act_on_call(user):
        raise ActionRefused(f"{doing} needs the operator or approver role (on call); "
                            f"{user.get_username()!r} has neither", 403)


def _text(name: str, value: str, max_chars: int, *, what: str) -> str:
    """Text a person typed: at most `max_chars`, no NUL (params.text) and no other control
    character than tab and line breaks (it would hide or garble the text where it is shown)."""
    try:
        params.text(name, value, max_chars)
    except params.BadParam:
        raise ActionRefused(f"the {what} must be at most {max_chars} characters without NUL "
                            f"(it has {len(value)})") from None
    if any((ord(c) < 32 and c not in "\t\n\r") or 0x7F <= ord(c) < 0xA0 for c in value):
        raise ActionRefused(f"the {what} holds a control character: type plain text")
    return value.strip()


def _duration_words(seconds: float) -> str:
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)} d"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 60)} min"


# --- incidents ---------------------------------------------------------------------------------------


def incident_acknowledge(*, incident_id: int, actor: Actor, note: str = "") -> Incident:
    """Mark an open incident as taken by the actor (who, when, a note). Refused for a closed
    incident and for one acknowledged already (409, naming who)."""
    _check_on_call(actor, "acknowledging an incident")
    note = _text("note", note or "", NOTE_MAX_CHARS, what="note")
    now = timezone.now()
    with transaction.atomic():
        # A conditional UPDATE: of two people acknowledging at once, one wins, the other is told.
        won = Incident.objects.filter(pk=incident_id, closed_at=None, acknowledged_at=None).update(
            acknowledged_at=now, acknowledged_by_id=actor.user_id, ack_note=note)
        incident = Incident.objects.select_related("pipeline", "pipeline__store", "acknowledged_by").filter(
            pk=incident_id).first()
        if incident is None:
            raise ActionRefused(f"no incident with id {incident_id}", 404)
        if not won:
            if incident.closed_at is not None:
                raise ActionRefused(f"incident #{incident.pk} was closed at "
                                    f"{incident.closed_at.isoformat(timespec='seconds')}: only an open incident "
                                    "is acknowledged", 409)
            by = incident.acknowledged_by.get_username() if incident.acknowledged_by else "a deleted user"
            raise ActionRefused(f"incident #{incident.pk} was already acknowledged by {by} at "
                                f"{incident.acknowledged_at.isoformat(timespec='seconds')}", 409)
        of = "" if incident.partition is None else f" partition {incident.partition}"
        audit_append(action="incident.acknowledged", subject=f"incident #{incident.pk} of {incident.pipeline}{of}",
                     pipeline=incident.pipeline, before=None,
                     after={"acknowledged_at": now.isoformat(), "note": note},
                     details={"incident": incident.pk, "partition": incident.partition,
                              "status": incident.status, "worst_status": incident.worst_status},
                     actor=actor)
    return incident


# --- silences ------------------------------------------------------------------------------------------


def silence_create(
    *, actor: Actor, duration_s: int, reason: str, pipeline: Pipeline | None = None, store_pattern: str = "",
    topic_pattern: str = "", group_pattern: str = "", owner_pattern: str = "", starts_at: datetime | None = None,
) -> Silence:
    """Silence one pipeline, or every pipeline matching the patterns (shell globs, blank matches
    anything; at least one pattern), from `starts_at` (default now) for `duration_s`, between
    5 minutes and 30 days. Incidents still open and show; no notification is sent for them."""
    _check_on_call(actor, "silencing")
    if isinstance(duration_s, bool) or not isinstance(duration_s, int) \
            or not SILENCE_MIN_S <= duration_s <= SILENCE_MAX_S:
        raise ActionRefused(f"a silence lasts from {_duration_words(SILENCE_MIN_S)} to "
                            f"{_duration_words(SILENCE_MAX_S)}; {duration_s!r} seconds is not in that range")
    reason = _text("reason", reason or "", NOTE_MAX_CHARS, what="reason")
    if not reason:
        raise ActionRefused("a reason is required: say why (maintenance, a known outage, a ticket)")
    patterns = {"store_pattern": store_pattern, "topic_pattern": topic_pattern, "group_pattern": group_pattern,
                "owner_pattern": owner_pattern}
    for name, value in patterns.items():
        patterns[name] = _text(name, value or "", PATTERN_MAX_CHARS, what=name.replace("_", " "))
    if pipeline is not None and any(patterns.values()):
        raise ActionRefused("silence either one pipeline or the pipelines matching patterns, not both")
    if pipeline is None and not any(patterns.values()):
        raise ActionRefused("a silence by pattern needs at least one pattern (store, topic, group or owner): "
                            "a silence of everything is not one to set by accident")
    now = timezone.now()
    starts_at = starts_at or now
    if starts_at < now - timedelta(minutes=1) or starts_at > now + timedelta(seconds=SILENCE_START_MAX_AHEAD_S):
        raise ActionRefused(f"a silence starts now or within {_duration_words(SILENCE_START_MAX_AHEAD_S)}; "
                            f"{starts_at.isoformat(timespec='minutes')} is not")
    with transaction.atomic():
        silence = Silence.objects.create(
            pipeline=pipeline, starts_at=starts_at, ends_at=starts_at + timedelta(seconds=duration_s), reason=reason,
            created_by_id=actor.user_id, **patterns)
        audit_append(action="silence.created", subject=silence_subject(silence), pipeline=pipeline, before=None,
                     after=silence_snapshot(silence), details={"silence": silence.pk, "duration_s": duration_s},
                     actor=actor)
    return silence


def silence_cancel(*, silence_id: int, actor: Actor) -> Silence:
    """End a silence now (one not cancelled and not over yet)."""
    _check_on_call(actor, "cancelling a silence")
    now = timezone.now()
    with transaction.atomic():
        won = Silence.objects.filter(pk=silence_id, cancelled_at=None, ends_at__gt=now).update(cancelled_at=now)
        silence = Silence.objects.select_related("pipeline", "pipeline__store").filter(pk=silence_id).first()
        if silence is None:
            raise ActionRefused(f"no silence with id {silence_id}", 404)
        if not won:
            if silence.cancelled_at is not None:
                raise ActionRefused(f"silence #{silence.pk} was cancelled already, at "
                                    f"{silence.cancelled_at.isoformat(timespec='seconds')}", 409)
            raise ActionRefused(f"silence #{silence.pk} ended at {silence.ends_at.isoformat(timespec='seconds')}: "
                                "nothing to cancel", 409)
        audit_append(action="silence.cancelled", subject=silence_subject(silence), pipeline=silence.pipeline,
                     before={"ends_at": silence.ends_at.isoformat()}, after={"cancelled_at": now.isoformat()},
                     details={"silence": silence.pk}, actor=actor)
    return silence


def silence_subject(silence: Silence) -> str:
    """How the audit log names a silence: its pipeline, or its patterns."""
    if silence.pipeline_id is not None:
        return f"silence #{silence.pk} of {silence.pipeline} in store {silence.pipeline.store.name}"
    shown = ", ".join(f"{name.removesuffix('_pattern')} {value!r}" for name, value in (
        ("store_pattern", silence.store_pattern), ("topic_pattern", silence.topic_pattern),
        ("group_pattern", silence.group_pattern), ("owner_pattern", silence.owner_pattern)) if value)
    return f"silence #{silence.pk} of pipelines matching {shown}"


def silence_snapshot(silence: Silence) -> dict:
    return {"pipeline": str(silence.pipeline) if silence.pipeline_id else None,
            "store_pattern": silence.store_pattern, "topic_pattern": silence.topic_pattern,
            "group_pattern": silence.group_pattern, "owner_pattern": silence.owner_pattern,
            "starts_at": silence.starts_at.isoformat(), "ends_at": silence.ends_at.isoformat(),
            "reason": silence.reason}
