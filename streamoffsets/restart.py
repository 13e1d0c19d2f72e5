"""Where a job starts: stored offsets reconciled with the topic's partitions and watermarks.
Over 400 lines because the decision, the plan it yields and the rewind it may apply are read
together: each step names the one before (the job library's only restart logic).

The decision (BACKGROUND.md, the HBase pattern generalised to every store):
- no stored offsets: start from earliest, latest, or refuse (policy `on_missing`);
- partitions the store lacks (the topic grew): keep the stored ones, new ones from earliest;
- stored partitions that no longer exist: reported, ignored;
- a stored offset below the low watermark (data already deleted: low out-of-range) or above the
  high watermark (the position does not exist: high out-of-range): `clamp` to the watermark, as
  the paper's scheme does, or `fail`, naming each partition, its offset and the watermarks.
A clamp is never silent: it is in the plan's `clamps` (with the messages lost), its
`decisions` in words, and logged. The offsets are also valid `startingOffsets` JSON for
Spark's official Kafka source.

Rewinds (approved in the dashboard, applied by the job when it starts; `restart(dashboard=...)`):
after loading the stored offsets the job asks the dashboard for an approved rewind; if there is
one it claims it (exactly one instance wins; a loser starts from the stored offsets and says
so, or with policy "wait" refuses to start), checks the target against the watermarks fetched after the claim (a target out of range
now is reported `failed` and the job refuses to start), saves the target into the store as a
batch dated now (the *marker*: the collectors verify the rewind from it, and a crash right after
it restarts from the target), reports `applied`, and starts from the target. A dashboard that
cannot be asked: `rewind_policy` "proceed" (start from the stored offsets, WARNING) or "wait"
(refuse to start). The same policy decides when the rewind is claimed by another instance whose
claim's lease still runs (`held_elsewhere`), and when the claim's own answer is lost
(`claim_unconfirmed`: it may have been recorded; the claim is asked again once, which the
dashboard answers for the instance holding it; a later start takes it over after the lease).
The decisions are pure functions (`parse_rewind`, `dashboard_trouble`, `held_elsewhere`,
`lost_claim`, `claim_refused`, `claim_unconfirmed`, `rewind_start_plan`); `restart` does the I/O around them.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Callable, Literal

from streamoffsets.dashboard_client import DashboardClient, DashboardError, instance_id
from streamoffsets.rewind import check_target
from streamoffsets.types import BatchOffsets, Offsets, Watermarks

log = logging.getLogger("offsetwatch.restart")

OnMissing = Literal["earliest", "latest", "fail"]
OutOfRange = Literal["clamp", "fail"]
RewindPolicy = Literal["proceed", "wait"]
REWIND_POLICIES: tuple[RewindPolicy, ...] = ("proceed", "wait")


class StartRefused(Exception):
    """The policy says the job must not start; the message names every offending partition."""

    def __init__(self, topic: str, group: str, reasons: list[str]):
        self.topic, self.group, self.reasons = topic, group, reasons
        super().__init__(f"{topic}/{group}: refusing to start: " + "; ".join(reasons))


@dataclass(frozen=True)
class Clamp:
    partition: int
    stored: int
    low: int
    high: int
    started_at: int
    kind: Literal["low", "high"]
    # Low out-of-range: messages deleted by retention before being processed (= low - stored).
    messages_lost: int


@dataclass(frozen=True)
class PendingRewind:
    """A rewind as the dashboard hands it to the job (`GET /api/v1/rewinds/pending`): approved, or
    claimed by an instance that has not reported `applied` (`claimable`: its lease ran out)."""

    id: int
    topic: str
    group: str
    target: dict[int, int]
    before: dict[int, int]  # the committed offsets the dashboard saw when it was requested
    status: str = "approved"
    claimed_by: str | None = None
    claim_lease_expires_at: str | None = None
    claimable: bool = True


@dataclass(frozen=True)
class AppliedRewind:
    """A rewind this start applied: where the job was (its stored offsets) and where it starts."""

    id: int
    before: dict[int, int] | None
    target: dict[int, int]
    # The batch time of the target saved into the store: the collectors verify the rewind from it.
    marker_batch_ms: int


@dataclass
class StartPlan:
    topic: str
    group: str
    offsets: dict[int, int]
    decisions: list[str] = field(default_factory=list)
    first_start: bool = False
    new_partitions: list[int] = field(default_factory=list)
    vanished_partitions: list[int] = field(default_factory=list)
    clamps: list[Clamp] = field(default_factory=list)
    stored: dict[int, int] | None = None
    rewind: AppliedRewind | None = None

    def spark_starting_offsets(self) -> str:
        return spark_starting_offsets_json(self.topic, self.offsets)

    def report(self) -> dict:
        """The structured report a job logs and sends to the dashboard."""
        data = asdict(self)
        data["offsets"] = Offsets(self.offsets).to_json()
        data["stored"] = None if self.stored is None else _stored_json(self.stored)
        if self.rewind is not None:
            data["rewind"] = {
                "id": self.rewind.id, "marker_batch_ms": self.rewind.marker_batch_ms,
                "before": None if self.rewind.before is None else _stored_json(self.rewind.before),
                "target": Offsets(self.rewind.target).to_json(),
            }
        return data


def _stored_json(stored: dict[int, int]) -> dict[str, int]:
    """What the store held, keyed as JSON: not an Offsets, as it may hold a negative sentinel
    (Spark's -1/-2), reported as read."""
    return {str(p): o for p, o in sorted(stored.items())}


def spark_starting_offsets_json(topic: str, offsets: dict[int, int]) -> str:
    """`{"topic": {"0": 23, ...}}` as Spark's Kafka source expects (partition ids as strings)."""
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(offsets.items())}})


