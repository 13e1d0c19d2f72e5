"""Every pipeline status rule, one small function each, numbered as the pages, docs and tests say.

    rule 1 out_of_range          ERR      a partition is out of range (low: data lost; high: no such position)
    rule 2 went_backwards        REWOUND  a committed offset went back between two samples of the window
    rule 3 stopped               STOPPED  no batch for the stop threshold (thresholds.stop_threshold_s);
                                 ERR      ... while messages wait
    rule 4 stalled               STALLED  batches keep coming, no offset moved for 2 intervals while messages wait
    rule 5 lag_growing           WARN     lag grew at every sample of a window of at least 3
    rule 6 normal                OK       none of the above: "consuming normally" or "caught up"
    rule 7 retention_deadline    WARN     at this rate retention deletes unread data within the warning time
    rule 8 drift_between_stores  WARN     one job's offsets differ between two of its stores

A rule returns the (status, reason) it raises, or None. `evaluate_plain` applies them in order
and says which fired. The collectors do not call it: they run the tuned hot path
(`evaluation.evaluate_status`, rules 1-6 in one pass at C speed over every partition of every
pipeline each cycle) and then rules 7 and 8 through `apply_retention_deadline` and
`apply_drift`, where the data for them is at hand. tests/unit/test_rules_property.py proves
the hot path equal to these functions on random windows; tests/unit/test_rules_table.py has
one row per case, naming the rules that fire.

A partition stuck while the others of its pipeline move has its own numbered rules in
streamoffsets.partition_rules (they compare partitions with each other, not samples in time).
Pure functions over plain values (no I/O).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from streamoffsets import thresholds
from streamoffsets.evaluation import (
    PartitionEvaluation,
    PartitionState,
    RetentionRisk,
    Sample,
    Status,
    StatusResult,
    describe_drift,
    drift,
    human_duration,
    sample_lag,
)

Fired = tuple[Status, str]  # what a rule raises: the status and its reason
OK_REASONS = ("consuming normally", "caught up")


def rule_1_out_of_range(partitions: Sequence[PartitionEvaluation]) -> list[Fired]:
    """ERR for every partition out of range, one reason each (its own words say which range)."""
    return [(Status.ERR, e.describe()) for e in partitions
            if e.state in (PartitionState.LOW_OUT_OF_RANGE, PartitionState.HIGH_OUT_OF_RANGE)]


def rule_2_went_backwards(window: Sequence[Sample]) -> list[Fired]:
    """REWOUND for every pair of consecutive samples (by time) where a committed offset went back
    (a rewind, or a reset): each names the partitions and both offsets."""
    ordered = sorted(window, key=lambda s: s.at_s)
    fired = []
    for earlier, later in zip(ordered, ordered[1:]):
        back = sorted((p, earlier.committed[p], c) for p, c in later.committed.items()
                      if p in earlier.committed and c < earlier.committed[p])
        if back:
            where = ", ".join(f"partition {p} {a:,} -> {b:,}" for p, a, b in back)
            fired.append((Status.REWOUND, f"offsets went backwards: {where}"))
    return fired


def rule_3_stopped(last_batch_s: float | None, interval_s: float | None, now_s: float, lag_now: int,
                   stop_after_intervals: float = thresholds.STOP_AFTER_INTERVALS,
                   min_stale_s: float = thresholds.MIN_STALE_S) -> Fired | None:
    """STOPPED when no batch came for the stop threshold; ERR when messages wait meanwhile (work
    piles up and nothing runs). The cadence is named only when known (one batch has none)."""
    if last_batch_s is None:
        return None
    silence = thresholds.batch_silence(last_batch_s, now_s, interval_s, stop_after_intervals, min_stale_s)
    if not silence.stopped:
        return None
    expected = f" (expected one every {human_duration(interval_s)})" if interval_s else ""
    if lag_now > 0:
        return Status.ERR, f"stopped with {lag_now:,} messages waiting: no batch for {human_duration(silence.silent_s)}{expected}"
    return Status.STOPPED, f"no batch for {human_duration(silence.silent_s)}{expected}; nothing is waiting"


def rule_4_stalled(window: Sequence[Sample], interval_s: float | None, lag_now: int,
                   stall_after_intervals: float = thresholds.STALL_AFTER_INTERVALS) -> Fired | None:
    """STALLED when, at the end of the window, no committed offset moved for `stall_after_intervals`
    batch intervals (with no cadence known: for at least two samples) while messages waited,
    batches kept coming during that stretch, and messages wait. The stretch counts only samples
    with messages waiting: an idle, caught-up job re-writing its offsets is not stalled the
    moment records arrive, before its next batch could read them. Not applied to a stopped job
    (rule 3 says more)."""
    ordered = sorted(window, key=lambda s: s.at_s)
    if len(ordered) < 2 or lag_now <= 0:
        return None
    latest = ordered[-1]
    start = len(ordered) - 1
    while start > 0 and ordered[start - 1].committed == latest.committed and total_lag_of(ordered[start - 1]) > 0:
        start -= 1
    if start == len(ordered) - 1:
        return None  # the newest sample moved
    frozen = ordered[start]
    span = latest.at_s - frozen.at_s
    if interval_s and span < stall_after_intervals * interval_s:
        return None  # a slow batch, not a stall yet
    if frozen.last_batch_s is None or latest.last_batch_s is None or latest.last_batch_s <= frozen.last_batch_s:
        return None  # no batch came: that is rule 3's silence, not a stall
    return Status.STALLED, f"batches keep coming but no offset moved in {span:,.0f} s while {lag_now:,} messages wait"


def rule_5_lag_growing(window: Sequence[Sample]) -> Fired | None:
    """WARN when the total lag grew at every sample of a window of at least 3 samples."""
    ordered = sorted(window, key=lambda s: s.at_s)
    if len(ordered) < thresholds.LAG_GROWING_MIN_SAMPLES:
        return None
    lags = [total_lag_of(s) for s in ordered]
    if not all(a < b for a, b in zip(lags, lags[1:])):
        return None
    return Status.WARN, (f"lag grew at every sample of the last {ordered[-1].at_s - ordered[0].at_s:,.0f} s: "
                         f"{lags[0]:,} -> {lags[-1]:,}")


def rule_6_normal(lag_now: int) -> Fired:
    """OK, said as "consuming normally" while messages wait and "caught up" when none do."""
    return Status.OK, OK_REASONS[0] if lag_now else OK_REASONS[1]


def rule_7_retention_deadline(partition: int, risk: RetentionRisk, warn_s: float) -> Fired | None:
    """WARN when retention will delete this partition's unread messages within `warn_s` at the
    current rates (evaluation.retention_risk computes the deadline)."""
    if risk.seconds_left is None or risk.seconds_left >= warn_s:
        return None
    return Status.WARN, risk.describe(partition)


def rule_8_drift_between_stores(a_name: str, a: dict[int, int], b_name: str, b: dict[int, int]) -> Fired | None:
    """WARN when one job's offsets, kept in two stores (same topic and group), differ. A store
    with no offsets yet is not drift (it has not been written)."""
    if not a or not b or not drift(a, b):
        return None
    return Status.WARN, describe_drift(a_name, a, b_name, b)


def total_lag_of(sample: Sample) -> int:
    """A sample's total lag: the one the collectors stored with it, else computed from it."""
    return sample.lag if sample.lag is not None else sample_lag(sample.committed, sample.high)


