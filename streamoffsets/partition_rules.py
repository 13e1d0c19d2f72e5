"""Partition-level status rules: one partition stuck while the others of its pipeline move.

The pipeline rules (evaluation.evaluate_status) look at the pipeline as a whole: batches keep
coming and some offset moves, so it is "consuming normally". That is right for a Spark batch,
which covers every partition, but a Kafka consumer group, ZooKeeper or file store is written by
consumers whose partitions live and die separately: one consumer thread stuck on a poison
message re-writes the same offset (stalled) or stops committing its partitions (stopped) while
the other threads keep the pipeline's batches coming. These rules find such a partition by
comparing it with the others of its pipeline, over the same window of samples, and name it.

Pure functions over plain values (no I/O). Every rule is numbered in partition_status's
docstring; tests/unit/test_partition_rules.py proves each with numbered cases.
"""
from __future__ import annotations

from itertools import compress
from operator import attrgetter, eq
from typing import Callable, Mapping, NamedTuple, Sequence

from streamoffsets.evaluation import Sample, Status, StatusResult, human_duration

_at_of = attrgetter("at_s")


class PartitionStatus(NamedTuple):
    partition: int
    status: Status  # OK, STALLED or STOPPED
    reason: str  # "" when OK


NAMED_AT_MOST = 10  # partitions named in one reason, and flagged partitions listed per pipeline


def _names(partitions: Sequence[int]) -> str:
    ps = sorted(partitions)
    more = f" and {len(ps) - NAMED_AT_MOST:,} more" if len(ps) > NAMED_AT_MOST else ""
    return ("partition " if len(ps) == 1 else "partitions ") + ", ".join(map(str, ps[:NAMED_AT_MOST])) + more


def _intervals(seconds: float, interval_s: float) -> str:
    n = seconds / interval_s
    return f"{n:.0f} commit interval{'' if round(n) == 1 else 's'}"


