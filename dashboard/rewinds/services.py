"""The rewind workflow: request -> approve (by someone else) -> claim and apply (the job, on
restart; or the dashboard writes the target into the store) -> verified from the data.

State lives in RewindRequest; every transition is a conditional UPDATE (so two approvers or two
job instances cannot both win) and appends an audit event in the same transaction. Targets and
previews are the pure rules of streamoffsets.rewind.

Over 400 lines because it is one state machine: its transitions share the guards, the lease and
the audit helper, and split by actor (people, jobs, collectors) the parts would import each other.

A job's claim is a lease (REWIND_CLAIM_LEASE_S): the same instance claiming again gets its claim
back; a claim not followed by `applied` within the lease may be taken over by the pipeline's next
start, or cancelled by an approver. A claimed rewind whose marker batch (exactly the target,
after the claim) reaches the store is applied and verified from it even if `applied` never came.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from dashboard.accounts.roles import APPROVER, OPERATOR, user_has_role
from dashboard.alerting.rewind_notify import rewind_notify
from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import Batch, Pipeline, RewindRequest, WatermarkSample
from dashboard.monitoring.selectors import kafka_client_config
from offsetwatch.lib.timefmt import ms_text, utc_seconds
from streamoffsets import rewind as rules
from streamoffsets.errors import OffsetStoreError
from streamoffsets.evaluation import batch_interval_s, human_duration
from streamoffsets.kafka import KafkaWatermarkReader
from streamoffsets.stores.registry import open_store
from streamoffsets.thresholds import batch_silence
from streamoffsets.types import BatchOffsets, Offsets, OffsetsError
from streamoffsets.urls import mask_secrets

Status = RewindRequest.Status


class RewindRefused(Exception):
    """A request or transition that cannot be done; the message says what and why. `status` is
    the HTTP status an API answers with (400 bad input, 403 not allowed, 409 conflicting state)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


# --- the plan: what a rewind would do, now -------------------------------------------------------------


@dataclass
class Plan:
    target: Offsets
    current: Offsets
    watermarks: dict[int, tuple[int, int]]
    watermarks_at: datetime | None
    preview: rules.Preview
    problems: list[str]  # out-of-range partitions: a plan with problems cannot be requested or approved


def pipeline_position(*, pipeline: Pipeline) -> tuple[Offsets, dict[int, tuple[int, int]], datetime | None]:
    """The pipeline's committed offsets (newest stored batch) and its topic's newest watermarks."""
    newest = pipeline.batches.order_by("-batch_time_ms").values_list("offsets", flat=True).first() or {}
    current = Offsets.from_json(newest)
    sample = (WatermarkSample.objects.filter(cluster_id=pipeline.store.cluster_id, topic=pipeline.topic)
              .order_by("-sampled_at").first())
    return current, (sample.watermarks() if sample else {}), (sample.sampled_at if sample else None)


def rewind_plan(*, pipeline: Pipeline, kind: str, spec: dict) -> Plan:
    """Resolve a target against the pipeline's position now (no writes). Bad targets raise
    RewindRefused; out-of-range partitions are listed in the plan's problems."""
    current, watermarks, at = pipeline_position(pipeline=pipeline)
    if not watermarks:
        raise RewindRefused(f"no watermarks of topic {pipeline.topic!r} collected yet: wait for the first poll of "
                            f"cluster {pipeline.store.cluster.name}")
    batch_offsets = None
    if kind == "batch":
        batch = pipeline.batches.filter(batch_time_ms=spec.get("batch_time_ms")).values_list("offsets", flat=True).first()
        if batch is None:
            raise RewindRefused(f"no batch of this pipeline at {spec.get('batch_time_ms')!r} ms")
        batch_offsets = Offsets.from_json(batch)
    elif kind == "time" and spec.get("source") == "broker":
        batch_offsets = broker_offsets_for_time(pipeline=pipeline, time_ms=spec.get("time_ms"))
    elif kind == "time":
        at_ms = spec.get("time_ms")
        batch = (pipeline.batches.filter(batch_time_ms__lte=at_ms, committed=True).order_by("-batch_time_ms")
                 .values_list("offsets", flat=True).first()) if isinstance(at_ms, int) else None
        if batch is None:
            raise RewindRefused(f"no batch of this pipeline at or before {ms_text(at_ms, 'seconds')}: the history starts later")
        batch_offsets = Offsets.from_json(batch)
    try:
        explicit = None if spec.get("offsets") is None else Offsets.from_json(spec["offsets"])
        target = Offsets(rules.resolve_target(kind, current=current, watermarks=watermarks,
                                              batch_offsets=batch_offsets, offsets=explicit, shift=spec.get("shift")))
    except (rules.TargetError, OffsetsError) as exc:
        raise RewindRefused(str(exc)) from None
    recent = list(pipeline.batches.order_by("-batch_time_ms").values_list("batch_time_ms", "records")[:20])[::-1]
    preview = rules.preview(target, current, watermarks, rules.processing_rate(recent))
    return Plan(target, current, watermarks, at, preview, rules.check_target(target, watermarks))