def resolve_start(
    topic: str,
    stored: BatchOffsets | None,
    watermarks: dict[int, Watermarks],
    group: str = "",
    on_missing: OnMissing = "earliest",
    out_of_range: OutOfRange = "clamp",
) -> StartPlan:
    """Pure: decide the starting offsets from what the store holds and the broker's watermarks."""
    group = group or (stored.group if stored else "")
    if stored is None:
        if on_missing == "fail":
            raise StartRefused(topic, group, ["no stored offsets and the policy for a first start is 'fail'"])
        pick = (lambda w: w.low) if on_missing == "earliest" else (lambda w: w.high)
        plan = StartPlan(topic, group, {p: pick(w) for p, w in sorted(watermarks.items())}, first_start=True)
        plan.decisions.append(f"no stored offsets: every partition starts from {on_missing}")
        return plan

    plan = StartPlan(topic, group, {}, stored=dict(stored.offsets))
    refusals: list[str] = []
    for p, w in sorted(watermarks.items()):
        if p not in stored.offsets:
            plan.offsets[p] = w.low
            plan.new_partitions.append(p)
            plan.decisions.append(f"partition {p} is new (not in the store): starts from earliest {w.low}")
            continue
        offset = stored.offsets[p]
        if w.low <= offset <= w.high:
            plan.offsets[p] = offset
            continue
        kind = "low" if offset < w.low else "high"
        target = w.low if kind == "low" else w.high
        lost = w.low - offset if kind == "low" else 0
        if kind == "low":
            why = (f"partition {p}: stored offset {offset} is below the low watermark {w.low} "
                   f"(high {w.high}): {lost} messages were deleted by retention before being processed")
        else:
            why = (f"partition {p}: stored offset {offset} is above the high watermark {w.high} "
                   f"(low {w.low}): that position does not exist")
        if out_of_range == "fail":
            refusals.append(why)
            continue
        plan.offsets[p] = target
        plan.clamps.append(Clamp(p, offset, w.low, w.high, target, kind, lost))
        plan.decisions.append(f"{why}; clamped to {target}")
    if refusals:
        raise StartRefused(topic, group, refusals)
    plan.vanished_partitions = sorted(set(stored.offsets) - set(watermarks))
    for p in plan.vanished_partitions:
        plan.decisions.append(f"partition {p} is stored (offset {stored.offsets[p]}) but no longer exists in the topic: ignored")
    return plan


# --- rewinds: pure decisions ------------------------------------------------------------------------


def parse_rewind(data: dict, topic: str, group: str) -> PendingRewind:
    """The dashboard's rewind JSON -> PendingRewind; ValueError says what is wrong with it. A
    rewind of another pipeline (the job was given another pipeline's token) is refused here: a
    job must never apply someone else's target."""
    try:
        rewind_id = data["id"]
        target = {int(p): o for p, o in data["target_offsets"].items()}
        before = {int(p): o for p, o in (data.get("before_offsets") or {}).items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"the dashboard's rewind is not readable ({type(exc).__name__}: {exc}): {data!r}") from None
    if type(rewind_id) is not int or not target or not all(
            type(o) is int and o >= 0 and p >= 0 for p, o in {**target, **before}.items()):
        raise ValueError(f"the dashboard's rewind has no id or no valid target offsets: {data!r}")
    if (data.get("topic"), data.get("group")) != (topic, group):
        raise ValueError(f"rewind #{rewind_id} is for {data.get('topic')!r}/{data.get('group')!r}, not this job's "
                         f"{topic!r}/{group!r}: is the job using another pipeline's token?")
    status = data.get("status", "approved")  # a dashboard from before leases says nothing more
    if status not in ("approved", "claimed"):
        raise ValueError(f"rewind #{rewind_id} is handed out as {status!r}, neither approved nor claimed: {data!r}")
    return PendingRewind(rewind_id, topic, group, target, before, status, data.get("claimed_by"),
                         data.get("claim_lease_expires_at"), data.get("claimable", True) is not False)