# --- all rules, in order ----------------------------------------------------------------------


class PlainResult(NamedTuple):
    status: Status
    reasons: list[str]
    fired: list[int]  # the numbers of the rules that fired, in order (a rule firing twice is listed twice)


def evaluate_plain(
    window: Sequence[Sample],
    partitions: Sequence[PartitionEvaluation],
    interval_s: float | None,
    now_s: float,
    stop_after_intervals: float = thresholds.STOP_AFTER_INTERVALS,
    min_stale_s: float = thresholds.MIN_STALE_S,
    stall_after_intervals: float = thresholds.STALL_AFTER_INTERVALS,
    retention: Sequence[tuple[int, RetentionRisk]] = (),
    retention_warn_s: float = 6 * 3600.0,
    twins: Sequence[tuple[str, dict[int, int], str, dict[int, int]]] = (),
) -> PlainResult:
    """Rules 1-8 in order: the status is the worst that fired, the reasons are every fired rule's
    in order. Rule 4 is not looked at when rule 3 fired; rule 6 only when rules 1-5 did not.
    Rules 7 and 8 come last, as the collectors apply them (after rules 1-6), and rule 6's
    reason goes when rule 8 fires but stays beside rule 7's (apply_drift, apply_retention_deadline)."""
    fired: list[tuple[int, Fired]] = [(1, f) for f in rule_1_out_of_range(partitions)]
    fired += [(2, f) for f in rule_2_went_backwards(window)]
    ordered = sorted(window, key=lambda s: s.at_s)
    lag_now = total_lag_of(ordered[-1]) if ordered else 0
    stopped = rule_3_stopped(ordered[-1].last_batch_s if ordered else None, interval_s, now_s, lag_now,
                             stop_after_intervals, min_stale_s)
    if stopped:
        fired.append((3, stopped))
    else:
        stalled = rule_4_stalled(ordered, interval_s, lag_now, stall_after_intervals)
        if stalled:
            fired.append((4, stalled))
    growing = rule_5_lag_growing(ordered)
    if growing:
        fired.append((5, growing))
    if not fired:
        fired.append((6, rule_6_normal(lag_now)))
    result = StatusResult(max(status for _, (status, _) in fired), [reason for _, (_, reason) in fired])
    numbers = [n for n, _ in fired]
    for partition, risk in retention:
        if apply_retention_deadline(result, partition, risk, retention_warn_s):
            numbers.append(7)
    for a_name, a, b_name, b in twins:
        if apply_drift(result, a_name, a, b_name, b):
            numbers.append(8)
    if 6 in numbers and not any(r in OK_REASONS for r in result.reasons):
        numbers.remove(6)  # rule 8 raised the status and took rule 6's reason away
    return PlainResult(Status(result.status), result.reasons, numbers)


def apply_retention_deadline(result: StatusResult, partition: int, risk: RetentionRisk, warn_s: float) -> bool:
    """Rule 7 on a result of rules 1-6, as the collectors apply it for each partition: raised to
    WARN with the deadline's reason, only while nothing worse (or another WARN) is there. Returns
    whether it fired. Rule 6's reason stays: the job consumes normally, retention outruns it."""
    fired = rule_7_retention_deadline(partition, risk, warn_s)
    if fired is None or result.status >= Status.WARN:
        return False
    result.status, _ = fired
    result.reasons.append(fired[1])
    return True


def apply_drift(result: StatusResult, a_name: str, a: dict[int, int], b_name: str, b: dict[int, int]) -> bool:
    """Rule 8 on a result of rules 1-7, as the collectors apply it for each other store of the
    job: the reason always added, the status raised to WARN if lower (and rule 6's "all is well"
    reason then removed). Returns whether it fired."""
    fired = rule_8_drift_between_stores(a_name, a, b_name, b)
    if fired is None:
        return False
    result.reasons.append(fired[1])
    if result.status < Status.WARN:
        result.status = Status.WARN
        result.reasons[:] = [r for r in result.reasons if r not in OK_REASONS]
    return True