def broker_offsets_for_time(*, pipeline: Pipeline, time_ms) -> dict[int, int]:
    """The broker's answer for a point in time (its timestamp index), per partition."""

    if not isinstance(time_ms, int):
        raise RewindRefused(f"a point in time is needed, not {time_ms!r}")
    reader = KafkaWatermarkReader(pipeline.store.cluster.bootstrap_servers, timeout_s=settings.IO_TIMEOUT_S,
                                  config=kafka_client_config(cluster_name=pipeline.store.cluster.name))
    try:
        return reader.offsets_for_time(pipeline.topic, time_ms)
    except OffsetStoreError as exc:
        raise RewindRefused(mask_secrets(f"the broker's timestamp lookup failed: {exc}",
                                         [pipeline.store.cluster.bootstrap_servers]), 409) from None


# --- people: request, decide, cancel ---------------------------------------------------------------------


def rewind_request(
    *, pipeline: Pipeline, user, kind: str, spec: dict, reason: str, ticket_url: str = "",
    mode: str = RewindRequest.Mode.JOB, actor: Actor | None = None,
) -> RewindRequest:
    """`actor`: who asks and from where (default: `user`, from no address)."""
    if not user_has_role(user, OPERATOR):
        raise RewindRefused(f"requesting a rewind needs the operator role; {user.username!r} does not have it", 403)
    if not reason.strip():
        raise RewindRefused("a reason is required: say why the data must be replayed")
    if mode not in RewindRequest.Mode.values:
        raise RewindRefused(f"unknown mode {mode!r}")
    if mode == RewindRequest.Mode.STORE and pipeline.store.kind == "checkpoint":
        raise RewindRefused("a checkpoint directory is read-only here: rewind a checkpoint job through the job library")
    plan = rewind_plan(pipeline=pipeline, kind=kind, spec=spec)
    if plan.problems:
        raise RewindRefused("the target cannot be honoured: " + "; ".join(plan.problems))
    now = timezone.now()
    try:
        with transaction.atomic():
            rewind = RewindRequest.objects.create(
                pipeline=pipeline, mode=mode, target_kind=kind, target_spec=spec,
                target_offsets=plan.target.to_json(), before_offsets=plan.current.to_json(),
                preview=plan.preview.as_dict(), reason=reason.strip(), ticket_url=ticket_url,
                requested_by=user, requested_at=now,
                expires_at=now + timedelta(seconds=settings.REWIND_APPROVAL_TTL_S),
            )
            _audit(rewind, "rewind.requested", actor=actor or Actor.of_user(user),
                   details={"reason": rewind.reason, "ticket_url": ticket_url, "target": {"kind": kind, **spec},
                            "mode": mode, "preview": rewind.preview})
            rewind_notify(pipeline=pipeline, event="requested", rewind_summary=rewind_summary(rewind))
    except IntegrityError:
        open_one = RewindRequest.objects.filter(pipeline=pipeline, status__in=RewindRequest.OPEN).first()
        raise RewindRefused(f"this pipeline already has an open rewind (#{open_one.pk if open_one else '?'}, "
                            f"{open_one.status if open_one else 'open'}): finish or cancel it first", 409) from None
    return rewind