def dashboard_trouble(topic: str, group: str, url: str, error: str, policy: RewindPolicy) -> str:
    """What an unreachable (or unreadable) dashboard means for the start: 'proceed' returns the
    sentence to log and report (the job starts from its stored offsets, a pending rewind is not
    applied this time); 'wait' refuses to start, so no approved rewind can be skipped."""
    if policy == "wait":
        raise StartRefused(topic, group, [(
            f"the dashboard at {url} could not be asked for an approved rewind ({error}) and the rewind "
            "policy is 'wait': not starting, so that an approved rewind is never skipped")])
    if policy != "proceed":
        raise ValueError(f"unknown rewind policy {policy!r} (one of {', '.join(REWIND_POLICIES)})")
    return (f"the dashboard at {url} could not be asked for an approved rewind ({error}); rewind policy "
            "'proceed': starting from the stored offsets, a pending rewind is applied at a later start")


def lost_claim(rewind: PendingRewind, error: str) -> str:
    """Another instance won the claim (or the approval lapsed): this one starts as usual."""
    return (f"rewind #{rewind.id} was not claimed by this instance ({error}): starting from the stored "
            "offsets; the instance that claimed it applies it")


def claim_refused(topic: str, group: str, rewind: PendingRewind, error: str, policy: RewindPolicy) -> str:
    """The dashboard refused the claim (409: another instance holds it, or the approval lapsed):
    'proceed' starts as usual (`lost_claim`); 'wait' refuses to start, since the instance holding
    the claim may not apply it."""
    if policy == "wait":
        raise StartRefused(topic, group, [(
            f"rewind #{rewind.id} was not claimed by this instance ({error}) and the rewind policy is 'wait': "
            "not starting past it; start again once it is applied, or after its claim's lease to take it over")])
    return lost_claim(rewind, error)


def held_elsewhere(topic: str, group: str, rewind: PendingRewind, policy: RewindPolicy) -> str:
    """The dashboard says another instance claimed the rewind and its lease still runs (it may be
    applying it right now, or its claim's answer was lost): 'wait' refuses to start; 'proceed'
    starts from the stored offsets and says so."""
    held = (f"rewind #{rewind.id} is claimed by {rewind.claimed_by or 'another instance'} and not reported applied; "
            f"its claim's lease runs until {rewind.claim_lease_expires_at or '(not said)'}")
    if policy == "wait":
        raise StartRefused(topic, group, [
            f"{held}; the rewind policy is 'wait': not starting past it. Start again after the lease (this start then "
            "takes the claim over) or once it is applied; an approver can cancel a stuck claim"])
    return (f"{held}; rewind policy 'proceed': starting from the stored offsets, the rewind is applied by the "
            "instance holding the claim or by a start after its lease")


def claim_unconfirmed(topic: str, group: str, url: str, rewind: PendingRewind, error: str,
                      policy: RewindPolicy) -> str:
    """The claim got no answer (timeout, connection lost, a server error): the dashboard may have
    recorded it. 'wait' refuses to start, naming the rewind; 'proceed' starts from the stored
    offsets. Either way the claim, if recorded, is taken over by a start after its lease."""
    lost = (f"the claim of rewind #{rewind.id} at {url} got no answer ({error}): it may have been recorded for this "
            "instance, which will not apply it")
    if policy == "wait":
        raise StartRefused(topic, group, [
            f"{lost}; the rewind policy is 'wait': not starting past it. A start after the claim's lease takes it "
            "over and applies it"])
    if policy != "proceed":
        raise ValueError(f"unknown rewind policy {policy!r} (one of {', '.join(REWIND_POLICIES)})")
    return (f"{lost}; rewind policy 'proceed': starting from the stored offsets, a start after the claim's lease "
            "applies it")


