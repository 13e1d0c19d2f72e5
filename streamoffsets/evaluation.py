"""Judgements an on-call engineer needs, as pure functions over plain offsets (no I/O).

Per partition: a state (ok, lagging, low/high out-of-range, missing in store, unknown
partition, stale). Per pipeline: a status over a sliding window of samples, in the spirit of
Burrow's rules but tuned to micro-batch cadence, each with the reasons behind it. Lag in
seconds by interpolation in a per-partition table of (time, high watermark) samples. Retention
risk: how long until retention deletes data the job has not read yet.

This module is over 400 lines: partition states, the tuned status pass, lag in seconds and
retention risk share its types and are read together. The status rules themselves, one small
function each (drift and the retention deadline included), are in streamoffsets.rules; the
thresholds they share in streamoffsets.thresholds. Every rule here is numbered in its
docstring; tests/unit/test_evaluation.py and tests/unit/test_rules_table.py prove each with
tables of numbered cases.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter, lt, sub
from typing import NamedTuple, Sequence

from streamoffsets import thresholds


class PartitionState(str, enum.Enum):
    OK = "ok"
    LAGGING = "lagging"
    LOW_OUT_OF_RANGE = "low out-of-range"
    HIGH_OUT_OF_RANGE = "high out-of-range"
    MISSING_IN_STORE = "missing in store"
    UNKNOWN_PARTITION = "unknown partition"


class Status(enum.IntEnum):
    """Ordered by severity: the overview sorts worst first."""

    OK = 0
    WARN = 1
    STALLED = 2
    STOPPED = 3
    REWOUND = 4
    ERR = 5


class PartitionEvaluation(NamedTuple):
    # A tuple, not a dataclass: one is built for every partition of every pipeline at every
    # cycle, and the hot path builds them with tuple.__new__ at C speed (_new below).
    partition: int
    committed: int | None
    low: int | None
    high: int | None
    lag: int | None
    state: PartitionState
    # Low out-of-range: messages deleted by retention before being processed.
    messages_lost: int = 0

    def describe(self) -> str:
        p = self.partition
        if self.state is PartitionState.LOW_OUT_OF_RANGE:
            return (f"partition {p}: {self.messages_lost:,} messages were deleted by retention before being "
                    f"processed (committed {self.committed:,} < low watermark {self.low:,})")
        if self.state is PartitionState.HIGH_OUT_OF_RANGE:
            return (f"partition {p}: committed offset {self.committed:,} is beyond the high watermark "
                    f"{self.high:,}: the position does not exist (topic re-created or wrong cluster?)")
        if self.state is PartitionState.MISSING_IN_STORE:
            return f"partition {p}: the topic has it, the store has no offset for it"
        if self.state is PartitionState.UNKNOWN_PARTITION:
            return f"partition {p}: stored (offset {self.committed:,}) but not in the topic"
        if self.state is PartitionState.LAGGING:
            return f"partition {p}: {self.lag:,} messages behind"
        return f"partition {p}: caught up"

    @property
    def lag_absent(self) -> str | None:
        """Why the partition has no lag number (None when it has one). An out-of-range
        position does not exist: it is neither behind nor caught up, so no number derived from
        it (lag, lag in seconds, retention margin) is shown, only this."""
        if self.state is PartitionState.HIGH_OUT_OF_RANGE:
            return f"out of range: committed {self.committed} above the high watermark {self.high}"
        if self.state is PartitionState.LOW_OUT_OF_RANGE:
            return (f"out of range: committed {self.committed} below the low watermark {self.low} "
                    f"({self.messages_lost} messages deleted before being read)")
        if self.state is PartitionState.MISSING_IN_STORE:
            return "no stored offset for this partition"
        if self.state is PartitionState.UNKNOWN_PARTITION:
            return "the topic has no such partition"
        return None


_MISSING, _UNKNOWN, _LOW, _HIGH = (PartitionState.MISSING_IN_STORE, PartitionState.UNKNOWN_PARTITION,
                                   PartitionState.LOW_OUT_OF_RANGE, PartitionState.HIGH_OUT_OF_RANGE)
_LAGGING, _OK = PartitionState.LAGGING, PartitionState.OK
_new = tuple.__new__
_OUT_OF_RANGE = frozenset((_LOW, _HIGH))
_state_of = itemgetter(5)  # PartitionEvaluation.state


def evaluate_partition(partition: int, committed: int | None, low: int | None, high: int | None) -> PartitionEvaluation:
    """Rules:
    1. no stored offset for a partition of the topic -> missing in store (lag unknown);
    2. a stored partition the topic does not have -> unknown partition;
    3. committed < low -> low out-of-range, messages lost = low - committed, no lag;
    4. committed > high -> high out-of-range, no lag (the position does not exist);
    5. high > committed -> lagging; 6. otherwise ok (lag 0).
    Out of range, the state wins: no lag (`lag_absent` says why), never a negative or zero one.
    """
    if committed is None:
        return PartitionEvaluation(partition, None, low, high, None, _MISSING)
    if high is None:
        return PartitionEvaluation(partition, committed, None, None, None, _UNKNOWN)
    lag = high - committed
    if committed < low:
        return PartitionEvaluation(partition, committed, low, high, None, _LOW, low - committed)
    if lag < 0:
        return PartitionEvaluation(partition, committed, low, high, None, _HIGH)
    return PartitionEvaluation(partition, committed, low, high, lag, _LAGGING if lag else _OK)


def evaluate_partitions(
    committed: dict[int, int], watermarks: dict[int, tuple[int, int]]
) -> list[PartitionEvaluation]:
    """Every partition of the topic and of the store, by partition id."""
    if committed.keys() == watermarks.keys():
        # The usual case, inlined (rules 3, 5, 6 of evaluate_partition): this runs for every
        # partition of every pipeline at every cycle.
        result = []
        append = result.append
        for p in sorted(committed):
            c = committed[p]
            low, high = watermarks[p]
            lag = high - c
            if c < low or lag < 0:
                append(evaluate_partition(p, c, low, high))
            else:
                append(_new(PartitionEvaluation, (p, c, low, high, lag, _LAGGING if lag else _OK, 0)))
        return result
    result = []
    for p in sorted(set(committed) | set(watermarks)):
        low, high = watermarks.get(p, (None, None))
        result.append(evaluate_partition(p, committed.get(p), low, high))
    return result


def total_lag(evaluations: Sequence[PartitionEvaluation]) -> int:
    """Messages not yet processed: the sum of positive lags of partitions with a known lag."""
    return sum(e.lag for e in evaluations if e.lag is not None and e.lag > 0)


# --- pipeline status over a window ------------------------------------------------------------


class Sample(NamedTuple):
    """One collection cycle's view of a pipeline (a tuple: the collectors build a window of them
    for every pipeline at every cycle)."""

    at_s: float  # epoch seconds of the sample
    committed: dict[int, int]  # partition -> committed offset (the store's newest batch)
    # partition -> high watermark; read only when `lag` is None (None then allowed).
    high: dict[int, int] | None
    last_batch_s: float | None  # epoch seconds of the newest batch the store holds
    # The sample's total lag when already known (the collectors store it with every sample, so
    # the window rules need not recompute older samples at every cycle).
    lag: int | None = None
    # Whether some committed offset is lower here than in the sample just before it
    # (went_back()), when already known: the collectors store it with every sample, so the
    # window's older pairs are not compared again at every cycle. None: compare.
    went_back: bool | None = None


_at_of, _committed_of = attrgetter("at_s"), attrgetter("committed")


@dataclass
class StatusResult:
    status: Status
    reasons: list[str] = field(default_factory=list)


def _aligned(a: dict[int, int], b: dict[int, int]) -> bool:
    """True when both dicts list the same partitions in the same order (values() then line up).
    (Lists, not tuples: list(dict) is the cheaper copy of the keys.)"""
    return len(a) == len(b) and list(a) == list(b)


def sample_lag(committed: dict[int, int], high: dict[int, int]) -> int:
    """Total lag of one sample (positive per-partition lags of partitions in both), at C speed
    when both dicts list the same partitions in the same order; equals total_lag() of its
    evaluations."""
    if len(committed) == len(high) and list(committed) == list(high):  # _aligned, inlined: once per sample
        diffs = list(map(sub, high.values(), committed.values()))
    else:
        diffs = [high[p] - c for p, c in committed.items() if p in high]
    return sum(diffs) if not diffs or min(diffs) >= 0 else sum(d for d in diffs if d > 0)


def _went_back(earlier: dict[int, int], later: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Partitions whose committed offset is lower in `later` than in `earlier`."""
    if _aligned(earlier, later) and not any(map(lt, later.values(), earlier.values())):
        return {}  # the usual case, at C speed
    return {p: (earlier[p], c) for p, c in later.items() if p in earlier and c < earlier[p]}