def rewind_decide(
    *, rewind: RewindRequest, user, approve: bool, comment: str = "", actor: Actor | None = None,
) -> RewindRequest:
    """Approve or reject. The approver sees the plan recomputed now; a target that became out of
    range since the request cannot be approved."""
    if not user_has_role(user, APPROVER):
        raise RewindRefused(f"deciding on a rewind needs the approver role; {user.username!r} does not have it", 403)
    if rewind.requested_by_id == user.pk:
        raise RewindRefused("a rewind must be approved by someone other than its requester", 403)
    now = timezone.now()
    if approve:
        plan = rewind_plan(pipeline=rewind.pipeline, kind=rewind.target_kind, spec=rewind.target_spec)
        if plan.problems:
            raise RewindRefused("cannot approve: the target is no longer valid: " + "; ".join(plan.problems), 409)
        if plan.target.to_json() != rewind.target_offsets:
            raise RewindRefused("cannot approve: the target resolves differently now than when it was requested; "
                                "reject it and request again", 409)
    new_status = Status.APPROVED if approve else Status.REJECTED
    with transaction.atomic():
        changes = {"status": new_status, "decided_by": user, "decided_at": now, "decision_comment": comment.strip()}
        if approve:
            changes["expires_at"] = now + timedelta(seconds=settings.REWIND_CLAIM_TTL_S)
        else:
            changes["finished_at"] = now
        won = RewindRequest.objects.filter(pk=rewind.pk, status=Status.REQUESTED, expires_at__gt=now).update(**changes)
        if not won:
            rewind.refresh_from_db()
            raise RewindRefused(f"rewind #{rewind.pk} is {rewind.status}, not awaiting a decision", 409)
        rewind.refresh_from_db()
        _audit(rewind, "rewind.approved" if approve else "rewind.rejected", actor=actor or Actor.of_user(user),
               details={"comment": rewind.decision_comment})
        rewind_notify(pipeline=rewind.pipeline, event="approved" if approve else "rejected",
                      rewind_summary=rewind_summary(rewind))
    return rewind


def rewind_cancel(*, rewind: RewindRequest, user, actor: Actor | None = None) -> RewindRequest:
    """The requester or an approver may cancel before a job claims it; an approver may also cancel
    a claim whose lease ran out with no `applied` report (a stuck claim)."""
    if rewind.requested_by_id != user.pk and not user_has_role(user, APPROVER):
        raise RewindRefused("only the requester or an approver may cancel a rewind", 403)
    now = timezone.now()
    current = RewindRequest.objects.filter(pk=rewind.pk).values_list("status", flat=True).first()
    if current == Status.CLAIMED:
        return _cancel_stuck_claim(rewind=rewind, user=user, now=now, actor=actor or Actor.of_user(user))
    with transaction.atomic():
        if not RewindRequest.objects.filter(pk=rewind.pk, status__in=[Status.REQUESTED, Status.APPROVED]).update(
                status=Status.CANCELLED, finished_at=now):
            rewind.refresh_from_db()
            raise RewindRefused(f"rewind #{rewind.pk} is {rewind.status}: it can no longer be cancelled", 409)
        rewind.refresh_from_db()
        _audit(rewind, "rewind.cancelled", actor=actor or Actor.of_user(user))
    return rewind


def _cancel_stuck_claim(*, rewind: RewindRequest, user, now: datetime, actor: Actor) -> RewindRequest:
    if not user_has_role(user, APPROVER):
        raise RewindRefused("a claimed rewind can only be cancelled by an approver (once its claim's lease ran out)", 403)
    rewind.refresh_from_db()
    holder, at = rewind.claimed_by, rewind.claimed_at
    with transaction.atomic():
        if not RewindRequest.objects.filter(pk=rewind.pk, status=Status.CLAIMED, claimed_by=holder, claimed_at=at,
                                            claimed_at__lte=lease_limit(now)).update(
                status=Status.CANCELLED, finished_at=now,
                outcome=f"cancelled by {user.username} while claimed by {holder} since {utc_seconds(at)} with no `applied` "
                        "report: if that job did apply it, the store holds the target"):
            rewind.refresh_from_db()
            if rewind.status == Status.CLAIMED and rewind.claimed_at > lease_limit(now):
                raise RewindRefused(f"rewind #{rewind.pk} is claimed by {rewind.claimed_by} and its lease runs until "
                                    f"{utc_seconds(claim_lease_expires_at(rewind))}: it can be cancelled after that", 409)
            raise RewindRefused(f"rewind #{rewind.pk} is {rewind.status}: it can no longer be cancelled", 409)
        rewind.refresh_from_db()
        _audit(rewind, "rewind.cancelled", actor=actor,
               details={"was": Status.CLAIMED, "claimed_by": holder, "claimed_at": utc_seconds(at)})
    return rewind