def rewind_start_plan(
    topic: str, group: str, rewind: PendingRewind, stored: BatchOffsets | None,
    watermarks: dict[int, Watermarks], marker_batch_ms: int,
) -> StartPlan:
    """Pure: the start of a job that claimed `rewind`. The target is never clamped: a partition
    out of [low, high] now, or one the topic no longer has, refuses the start (StartRefused
    naming each). A partition added to the topic since the approval starts from earliest, as
    after any restart. Decisions say in words what moved: before -> after per partition."""
    marks = {p: (w.low, w.high) for p, w in watermarks.items()}
    problems = [f"partition {p}: target {o:,} but the topic has no such partition now"
                for p, o in sorted(rewind.target.items()) if p not in marks]
    problems += check_target({p: o for p, o in rewind.target.items() if p in marks}, marks)
    if problems:
        raise StartRefused(topic, group, [f"rewind #{rewind.id} cannot be applied: " + "; ".join(problems)])
    before = dict(stored.offsets) if stored is not None else None
    plan = StartPlan(topic, group, dict(rewind.target), stored=before,
                     rewind=AppliedRewind(rewind.id, before, dict(rewind.target), marker_batch_ms))
    moves = []
    for p, target in sorted(rewind.target.items()):
        was = before.get(p) if before is not None else None
        if was is None:
            moves.append(f"partition {p}: (none) → {target:,}")
        elif was > target:
            moves.append(f"partition {p}: {was:,} → {target:,} ({was - target:,} messages read again)")
        elif was < target:
            moves.append(f"partition {p}: {was:,} → {target:,} ({target - was:,} messages skipped)")
        else:
            moves.append(f"partition {p}: {was:,} → {target:,} (unchanged)")
    plan.decisions.append(f"rewind #{rewind.id} applied (approved in the dashboard): " + "; ".join(moves)
                          + f"; the target was saved to the store as the batch at {_iso(marker_batch_ms)}")
    for p, w in sorted(watermarks.items()):
        if p not in rewind.target:
            plan.offsets[p] = w.low
            plan.new_partitions.append(p)
            plan.decisions.append(f"partition {p} is new (not in the rewind's target): starts from earliest {w.low}")
    return plan


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def now_ms() -> int:
    return int(time.time() * 1000)


# --- the one call a job makes -----------------------------------------------------------------------


def restart(
    store,
    topic: str,
    group: str,
    watermarks: Callable[[str], dict[int, Watermarks]],
    on_missing: OnMissing = "earliest",
    out_of_range: OutOfRange = "clamp",
    *,
    dashboard: DashboardClient | None = None,
    instance: str | None = None,
    rewind_policy: RewindPolicy = "proceed",
    save_target: Callable[[BatchOffsets, int], None] | None = None,
    clock_ms: Callable[[], int] = now_ms,
) -> StartPlan:
    """One call for a job: load its newest stored offsets, apply an approved rewind if the
    dashboard has one for it, fetch the watermarks, decide, log.

    `watermarks` is the seam to the broker (e.g. `KafkaWatermarkReader(...).topic_watermarks`).
    Without `dashboard` no rewind is looked up. `save_target(batch, rewind_id)` writes a
    rewind's target where the next start reads it (default: `store.save_batch(batch)`; a
    checkpoint job starts a fresh checkpoint instead, see reference_job/job.py).
    """
    if rewind_policy not in REWIND_POLICIES:
        raise ValueError(f"unknown rewind policy {rewind_policy!r} (one of {', '.join(REWIND_POLICIES)})")
    stored = store.load_latest(topic, group)
    notes: list[str] = []
    claimed: PendingRewind | None = None
    if dashboard is not None:
        instance = instance or instance_id()
        claimed, note = _claim_pending(dashboard, topic, group, instance, rewind_policy)
        if note:
            notes.append(note)
    if claimed is None:
        plan = resolve_start(topic, stored, watermarks(topic), group, on_missing, out_of_range)
        plan.decisions[:0] = notes
    else:
        plan = _apply_rewind(dashboard, claimed, instance, store, stored, topic, group, watermarks,
                             save_target, clock_ms)
        plan.decisions[:0] = notes
    for decision in plan.decisions:
        level = logging.WARNING if plan.clamps or plan.vanished_partitions or decision in notes else logging.INFO
        log.log(level, "%s/%s start: %s", topic, group, decision)
    log.info("%s/%s starts from %s (report: %s)", topic, group, plan.spark_starting_offsets(), json.dumps(plan.report()))
    return plan