def went_back(earlier: dict[int, int], later: dict[int, int]) -> bool:
    """Whether some partition's committed offset is lower in `later` than in `earlier` (the
    Sample.went_back the collectors store with each new sample)."""
    return bool(_went_back(earlier, later))


def batch_interval_s(batch_times_s: Sequence[float]) -> float | None:
    """The pipeline's own cadence: the median gap between its recent batches (None if < 2)."""
    times = sorted(batch_times_s)
    gaps = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
    if not gaps:
        return None
    mid = len(gaps) // 2
    return gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2


def evaluate_status(
    window: Sequence[Sample],
    partitions: Sequence[PartitionEvaluation],
    interval_s: float | None,
    now_s: float,
    stop_after_intervals: float = thresholds.STOP_AFTER_INTERVALS,
    min_stale_s: float = thresholds.MIN_STALE_S,
    stall_after_intervals: float = thresholds.STALL_AFTER_INTERVALS,
) -> StatusResult:
    """Rules 1-6 of streamoffsets.rules in one pass, tuned: this runs for every pipeline at
    every cycle (tests/unit/test_rules_property.py proves it equal to the plain rules).
    Worst first; every rule that fires adds its reason:
    1. ERR: a partition is out of range (low: data lost; high: impossible position);
    2. REWOUND: a partition's committed offset went backwards within the window;
    3. STOPPED: no new batch for more than `stop_after_intervals` batch intervals (at least
       `min_stale_s`); stopped while lag > 0 is ERR (work is piling up and nothing runs);
    4. STALLED: batches keep coming but no offset moved for `stall_after_intervals` batch
       intervals at the end of the window while messages waited (lag > 0 at each sample);
    5. WARN: lag grew at every step of a window of at least 3 samples;
    6. OK otherwise.
    """
    # (status, reason) of every rule that fires, in rule order; the worst status wins at the end.
    fired: list[tuple[Status, str]] = []

    # The states are collected at C speed; the partitions are walked only when one is out of range.
    if not _OUT_OF_RANGE.isdisjoint(map(_state_of, partitions)):
        fired += [(Status.ERR, e.describe()) for e in partitions if e.state is _LOW or e.state is _HIGH]

    ordered = sorted(window, key=_at_of)
    committed = list(map(_committed_of, ordered))
    # A pair whose later sample is known not to have gone back (stored with it) is not compared
    # again; the others are, at C speed when both list the same partitions in the same order,
    # and only a pair that went back is looked at partition by partition.
    for i in range(1, len(ordered)):
        if ordered[i].went_back is False:
            continue
        back = _went_back(committed[i - 1], committed[i])
        if back:
            where = ", ".join(f"partition {p} {a:,} -> {b:,}" for p, (a, b) in sorted(back.items()))
            fired.append((Status.REWOUND, f"offsets went backwards: {where}"))

    # Each sample's total lag, computed once (the collectors store it with all but the newest).
    lags = [s.lag if s.lag is not None else sample_lag(s.committed, s.high) for s in ordered]
    latest = ordered[-1] if ordered else None
    lag_now = lags[-1] if lags else 0
    if latest and latest.last_batch_s is not None:
        threshold = thresholds.stop_threshold_s(interval_s, stop_after_intervals, min_stale_s)
        silent = now_s - latest.last_batch_s
        if silent > threshold:
            # The cadence is named only when known (one batch alone has none).
            expected = f" (expected one every {human_duration(interval_s)})" if interval_s else ""
            if lag_now > 0:
                fired.append((Status.ERR, f"stopped with {lag_now:,} messages waiting: no batch for "
                                          f"{human_duration(silent)}{expected}"))
            else:
                fired.append((Status.STOPPED, f"no batch for {human_duration(silent)}{expected}; nothing is waiting"))
        elif len(ordered) >= 2 and lag_now > 0:
            # The stretch at the end of the window where no offset moved: stalled when it is long
            # enough (stall_after_intervals batch intervals) and batches kept coming during it.
            # Only samples with messages waiting count: a caught-up job is not stalled when records arrive.
            start = len(ordered) - 1
            while start > 0 and committed[start - 1] == latest.committed and lags[start - 1] > 0:
                start -= 1
            if start < len(ordered) - 1:  # the newest sample alone is no stretch (the usual case)
                frozen = ordered[start]
                span = latest.at_s - frozen.at_s
                long_enough = span >= stall_after_intervals * interval_s if interval_s else True
                batches_came = frozen.last_batch_s is not None and latest.last_batch_s > frozen.last_batch_s
                if long_enough and batches_came:
                    fired.append((Status.STALLED, f"batches keep coming but no offset moved in {span:,.0f} s "
                                                  f"while {lag_now:,} messages wait"))

    if len(ordered) >= thresholds.LAG_GROWING_MIN_SAMPLES and all(map(lt, lags, lags[1:])):
        fired.append((Status.WARN, f"lag grew at every sample of the last {latest.at_s - ordered[0].at_s:,.0f} s: "
                                   f"{lags[0]:,} -> {lags[-1]:,}"))
    if not fired:
        return StatusResult(Status.OK, ["consuming normally" if lag_now else "caught up"])
    return StatusResult(max(status for status, _ in fired), [reason for _, reason in fired])