def rewinds_expire(*, now: datetime | None = None) -> int:
    """Requests not decided in time and approvals no job claimed in time expire (beat runs it)."""
    now = now or timezone.now()
    expired = 0
    for rewind in RewindRequest.objects.filter(status__in=[Status.REQUESTED, Status.APPROVED], expires_at__lte=now):
        with transaction.atomic():
            was = rewind.status
            if RewindRequest.objects.filter(pk=rewind.pk, status=was, expires_at__lte=now).update(
                    status=Status.EXPIRED, finished_at=now,
                    outcome="not approved in time" if was == Status.REQUESTED else "no job claimed it in time"):
                rewind.refresh_from_db()
                _audit(rewind, "rewind.expired", actor=Actor.SYSTEM, details={"was": was})
                expired += 1
    # Claimed, but neither an `applied` report nor the marker batch came (the job died between its
    # claim and its start, or its claim's answer was lost and no later start took it over).
    for rewind in RewindRequest.objects.filter(status=Status.CLAIMED, claimed_at__lte=limit_claimed(now)):
        if _settle_claim_from_marker(rewind):
            continue
        _finish(rewind, Status.FAILED, f"claimed by {rewind.claimed_by} at {utc_seconds(rewind.claimed_at)}; no `applied` "
                                       "report and no batch at the target (the job's marker) seen in the store "
                                       f"within {human_duration(settings.REWIND_VERIFY_TIMEOUT_S)}: check the job's "
                                       "log; request the rewind again if it is still needed")
    # Applied, but no batch after it ever appeared: the job never really started.
    limit = now - timedelta(seconds=settings.REWIND_VERIFY_TIMEOUT_S)
    for rewind in RewindRequest.objects.filter(status=Status.APPLIED, applied_at__lte=limit):
        _finish(rewind, Status.FAILED, f"no batch of the pipeline was seen within "
                                        f"{human_duration(settings.REWIND_VERIFY_TIMEOUT_S)} of the job applying it")
    return expired


# --- jobs: claim, applied, failed -------------------------------------------------------------------------


def limit_claimed(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.REWIND_VERIFY_TIMEOUT_S)


def lease_limit(now: datetime) -> datetime:
    """Claims made at or before this have outlived their lease."""
    return now - timedelta(seconds=settings.REWIND_CLAIM_LEASE_S)


def claim_lease_expires_at(rewind: RewindRequest) -> datetime | None:
    if rewind.status != Status.CLAIMED or rewind.claimed_at is None:
        return None
    return rewind.claimed_at + timedelta(seconds=settings.REWIND_CLAIM_LEASE_S)


def rewind_claimable(*, rewind: RewindRequest, now: datetime | None = None) -> bool:
    """Whether a new instance's claim would win now: approved and unexpired, or a job's claim whose
    lease ran out (the dashboard's clock decides, not the job's)."""
    now = now or timezone.now()
    if rewind.status == Status.APPROVED:
        return rewind.expires_at > now
    return (rewind.status == Status.CLAIMED and rewind.mode == RewindRequest.Mode.JOB
            and rewind.claimed_at is not None and rewind.claimed_at <= lease_limit(now))


def rewind_for_job(*, pipeline: Pipeline) -> RewindRequest | None:
    """The rewind a job of this pipeline must not start past: approved and unexpired, or claimed
    (by an instance that has not reported `applied`). A claim whose lease ran out and whose marker
    batch the collectors already recorded is settled from it first (then nothing is pending)."""
    now = timezone.now()
    rewind = RewindRequest.objects.filter(
        Q(status=Status.APPROVED, expires_at__gt=now) | Q(status=Status.CLAIMED),
        pipeline=pipeline, mode=RewindRequest.Mode.JOB,
    ).first()
    if rewind is not None and rewind_claimable(rewind=rewind, now=now) and rewind.status == Status.CLAIMED \
            and _settle_claim_from_marker(rewind):
        return None
    return rewind