def partition_status(
    window: Sequence[Sample],
    lags: Mapping[int, int | None] | Callable[[], Mapping[int, int | None]],
    interval_s: float | None,
    written_ms: Mapping[int, int] | None = None,
    stall_after_intervals: float = 2.0,
    stop_after_intervals: float = 3.0,
) -> list[PartitionStatus]:
    """The partitions that are STALLED or STOPPED against the other partitions of their pipeline
    (every partition not listed is OK). Rules, per partition, the first that fires wins (a
    partition is never both):
    1. STOPPED: the store tells when each partition was last written (`written_ms`: ZooKeeper
       znode mtimes, a Kafka group commit's batch-time metadata), the partition has lag > 0,
       and the other partitions' newest write is at least `stop_after_intervals` commit
       intervals after this partition's last write: its consumer stopped committing while
       the others commit. Both times come from the store's clock (no skew with ours).
    2. STALLED: the partition has lag > 0 and its committed offset has not changed for at least
       `stall_after_intervals` commit intervals at the end of the window, while at least one
       other partition's offset advanced over that same stretch. Where the store cannot tell
       per-partition write times (`written_ms` None: file store, a Kafka group without our
       metadata, Spark checkpoints, HBase) this is the only rule, and the reason says that a
       stopped partition reads as stalled there.
    3. Not flagged (OK): nothing waits (lag 0 or unknown); the cadence is unknown (fewer than
       two batches); fewer than two samples; the offset moved within the stretch; or no other
       partition advanced (then the whole pipeline is stalled or stopped and the pipeline
       rules say so, once, rather than once per partition).
    `lags`: each partition's lag now (None when unknown), or a function giving them, called only
    when some partition is a candidate (a healthy pipeline never needs them). `interval_s`: the pipeline's commit
    interval (evaluation.batch_interval_s).
    """
    ordered = sorted(window, key=_at_of)
    if not interval_s or interval_s <= 0 or len(ordered) < 2:
        return []
    latest = ordered[-1]
    now_committed = latest.committed
    stall_s = stall_after_intervals * interval_s
    threshold_ms = stop_after_intervals * interval_s * 1000
    # This runs for every pipeline at every cycle, thousands of partitions each: first the
    # candidates, at C speed where it can, then the rules for them alone. A partition can be
    # STALLED only if its offset is the same in the newest sample at least stall_s old (ref);
    # STOPPED only if it was written threshold before the newest write.
    ref = None
    ref_at_s = latest.at_s - stall_s
    for sample in reversed(ordered):
        if sample.at_s <= ref_at_s:
            ref = sample
            break
    candidates: set[int] = set()
    if ref is not None:
        before = ref.committed
        # Same partitions in the same order (the usual case): the offsets are paired at C speed.
        if len(before) == len(now_committed) and list(before) == list(now_committed):
            candidates.update(compress(now_committed, map(eq, now_committed.values(), before.values())))
        else:
            candidates.update(p for p, c in now_committed.items() if before.get(p) == c)
    by_time = sorted(((t, q) for q, t in written_ms.items()), reverse=True) if written_ms else []
    if len(by_time) > 1:
        cutoff = by_time[0][0] - threshold_ms
        for t, q in reversed(by_time):  # oldest first: stops at the first written too recently
            if t > cutoff:
                break
            candidates.add(q)
    if not candidates:
        return []  # no partition can be stuck (the usual case)
    # The partitions that advanced since each sample, by the sample's index (a frozen stretch
    # starts at one of them): computed once per pipeline, not per partition.
    advanced_since: dict[int, list[int]] = {}
    out: list[PartitionStatus] = []
    if callable(lags):
        lags = lags()
    for p in sorted(candidates):
        lag = lags.get(p)
        c = now_committed.get(p)
        if not lag or lag <= 0 or c is None:
            continue
        # Rule 1: no write of this partition while the others kept writing.
        if written_ms and p in written_ms and len(by_time) > 1:
            mine = written_ms[p]
            newest = by_time[0][0] if by_time[0][1] != p else by_time[1][0]
            silent_s = (newest - mine) / 1000
            if newest - mine >= threshold_ms:
                writing = []
                for t, q in by_time:  # newest first: stops at the first written too recently to count
                    if t - mine < threshold_ms:
                        break
                    writing.append(q)
                out.append(PartitionStatus(p, Status.STOPPED, (
                    f"partition {p} stopped at offset {c:,}: not committed for {human_duration(silent_s)} "
                    f"({_intervals(silent_s, interval_s)}) while {_names(writing)} kept committing; "
                    f"{lag:,} messages waiting")))
                continue
        # Rule 2: the offset frozen over a stretch in which another partition advanced.
        start = len(ordered) - 1
        while start > 0 and ordered[start - 1].committed.get(p) == c:
            start -= 1
        frozen = ordered[start]
        span = latest.at_s - frozen.at_s
        if span < stall_s:
            continue
        advanced = advanced_since.get(start)
        if advanced is None:  # p is not among them: its offset is the same in both samples
            before = frozen.committed
            advanced = advanced_since[start] = [q for q, v in now_committed.items() if q in before and v > before[q]]
        if advanced:
            blind = "" if written_ms else (
                " (this store does not record when each partition was written: a stopped partition reads as stalled)")
            out.append(PartitionStatus(p, Status.STALLED, (
                f"partition {p} stalled at offset {c:,} for {human_duration(span)} "
                f"({_intervals(span, interval_s)}) with {lag:,} messages waiting while {_names(advanced)} "
                f"advanced{blind}")))
    return out


def merge_into(result: StatusResult, partitions: Sequence[PartitionStatus]) -> StatusResult:
    """Rule 4: the pipeline's status is the worst of its own and its partitions'; the flagged
    partitions' reasons are listed after the pipeline's own (the first NAMED_AT_MOST, then a
    count of the rest), and "consuming normally" / "caught up" no longer stand beside them."""
    if not partitions:
        return result  # nothing flagged (the usual case)
    flagged = [ps for ps in partitions if ps.status > Status.OK]
    if not flagged:
        return result
    reasons = [r for r in result.reasons if r not in ("consuming normally", "caught up")]
    reasons.extend(ps.reason for ps in flagged[:NAMED_AT_MOST])
    if len(flagged) > NAMED_AT_MOST:  # every one is on its partition's row; the list stays readable
        rest = flagged[NAMED_AT_MOST:]
        counts = ", ".join(f"{sum(ps.status is st for ps in rest):,} {st.name}" for st in (Status.STOPPED, Status.STALLED)
                           if any(ps.status is st for ps in rest))
        reasons.append(f"and {len(rest):,} more partitions ({counts}): see the partitions table")
    return StatusResult(max(result.status, *(ps.status for ps in flagged)), reasons)