def _claim_pending(
    dashboard: DashboardClient, topic: str, group: str, instance: str, policy: RewindPolicy,
) -> tuple[PendingRewind | None, str | None]:
    """Ask for a pending rewind and claim it: (the rewind this instance won, or None; a note for
    the start's decisions). With policy 'wait', StartRefused whenever the job would otherwise
    start past an approved or claimed rewind: the dashboard cannot be asked, another instance
    holds the claim, or the claim's answer was lost."""
    try:
        data = dashboard.pending_rewind()
        if data is None:
            return None, None
        pending = parse_rewind(data, topic, group)
    except (DashboardError, ValueError) as exc:
        return None, dashboard_trouble(topic, group, dashboard.base_url, str(exc), policy)
    if pending.status == "claimed" and not pending.claimable and pending.claimed_by != instance:
        return None, held_elsewhere(topic, group, pending, policy)
    try:
        claim = _claim(dashboard, pending.id, instance)
    except DashboardError as exc:
        if exc.status == 409:
            return None, claim_refused(topic, group, pending, str(exc), policy)
        if exc.status is None or exc.status >= 500:
            # No answer: the claim may or may not have been recorded; the policy decides.
            return None, claim_unconfirmed(topic, group, dashboard.base_url, pending, str(exc), policy)
        return None, dashboard_trouble(topic, group, dashboard.base_url, str(exc), policy)
    log.info("%s/%s: claimed rewind #%s as %s (%s)", topic, group, pending.id, instance, claim.get("status"))
    if pending.status == "claimed" and pending.claimed_by != instance:
        return pending, (f"rewind #{pending.id}: took over the claim of {pending.claimed_by}, whose lease ran out "
                         "with no `applied` report")
    return pending, None


def _claim(dashboard: DashboardClient, rewind_id: int, instance: str) -> dict:
    """Claim; when the answer is lost, ask once more: the dashboard answers a repeated claim by the
    instance holding it with the rewind, so a claim recorded the first time is not lost."""
    try:
        return dashboard.claim_rewind(rewind_id, instance)
    except DashboardError as exc:
        if exc.status is not None and exc.status < 500:
            raise
        log.warning("rewind #%s: the claim got no answer (%s); asking again", rewind_id, exc)
    return dashboard.claim_rewind(rewind_id, instance)


def _apply_rewind(
    dashboard: DashboardClient, rewind: PendingRewind, instance: str, store, stored: BatchOffsets | None,
    topic: str, group: str, watermarks: Callable[[str], dict[int, Watermarks]],
    save_target: Callable[[BatchOffsets, int], None] | None, clock_ms: Callable[[], int],
) -> StartPlan:
    """This instance holds the claim: check, save the marker, report. Whatever stops it from
    applying the rewind is reported `failed` (so nobody waits for it) before the start is refused."""
    marker_ms = clock_ms()
    try:
        # Fetched after the claim: the target must be in range now, not when it was approved.
        plan = rewind_start_plan(topic, group, rewind, stored, watermarks(topic), marker_ms)
    except StartRefused as refused:
        _report_failed(dashboard, rewind, instance, "; ".join(refused.reasons))
        raise
    except Exception as exc:  # the broker could not be asked
        _report_failed(dashboard, rewind, instance, f"the watermarks could not be read: {exc}")
        raise
    marker = BatchOffsets(topic, group, marker_ms, dict(rewind.target))
    try:
        # Saved before the job reads anything: a crash from here on restarts from the target.
        if save_target is not None:
            save_target(marker, rewind.id)
        else:
            store.save_batch(marker)
    except Exception as exc:
        reason = f"saving the target of rewind #{rewind.id} into {getattr(store, 'name', 'the store')} failed: {exc}"
        _report_failed(dashboard, rewind, instance, reason)
        raise StartRefused(topic, group, [reason]) from exc
    try:
        dashboard.rewind_applied(rewind.id, instance, rewind.target, marker_ms)
    except DashboardError as exc:
        # The target is in the store already: starting elsewhere would not undo that. The
        # dashboard recognises the marker batch (exactly the target, after the claim) when the
        # collectors read it, and verifies the rewind from it.
        note = (f"the dashboard was not told that rewind #{rewind.id} was applied ({exc}); it shows it claimed until "
                "the collectors read the marker batch, then verifies it from that")
        log.error("%s/%s: %s", topic, group, note)
        plan.decisions.append(note)
    return plan


def _report_failed(dashboard: DashboardClient, rewind: PendingRewind, instance: str, error: str) -> None:
    log.error("rewind #%s not applied: %s", rewind.id, error)
    try:
        dashboard.rewind_failed(rewind.id, instance, error)
    except DashboardError as exc:
        log.error("rewind #%s: the failure could not be reported to the dashboard: %s", rewind.id, exc)