def rewind_claim(
    *, pipeline: Pipeline, rewind_id: int, instance: str, actor: Actor,
) -> RewindRequest:
    """Exactly one claimer wins: a conditional UPDATE from approved (and unexpired) to claimed.
    The instance holding the claim gets it again (its first answer may have been lost); another
    instance takes over a claim whose lease ran out (conditional on the claim it saw).

    `actor` is who authenticated (the pipeline token: Actor.of_job); the job
    names its `instance` itself, so that goes into the event's details, never its actor."""
    instance = (instance or "").strip()[:300]
    if not instance:
        raise RewindRefused("'instance' (who is claiming: host, process, run id) is required")
    now = timezone.now()
    with transaction.atomic():
        won = RewindRequest.objects.filter(
            pk=rewind_id, pipeline=pipeline, status=Status.APPROVED, mode=RewindRequest.Mode.JOB, expires_at__gt=now,
        ).update(status=Status.CLAIMED, claimed_at=now, claimed_by=instance)
        rewind = _job_rewind(pipeline, rewind_id)
        if won:
            _audit(rewind, "rewind.claimed", actor=actor, details={"instance": instance})
            return rewind
    if rewind.status == Status.CLAIMED and rewind.mode == RewindRequest.Mode.JOB:
        if rewind.claimed_by == instance:
            return rewind  # the same instance again: its claim stands (no new transition, no event)
        if rewind_claimable(rewind=rewind, now=now) and not _settle_claim_from_marker(rewind):
            return _take_over(rewind, instance=instance, actor=actor, now=now)
        rewind.refresh_from_db()
    why = "its approval expired" if rewind.status == Status.APPROVED else f"it is {rewind.status}"
    if rewind.status == Status.CLAIMED:
        why = (f"{rewind.claimed_by} claimed it at {utc_seconds(rewind.claimed_at)} and its lease runs until "
               f"{utc_seconds(claim_lease_expires_at(rewind))}")
    elif rewind.status in (Status.APPLIED, Status.VERIFIED) and rewind.claimed_by:
        why += f" (applied by {rewind.claimed_by})"
    raise RewindRefused(f"rewind #{rewind_id} cannot be claimed: {why}", 409)


def _take_over(rewind: RewindRequest, *, instance: str, actor: Actor, now: datetime) -> RewindRequest:
    holder, at = rewind.claimed_by, rewind.claimed_at
    with transaction.atomic():
        if not RewindRequest.objects.filter(pk=rewind.pk, status=Status.CLAIMED, claimed_by=holder, claimed_at=at,
                                            claimed_at__lte=lease_limit(now)).update(claimed_by=instance, claimed_at=now):
            rewind.refresh_from_db()
            raise RewindRefused(f"rewind #{rewind.pk} cannot be claimed: it is {rewind.status}"
                                f"{' by ' + rewind.claimed_by if rewind.claimed_by else ''} (taken over meanwhile)", 409)
        rewind.refresh_from_db()
        _audit(rewind, "rewind.claim_taken_over", actor=actor,
               details={"instance": instance, "previous_claimed_by": holder, "previous_claimed_at": utc_seconds(at),
                        "lease_s": settings.REWIND_CLAIM_LEASE_S,
                        "why": "no `applied` report within the claim's lease"})
    return rewind


def rewind_applied(
    *, pipeline: Pipeline, rewind_id: int, instance: str, offsets: dict, marker_batch_ms: int | None,
    actor: Actor,
) -> RewindRequest:
    """The job started from `offsets` (having saved them to its store as the batch at
    `marker_batch_ms`). Offsets other than the target fail the rewind, with the difference."""
    try:
        started = Offsets.from_json(offsets).to_json()
    except OffsetsError:
        started = {}
    if not started:
        raise RewindRefused("'offsets' must map partition ids to non-negative integers")
    now = timezone.now()
    with transaction.atomic():
        if not RewindRequest.objects.filter(pk=rewind_id, pipeline=pipeline, status=Status.CLAIMED,
                                            claimed_by=(instance or "").strip()[:300]).update(
                status=Status.APPLIED, applied_at=now, applied_offsets=started, marker_batch_ms=marker_batch_ms):
            rewind = _job_rewind(pipeline, rewind_id)
            if rewind.status in (Status.APPLIED, Status.VERIFIED) and rewind.claimed_by == (instance or "").strip()[:300] \
                    and rewind.applied_offsets == started:
                return rewind  # a late or repeated report of what is recorded already (e.g. from its marker)
            raise RewindRefused(f"rewind #{rewind_id} is {rewind.status}"
                                f"{' by ' + rewind.claimed_by if rewind.claimed_by else ''}: not claimed by {instance!r}", 409)
        rewind = _job_rewind(pipeline, rewind_id)
        _audit(rewind, "rewind.applied", actor=actor,
               before=rewind.before_offsets, after=started, details={"instance": instance})
    if started != rewind.target_offsets:
        return _finish(rewind, Status.FAILED, "the job started elsewhere than the target: " +
                       _difference(rewind.target_offsets, started))
    return rewind