# --- lag in seconds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeLag:
    seconds: float | None  # None = unknown (never reported as 0 when unknown)
    method: str  # how the number was obtained, shown next to it


def lag_seconds(
    committed: int, high_samples: Sequence[tuple[float, int]], now_s: float, max_extrapolation_s: float = 3600.0
) -> TimeLag:
    """How long ago the next unprocessed message (offset `committed`) was written.

    `high_samples` are (time, high watermark) pairs of one partition. The message at offset c
    was written when the high watermark passed c: between the last sample with high <= c and
    the first with high > c, interpolated linearly. Rules:
    1. committed >= the newest high watermark: caught up, 0 s ("caught up");
    2. the crossing lies between two samples: interpolate ("interpolated");
    3. c is below every sample: extrapolate back from the two oldest distinct samples' rate,
       capped at `max_extrapolation_s` beyond the oldest sample ("extrapolated, capped");
    4. fewer than two distinct samples and not caught up: unknown, never 0 ("unknown").
    Flat stretches (the same high watermark in consecutive samples) collapse to their first
    sample: the watermark reached that value then, not later.
    """
    points: list[tuple[float, int]] = []
    for t, h in sorted(high_samples):
        if points and h == points[-1][1]:
            continue  # flat stretch: keep the time the value was first seen
        if points and h < points[-1][1]:
            points = []  # the topic was re-created: older samples no longer describe it
        points.append((t, h))
    if points and committed >= points[-1][1]:
        return TimeLag(0.0, "caught up")
    if len(points) < 2:
        return TimeLag(None, "unknown: not enough watermark samples yet")
    for (t0, h0), (t1, h1) in zip(points, points[1:]):
        if h0 <= committed < h1:
            # Offsets h0..h1-1 were written between t0 and t1; offset c at the fraction (c - h0 + 1)/(h1 - h0).
            t = t0 + (t1 - t0) * (committed - h0 + 1) / (h1 - h0)
            return TimeLag(max(0.0, now_s - t), "interpolated")
    (t0, h0), (t1, h1) = points[0], points[1]
    rate = (h1 - h0) / (t1 - t0) if t1 > t0 else 0.0
    if rate <= 0:
        return TimeLag(None, "unknown: no production rate to extrapolate from")
    # Offset c is written when the high watermark reaches c + 1, as in the interpolation above.
    back = min(max_extrapolation_s, (h0 - committed - 1) / rate)
    capped = back >= max_extrapolation_s
    return TimeLag(max(0.0, now_s - (t0 - back)), "extrapolated, capped" if capped else "extrapolated")