def rewind_job_failed(
    *, pipeline: Pipeline, rewind_id: int, instance: str, error: str, actor: Actor,
) -> RewindRequest:
    """The job could not apply a rewind it claimed (e.g. its store refused the write)."""
    rewind = _job_rewind(pipeline, rewind_id)
    if rewind.status not in (Status.CLAIMED, Status.APPLIED) or rewind.claimed_by != (instance or "").strip()[:300]:
        raise RewindRefused(f"rewind #{rewind_id} is {rewind.status}: not claimed by {instance!r}", 409)
    return _finish(rewind, Status.FAILED, f"the job reported: {str(error)[:2000]}", actor=actor,
                   details={"instance": (instance or "").strip()[:300]})


def _job_rewind(pipeline: Pipeline, rewind_id: int) -> RewindRequest:
    rewind = RewindRequest.objects.filter(pk=rewind_id, pipeline=pipeline).first()
    if rewind is None:
        raise RewindRefused(f"no rewind #{rewind_id} for this pipeline", 404)
    return rewind


# --- verification (the collectors) ---------------------------------------------------------------------


def rewinds_verify(*, pipeline_ids: list[int] | None = None, store_id: int | None = None) -> int:
    """Applied rewinds of these pipelines: verified when the batch that marks the start (the target
    the job or the dashboard wrote) is in the store's history with exactly the target's offsets,
    failed with the difference when it is not. Stores that keep only their current offsets may
    have moved past the marker before a poll saw it: the first batch after it then must not be
    behind the target anywhere. Claimed rewinds whose `applied` report never came are settled from
    their marker first (_settle_claim_from_marker). Returns how many were settled. The pipelines:
    `pipeline_ids`, or every pipeline of the store `store_id` (a store poll's)."""
    scope = Q(pipeline__store_id=store_id) if store_id is not None else Q(pipeline_id__any=pipeline_ids)
    settled = 0
    for rewind in RewindRequest.objects.filter(scope, status=Status.CLAIMED):
        settled += _settle_claim_from_marker(rewind)
    for rewind in RewindRequest.objects.filter(scope, status=Status.APPLIED, marker_batch_ms__isnull=False):
        after = list(Batch.objects.filter(pipeline_id=rewind.pipeline_id, batch_time_ms__gte=rewind.marker_batch_ms)
                     .order_by("batch_time_ms").values_list("batch_time_ms", "offsets")[:1])
        if not after:
            continue
        batch_ms, offsets = after[0]
        target = rewind.target_offsets
        if batch_ms == rewind.marker_batch_ms:
            if offsets == target:
                _finish(rewind, Status.VERIFIED, f"the job's first batch after the restart starts at the target "
                                                 f"(batch {ms_text(batch_ms, 'seconds')})")
            else:
                _finish(rewind, Status.FAILED, f"the batch that should start at the target ({ms_text(batch_ms, 'seconds')}) "
                                               f"differs: {_difference(target, offsets)}")
        else:
            behind = {p: o for p, o in offsets.items() if p in target and o < target[p]}
            if behind:
                _finish(rewind, Status.FAILED, f"the first batch after the rewind ({ms_text(batch_ms, 'seconds')}) is behind the "
                                               f"target: {_difference(target, offsets)}")
            else:
                _finish(rewind, Status.VERIFIED, f"the store moved past the start before a poll saw it; its first batch "
                                                 f"after the rewind ({ms_text(batch_ms, 'seconds')}) continues from the target")
        settled += 1
    return settled


def _settle_claim_from_marker(rewind: RewindRequest) -> bool:
    """A claimed rewind whose job wrote its marker (a batch after the claim holding exactly the
    target) but whose `applied` report was lost: applied and verified from the marker, saying so.
    Whether a batch merely continuing from the target is the job's cannot be told without the
    report, so only the exact marker counts. Returns whether it was settled."""
    since_ms = int(rewind.claimed_at.timestamp() * 1000)
    marker_ms = (Batch.objects.filter(pipeline_id=rewind.pipeline_id, batch_time_ms__gte=since_ms,
                                      offsets=rewind.target_offsets)
                 .order_by("batch_time_ms").values_list("batch_time_ms", flat=True).first())
    if marker_ms is None:
        return False
    holder, at = rewind.claimed_by, rewind.claimed_at
    note = (f"the `applied` report of {holder} (claimed at {utc_seconds(at)}) never arrived; the store's batch at "
            f"{ms_text(marker_ms, 'seconds')} holds exactly the target: the job's marker")
    with transaction.atomic():
        if not RewindRequest.objects.filter(pk=rewind.pk, status=Status.CLAIMED, claimed_by=holder, claimed_at=at).update(
                status=Status.APPLIED, marker_batch_ms=marker_ms, applied_offsets=rewind.target_offsets,
                applied_at=datetime.fromtimestamp(marker_ms / 1000, tz=dt_timezone.utc)):
            return False
        rewind.refresh_from_db()
        _audit(rewind, "rewind.applied", actor=Actor.SYSTEM, details={"note": note, "claimed_by": holder,
                                                                  "marker_batch_ms": marker_ms})
        _finish(rewind, Status.VERIFIED, f"the job's first batch after the restart starts at the target (batch "
                                         f"{ms_text(marker_ms, 'seconds')}); its `applied` report never arrived: {note}")
    return True


def _difference(target: dict[str, int], actual: dict[str, int]) -> str:
    parts = [f"partition {p}: {actual.get(p, '—')} instead of {o}" for p, o in sorted(target.items(), key=lambda kv: int(kv[0]))
             if actual.get(p) != o]
    return "; ".join(parts) or "no difference"


def _finish(
    rewind: RewindRequest, status: str, outcome: str, *, actor: Actor = Actor.SYSTEM, details: dict | None = None,
) -> RewindRequest:
    now = timezone.now()
    with transaction.atomic():
        if RewindRequest.objects.filter(pk=rewind.pk, status=rewind.status).update(
                status=status, finished_at=now, outcome=outcome):
            rewind.refresh_from_db()
            _audit(rewind, f"rewind.{status}", actor=actor,
                   details={**(details or {}), "outcome": outcome})
    return rewind


def rewind_summary(rewind: RewindRequest) -> dict:
    """What notifications say about a rewind (dashboard.alerting.rewind_notify)."""
    from django.urls import reverse

    pipeline = rewind.pipeline
    return {
        "id": rewind.pk, "pipeline": pipeline.pk, "topic": pipeline.topic, "group": pipeline.group,
        "store": pipeline.store.name, "status": rewind.status, "requested_by": rewind.requested_by.username,
        "approved_by": rewind.decided_by.username if rewind.decided_by_id and rewind.status != Status.REJECTED else None,
        "reason": rewind.reason, "ticket_url": rewind.ticket_url or None,
        "target": {"kind": rewind.target_kind, **rewind.target_spec},
        "before": rewind.before_offsets, "after": rewind.target_offsets,
        "url": settings.PUBLIC_URL.rstrip("/") + reverse("rewind", args=[rewind.pk]) if settings.PUBLIC_URL else None,
    }


def _audit(rewind: RewindRequest, action: str, *, actor: Actor, before=None, after=None,
           details: dict | None = None) -> None:
    audit_append(
        actor=actor, action=action,
        subject=f"rewind #{rewind.pk} of {rewind.pipeline.topic} / {rewind.pipeline.group} to {rewind.target_kind}",
        pipeline=rewind.pipeline, before=before if before is not None else rewind.before_offsets,
        after=after if after is not None else rewind.target_offsets, details=details or {},
    )