def lag_seconds_from_record(record_ms: int, now_s: float) -> TimeLag:
    """Lag in seconds from the timestamp of the record at the committed offset (the next
    unprocessed message): exact where the broker gives it; a clock ahead of ours reads as 0."""
    return TimeLag(max(0.0, now_s - record_ms / 1000), "record timestamp")


def lag_seconds_without_record(
    committed: int, high_samples: Sequence[tuple[float, int]], now_s: float, no_record: str | None = None
) -> TimeLag:
    """Lag in seconds of a lagging partition whose record at the committed offset was not read
    (`no_record` says why: gone, or not read this cycle). Rules:
    1. lag_seconds (interpolation in the high watermark samples) where it knows;
    2. else, the high watermark unchanged over two or more samples (an idle topic): the unread
       record was written before the high watermark was first seen at its value, so the lag is
       at least now minus that time ("at least: ...");
    3. else unknown, never 0.
    The reason there is no record is added to the method either way, so a number's source and
    an absent number's cause are both shown.
    """
    tl = lag_seconds(committed, high_samples, now_s)
    if tl.seconds is None:
        since = _high_unchanged_since(high_samples)
        if since is not None and since < now_s:
            tl = TimeLag(now_s - since, "at least: high watermark flat since first sampled")
    if not no_record:
        return tl
    if tl.seconds is None:
        return TimeLag(None, f"unknown: {no_record}; {tl.method.removeprefix('unknown: ')}")
    return TimeLag(tl.seconds, f"{tl.method} ({no_record})")