def pipeline_observed_stopped(*, pipeline: Pipeline, now: datetime | None = None) -> tuple[bool, str]:
    """Whether the job is seen stopped: no batch for the status rules' STOPPED threshold."""
    now = now or timezone.now()
    if pipeline.last_batch_ms is None:
        return True, "no batch was ever seen"
    interval = batch_interval_s([t / 1000 for t in pipeline.recent_batch_ms])
    silence = batch_silence(pipeline.last_batch_ms / 1000, now.timestamp(), interval,
                            stop_after_intervals=settings.STOP_AFTER_INTERVALS, min_stale_s=settings.STALE_AFTER_S)
    if silence.stopped:
        return True, f"no batch for {human_duration(silence.silent_s)}"
    return False, (f"its last batch was {human_duration(silence.silent_s)} ago (stopped means none for "
                   f"{human_duration(silence.threshold_s)})")


# --- write into the store (jobs that do not use the library) -------------------------------------------


def rewind_write_to_store(*, rewind: RewindRequest, user, actor: Actor | None = None) -> RewindRequest:
    """For an approved rewind in store mode: write the target where the job will read it (a new
    HBase row, ZooKeeper nodes, the offset file, the Kafka group's offsets), only while the job is
    observed stopped. Verified later like any rewind: from the batch the write makes."""

    if not user_has_role(user, OPERATOR):
        raise RewindRefused(f"writing a rewind needs the operator role; {user.username!r} does not have it", 403)
    if rewind.mode != RewindRequest.Mode.STORE:
        raise RewindRefused(f"rewind #{rewind.pk} is applied by the job itself, not written into the store", 409)
    # The pipeline as it is now (not as cached on the rewind): "stopped" must be current.
    pipeline = Pipeline.objects.select_related("store", "store__cluster").get(pk=rewind.pipeline_id)
    stopped, why = pipeline_observed_stopped(pipeline=pipeline)
    if not stopped:
        raise RewindRefused(f"the job is not observed stopped ({why}): stop it, wait for the dashboard to see it "
                            "stopped, then write the rewind", 409)
    plan = rewind_plan(pipeline=pipeline, kind=rewind.target_kind, spec=rewind.target_spec)
    if plan.problems:
        raise RewindRefused("the target is no longer valid: " + "; ".join(plan.problems), 409)
    actor = actor or Actor.of_user(user)
    instance = f"dashboard store write by {user.username}"
    claimed = rewind_claim_for_store(rewind=rewind, instance=instance, actor=actor)
    marker_ms = int(timezone.now().timestamp() * 1000)
    target = dict(Offsets.from_json(rewind.target_offsets))
    try:
        with open_store(pipeline.store.url, timeout_s=settings.IO_TIMEOUT_S,
                        kafka_config=kafka_client_config(cluster_name=pipeline.store.cluster.name)) as store:
            store.save_batch(BatchOffsets(pipeline.topic, pipeline.group, marker_ms, target))
    except (OffsetStoreError, OSError) as exc:
        # The client library's message may quote the store's URL or its password: masked.
        error = mask_secrets(f"writing the target into store {pipeline.store.name} failed: {exc}",
                             [pipeline.store.url, pipeline.store.cluster.bootstrap_servers])
        return _finish(claimed, Status.FAILED, error, actor=actor, details={"instance": instance})
    return rewind_applied(pipeline=pipeline, rewind_id=rewind.pk, instance=instance, offsets=rewind.target_offsets,
                          marker_batch_ms=marker_ms, actor=actor)


def rewind_claim_for_store(
    *, rewind: RewindRequest, instance: str, actor: Actor,
) -> RewindRequest:
    now = timezone.now()
    with transaction.atomic():
        if not RewindRequest.objects.filter(pk=rewind.pk, status=Status.APPROVED, mode=RewindRequest.Mode.STORE,
                                            expires_at__gt=now).update(status=Status.CLAIMED, claimed_at=now,
                                                                       claimed_by=instance):
            rewind.refresh_from_db()
            raise RewindRefused(f"rewind #{rewind.pk} is {rewind.status}: only an approved, unexpired rewind can be "
                                "written", 409)
        rewind.refresh_from_db()
        _audit(rewind, "rewind.claimed", actor=actor, details={"instance": instance})
    return rewind