def _high_unchanged_since(high_samples: Sequence[tuple[float, int]]) -> float | None:
    """The time the newest high watermark value was first sampled, if two or more samples hold it."""
    ordered = sorted(high_samples)
    if len(ordered) < 2 or ordered[-2][1] != ordered[-1][1]:
        return None
    since = ordered[-1][0]
    for t, h in reversed(ordered):
        if h != ordered[-1][1]:
            break
        since = t
    return since


def pipeline_lag_seconds(partitions: Sequence[tuple[int, int | None, TimeLag]]) -> TimeLag:
    """A pipeline's lag in seconds from its partitions' (partition, lag, time lag). Rules:
    0. a partition out of range (its time lag is None with a method starting "out of range")
       makes the pipeline's absent: no number, and it names the partition;
    1. a lagging partition (lag > 0) whose time lag is unknown makes the pipeline's unknown:
       the worst partition could be any age, so no number (and never 0) is shown;
    2. otherwise the largest known time lag, with its method;
    3. no partition with a known time lag: unknown, with the first partition's reason.
    """
    worst: TimeLag | None = None
    for partition, _, tl in partitions:
        if tl.seconds is None and tl.method.startswith("out of range"):
            return TimeLag(None, f"none: partition {partition} is out of range")
    for partition, lag, tl in partitions:
        if tl.seconds is None and lag:
            return TimeLag(None, f"unknown: partition {partition} is {lag:,} behind with no estimate yet")
        if tl.seconds is not None and (worst is None or tl.seconds > worst.seconds):
            worst = tl
    if worst is not None:
        return worst
    return partitions[0][2] if partitions else TimeLag(None, "unknown: no partitions")


def lag_seconds_series(
    committed_samples: Sequence[tuple[float, int | None]],
    high_samples: Sequence[tuple[float, int]],
    max_extrapolation_s: float = 3600.0,
) -> list[float | None]:
    """Lag in seconds of one partition at each of its samples, for charts: at each (t, c) of
    `committed_samples` (sorted by t), the seconds of `lag_seconds(c, [high samples at or before
    t], t)`; None where c is None or the lag is unknown.

    One merge-walk over both lists, with a binary search per sample: O((n + m) log m) where
    calling lag_seconds at every sample is O(n * m). It keeps lag_seconds' collapsed points
    (flat stretches at their first time, reset when the watermark goes down) as it walks, and
    applies the same rules with the same arithmetic, so the numbers are identical.
    """
    from bisect import bisect_right

    highs = sorted(high_samples)
    times: list[float] = []
    values: list[int] = []  # strictly increasing after collapsing
    j, m = 0, len(highs)
    out: list[float | None] = []
    for now_s, committed in committed_samples:
        while j < m and highs[j][0] <= now_s:
            t, h = highs[j]
            j += 1
            if values and h == values[-1]:
                continue
            if values and h < values[-1]:
                times, values = [], []
            times.append(t)
            values.append(h)
        if committed is None:
            out.append(None)
        elif values and committed >= values[-1]:
            out.append(0.0)  # rule 1
        elif len(values) < 2:
            out.append(None)  # rule 4
        else:
            i = bisect_right(values, committed)
            if i:  # rule 2: values[i - 1] <= committed < values[i]
                t0, h0, t1, h1 = times[i - 1], values[i - 1], times[i], values[i]
                t = t0 + (t1 - t0) * (committed - h0 + 1) / (h1 - h0)
                out.append(max(0.0, now_s - t))
            else:  # rule 3
                t0, h0, t1, h1 = times[0], values[0], times[1], values[1]
                rate = (h1 - h0) / (t1 - t0) if t1 > t0 else 0.0
                if rate <= 0:
                    out.append(None)
                else:
                    back = min(max_extrapolation_s, (h0 - committed - 1) / rate)
                    out.append(max(0.0, now_s - (t0 - back)))
    return out


# --- retention risk ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionRisk:
    margin: int  # committed - low: unprocessed messages still on disk before deletion reaches the job
    seconds_left: float | None  # None: the job outruns retention (or rates unknown)

    def describe(self, partition: int) -> str:
        if self.seconds_left is None:
            return f"partition {partition}: retention margin {self.margin:,} messages, not shrinking"
        return (f"partition {partition}: at this rate it loses data in ~{human_duration(self.seconds_left)} "
                f"(retention margin {self.margin:,} messages)")


def retention_risk(
    committed: int, low_samples: Sequence[tuple[float, int]], committed_samples: Sequence[tuple[float, int]]
) -> RetentionRisk:
    """Rules: 1. margin = committed - low (newest low); 2. a low watermark that did not move
    deletes nothing: no deadline, whatever the job does (checked first: the usual case, every
    partition at every cycle); 3. the low watermark advances at its rate over the samples, the
    job at its own; 4. if the low watermark gains on the job, the time left is margin / (low
    rate - job rate); 5. otherwise no deadline (None)."""
    lows = sorted(low_samples)
    margin = committed - lows[-1][1] if lows else 0
    if not lows or lows[0][1] == lows[-1][1]:
        return RetentionRisk(margin, None)
    low_rate = _rate(lows)
    job_rate = _rate(sorted(committed_samples))
    if low_rate is None or job_rate is None or low_rate <= job_rate:
        return RetentionRisk(margin, None)
    return RetentionRisk(margin, max(0.0, margin / (low_rate - job_rate)))


def _rate(samples: Sequence[tuple[float, int]]) -> float | None:
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None
    return (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])


def human_duration(seconds: float) -> str:
    """12 s, 4 min, 3 h, 2 d: how the dashboard and the reasons say a duration."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


# --- cross-store drift ------------------------------------------------------------------------


def drift(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    """Per-partition difference a - b where one job's offsets are in two stores; partitions only
    one store has are reported as drift too (the other value missing). Empty: no drift."""
    out = {p: a[p] - b[p] for p in a.keys() & b.keys() if a[p] != b[p]}
    out.update({p: a[p] for p in a.keys() - b.keys()})
    out.update({p: -b[p] for p in b.keys() - a.keys()})
    return dict(sorted(out.items()))


def describe_drift(a_name: str, a: dict[int, int], b_name: str, b: dict[int, int]) -> str:
    parts = []
    for p in drift(a, b):
        left, right = a.get(p), b.get(p)
        parts.append(f"partition {p}: {'—' if left is None else f'{left:,}'} vs {'—' if right is None else f'{right:,}'}")
    return f"offsets differ between {a_name} and {b_name}: " + "; ".join(parts)
