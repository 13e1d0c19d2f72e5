"""streamoffsets.evaluation: every rule proven by numbered cases that say why."""
from __future__ import annotations

import pytest

from streamoffsets import evaluation
from streamoffsets.evaluation import (
    PartitionState as PS,
)
from streamoffsets.evaluation import (
    Sample,
    Status,
    batch_interval_s,
    evaluate_partition,
    evaluate_partitions,
    evaluate_status,
    lag_seconds,
    retention_risk,
    sample_lag,
    total_lag,
)

PARTITION_CASES = [
    # (committed, low, high) -> (state, lag, messages_lost)
    (5, 0, 5, PS.OK, 0, 0),  # 1. caught up
    (3, 0, 5, PS.LAGGING, 2, 0),  # 2. behind by high - committed
    (2, 4, 9, PS.LOW_OUT_OF_RANGE, None, 2),  # 3. below low: 2 messages deleted unread; no lag
    (4, 4, 9, PS.LAGGING, 5, 0),  # 4. exactly at low is still readable
    (12, 0, 9, PS.HIGH_OUT_OF_RANGE, None, 0),  # 5. beyond high: position does not exist; no lag
    (None, 0, 9, PS.MISSING_IN_STORE, None, 0),  # 6. partition without stored offset
    (7, None, None, PS.UNKNOWN_PARTITION, None, 0),  # 7. stored partition the topic lacks
]


@pytest.mark.parametrize("committed, low, high, state, lag, lost", PARTITION_CASES,
                         ids=[f"case{i + 1}" for i in range(len(PARTITION_CASES))])
def test_partition_states(committed, low, high, state, lag, lost):
    e = evaluate_partition(0, committed, low, high)
    assert (e.state, e.lag, e.messages_lost) == (state, lag, lost)
    assert e.describe().startswith("partition 0")
    # Whenever there is no lag number, lag_absent says why; never both.
    assert (e.lag is None) == (e.lag_absent is not None)


def test_out_of_range_says_why_it_has_no_lag():
    assert evaluate_partition(0, 1000, 0, 201).lag_absent == "out of range: committed 1000 above the high watermark 201"
    assert evaluate_partition(0, 5, 100, 201).lag_absent == (
        "out of range: committed 5 below the low watermark 100 (95 messages deleted before being read)")


def test_low_out_of_range_is_described_with_messages_lost():
    assert evaluate_partition(2, 1_000, 2_234, 5_000).describe().startswith(
        "partition 2: 1,234 messages were deleted by retention before being processed"
    )


def test_partitions_union_and_total_lag_ignores_unknown_and_negative():
    evs = evaluate_partitions({0: 3, 1: 12, 5: 1}, {0: (0, 5), 1: (0, 9), 2: (0, 4)})
    assert [e.partition for e in evs] == [0, 1, 2, 5]
    assert [e.state for e in evs] == [PS.LAGGING, PS.HIGH_OUT_OF_RANGE, PS.MISSING_IN_STORE, PS.UNKNOWN_PARTITION]
    assert total_lag(evs) == 2


def s(at, committed, high, last_batch):
    return Sample(at, dict(enumerate(committed)), dict(enumerate(high)), last_batch)


NOW = 10_000.0
STATUS_CASES = [
    # (window, interval, expected status, reason fragment)
    # 1. Offsets advance with the production: OK.
    ([s(NOW - 20, [10], [12], NOW - 21), s(NOW - 10, [20], [22], NOW - 11), s(NOW, [30], [31], NOW - 1)],
     10, Status.OK, "consuming normally"),
    # 2. Caught up and idle but batches still come: OK, caught up.
    ([s(NOW - 10, [30], [30], NOW - 11), s(NOW, [30], [30], NOW - 1)], 10, Status.OK, "caught up"),
    # 3. Lag grows at every sample: WARN.
    ([s(NOW - 20, [10], [12], NOW - 21), s(NOW - 10, [15], [20], NOW - 11), s(NOW, [20], [30], NOW - 1)],
     10, Status.WARN, "lag grew at every sample"),
    # 4. Two samples growing are not enough for WARN (noise).
    ([s(NOW - 10, [15], [20], NOW - 11), s(NOW, [20], [30], NOW - 1)], 10, Status.OK, "consuming"),
    # 5. Batches keep coming, offsets frozen, lag > 0: STALLED.
    ([s(NOW - 20, [10], [20], NOW - 21), s(NOW - 10, [10], [25], NOW - 11), s(NOW, [10], [30], NOW - 1)],
     10, Status.STALLED, "no offset moved"),
    # 6. No batch for more than 3 intervals, nothing waiting: STOPPED.
    ([s(NOW - 10, [30], [30], NOW - 60), s(NOW, [30], [30], NOW - 60)], 10, Status.STOPPED, "nothing is waiting"),
    # 7. No batch for more than 3 intervals while messages wait: ERR.
    ([s(NOW - 10, [30], [35], NOW - 60), s(NOW, [30], [40], NOW - 60)], 10, Status.ERR, "stopped with 10 messages"),
    # 8. Within 3 intervals of silence it is not stopped yet (30 s minimum for fast cadences).
    ([s(NOW - 10, [30], [30], NOW - 25), s(NOW, [30], [30], NOW - 25)], 5, Status.OK, "caught up"),
    # 9. Offsets went backwards between samples: REWOUND (a rewind or a reset), shown with both offsets.
    ([s(NOW - 10, [500], [600], NOW - 11), s(NOW, [100], [600], NOW - 1)], 10, Status.REWOUND, "partition 0 500 -> 100"),
    # 10. A stall counts from where the offsets stopped, not from the window's start: here the
    #     last 20 s (2 intervals) are frozen while batches came, after earlier progress.
    ([s(NOW - 40, [5], [20], NOW - 41), s(NOW - 30, [8], [25], NOW - 31), s(NOW - 20, [10], [25], NOW - 21),
      s(NOW - 10, [10], [28], NOW - 11), s(NOW, [10], [30], NOW - 1)], 10, Status.STALLED, "no offset moved in 20 s"),
    # 11. Frozen for only one interval: not stalled yet (a slow batch).
    ([s(NOW - 20, [5], [20], NOW - 21), s(NOW - 10, [10], [25], NOW - 11), s(NOW, [10], [25], NOW - 1)],
     10, Status.OK, "consuming"),
]


@pytest.mark.parametrize("window, interval, status, fragment", STATUS_CASES,
                         ids=[f"case{i + 1}" for i in range(len(STATUS_CASES))])
def test_pipeline_status(window, interval, status, fragment):
    latest = window[-1]
    parts = evaluate_partitions(latest.committed, {p: (0, h) for p, h in latest.high.items()})
    result = evaluate_status(window, parts, interval, NOW)
    assert result.status == status
    assert any(fragment in r for r in result.reasons), result.reasons


def test_out_of_range_is_err_and_outranks_everything():
    window = [s(NOW - 10, [2], [9], NOW - 11), s(NOW, [2], [9], NOW - 1)]
    parts = evaluate_partitions({0: 2}, {0: (4, 9)})
    result = evaluate_status(window, parts, 10, NOW)
    assert result.status == Status.ERR and "deleted by retention" in result.reasons[0]


def test_batch_interval_is_the_median_gap():
    assert batch_interval_s([0, 5, 10, 40]) == 5  # one long pause does not move the cadence
    assert batch_interval_s([7]) is None


LAG_SECONDS_CASES = [
    # (committed, samples, expected seconds, method)
    # 1. Caught up: 0 s.
    (100, [(0, 50), (10, 100)], 0.0, "caught up"),
    # 2. Offset 60 was written between t=0 (high 50) and t=10 (high 100): at t=2.2 -> 17.8 s ago at t=20.
    (60, [(0, 50), (10, 100), (20, 150)], 17.8, "interpolated"),
    # 3. A flat stretch collapses to its first sample: high 100 was reached at t=10, not t=19.
    (99, [(0, 50), (10, 100), (15, 100), (19, 100), (20, 150)], 10.0, "interpolated"),
    # 4. Below every sample: extrapolated back at the production rate (5/s): offset 40 at t=-1.8.
    (40, [(0, 50), (10, 100)], 21.8, "extrapolated"),
    # 5. Far below: the extrapolation is capped (here at 100 s before the oldest sample).
    (0, [(0, 50_000), (10, 50_001)], 120.0, "extrapolated, capped"),
    # 6. One sample and behind: unknown, never 0.
    (10, [(0, 50)], None, "unknown"),
    # 7. No samples at all: unknown.
    (10, [], None, "unknown"),
]


@pytest.mark.parametrize("committed, samples, expected, method", LAG_SECONDS_CASES,
                         ids=[f"case{i + 1}" for i in range(len(LAG_SECONDS_CASES))])
def test_lag_seconds(committed, samples, expected, method):
    result = lag_seconds(committed, samples, now_s=20.0, max_extrapolation_s=100.0)
    assert result.method.startswith(method)
    if expected is None:
        assert result.seconds is None
    else:
        assert result.seconds == pytest.approx(expected, abs=0.01)


RETENTION_CASES = [
    # (committed, low samples, committed samples) -> (margin, seconds_left)
    # 1. Low watermark gains 10/s on a stopped job with margin 1,000: 100 s left.
    (2_000, [(0, 0), (100, 1_000)], [(0, 2_000), (100, 2_000)], 1_000, 100.0),
    # 2. The job outruns retention: no deadline.
    (2_000, [(0, 0), (100, 1_000)], [(0, 0), (100, 2_000)], 1_000, None),
    # 3. The job reads at 4/s, retention deletes at 10/s: 1,000 / 6 s left.
    (2_000, [(0, 0), (100, 1_000)], [(0, 1_600), (100, 2_000)], 1_000, 1_000 / 6),
    # 4. Retention does not move (no deletions yet): no deadline.
    (2_000, [(0, 0), (100, 0)], [(0, 2_000), (100, 2_000)], 2_000, None),
    # 5. ... even for a job going backwards (a rewind): nothing is deleted while the low stands still.
    (1_000, [(0, 500), (100, 500)], [(0, 2_000), (100, 1_000)], 500, None),
]


@pytest.mark.parametrize("committed, lows, commits, margin, left", RETENTION_CASES,
                         ids=[f"case{i + 1}" for i in range(len(RETENTION_CASES))])
def test_retention_risk(committed, lows, commits, margin, left):
    risk = retention_risk(committed, lows, commits)
    assert risk.margin == margin
    assert risk.seconds_left == (pytest.approx(left) if left is not None else None)


def test_retention_risk_in_words():
    assert retention_risk(2_000, [(0, 0), (3600, 1_000)], [(0, 2_000), (3600, 2_000)]).describe(3) == (
        "partition 3: at this rate it loses data in ~1 h (retention margin 1,000 messages)"
    )


@pytest.mark.parametrize("committed, high", [
    ({0: 3, 1: 9}, {0: 5, 1: 9}),  # aligned, one lagging
    ({1: 9, 0: 3}, {0: 5, 1: 9}),  # same partitions, other order
    ({0: 3, 1: 12}, {0: 5, 1: 9}),  # a negative (high out-of-range) lag does not reduce the total
    ({0: 3, 5: 1}, {0: 5, 1: 9}),  # partitions missing on either side are left out
])
def test_sample_lag_equals_total_lag_of_the_evaluations(committed, high):
    evs = evaluate_partitions(committed, {p: (0, h) for p, h in high.items()})
    assert sample_lag(committed, high) == total_lag(evs)


DRIFT_CASES = [
    # 1. Same offsets in both stores: no drift.
    ({0: 5, 1: 7}, {0: 5, 1: 7}, {}),
    # 2. One partition behind in the second store.
    ({0: 5, 1: 7}, {0: 5, 1: 4}, {1: 3}),
    # 3. A partition only one store has is drift too.
    ({0: 5, 1: 7}, {0: 5}, {1: 7}),
]


@pytest.mark.parametrize("a, b, expected", DRIFT_CASES, ids=[f"case{i + 1}" for i in range(len(DRIFT_CASES))])
def test_drift(a, b, expected):
    from streamoffsets.evaluation import drift

    assert drift(a, b) == expected


def test_drift_in_words():
    from streamoffsets.evaluation import describe_drift

    assert describe_drift("store hbase", {0: 1_200, 1: 3}, "store groups", {0: 1_000}) == (
        "offsets differ between store hbase and store groups: partition 0: 1,200 vs 1,000; partition 1: 3 vs —"
    )


_TL = evaluation.TimeLag
PIPELINE_LAG_SECONDS_CASES = [
    # 1. the worst known partition wins, with its method
    ([(0, 0, _TL(0.0, "caught up")), (1, 40, _TL(12.0, "interpolated"))], 12.0, "interpolated"),
    # 2. a lagging partition without an estimate makes the pipeline unknown, never 0 (a caught-up
    #    partition's 0 s must not stand for the whole pipeline)
    ([(0, 0, _TL(0.0, "caught up")), (1, 40, _TL(None, "unknown: not enough watermark samples yet"))],
     None, "unknown: partition 1 is 40 behind"),
    # 3. every partition caught up: 0 s
    ([(0, 0, _TL(0.0, "caught up")), (1, 0, _TL(0.0, "caught up"))], 0.0, "caught up"),
    # 4. a partition with unknown lag (None, e.g. missing in store) and an unknown time lag does not hide the others
    ([(0, None, _TL(None, "unknown: no offsets")), (1, 5, _TL(3.0, "extrapolated"))], 3.0, "extrapolated"),
    # 5. nothing known at all: the first partition's reason
    ([(0, None, _TL(None, "unknown: no production rate to extrapolate from"))], None, "unknown: no production rate"),
    # 6. no partitions
    ([], None, "unknown: no partitions"),
    # 7. (rule 0) a partition out of range: no number even beside known ones, and it names the partition
    ([(0, 0, _TL(0.0, "caught up")), (1, None, _TL(None, "out of range: committed 1000 above the high watermark 201"))],
     None, "none: partition 1 is out of range"),
]


@pytest.mark.parametrize("partitions, seconds, method", PIPELINE_LAG_SECONDS_CASES,
                         ids=[f"case{i + 1}" for i in range(len(PIPELINE_LAG_SECONDS_CASES))])
def test_pipeline_lag_seconds(partitions, seconds, method):
    result = evaluation.pipeline_lag_seconds(partitions)
    assert result.seconds == seconds
    assert result.method.startswith(method)


def test_a_stop_is_said_in_human_durations_and_names_the_cadence_only_when_known():
    window = [s(NOW - 10, [30], [40], NOW - 14_400), s(NOW, [30], [40], NOW - 14_400)]
    parts = evaluation.evaluate_partitions({0: 30}, {0: (0, 40)})
    known = evaluation.evaluate_status(window, parts, 10.0, NOW)
    assert "stopped with 10 messages waiting: no batch for 4 h (expected one every 10 s)" in known.reasons
    unknown = evaluation.evaluate_status(window, parts, None, NOW)
    assert "stopped with 10 messages waiting: no batch for 4 h" in unknown.reasons  # not "every 0 s"


@pytest.mark.parametrize("flag, rewound", [(None, True), (True, True), (False, False)])
def test_a_pair_stored_as_not_gone_back_is_not_compared_again(flag, rewound):
    """Rule 2 reads each sample's stored went_back (the collectors compute it once, when the
    sample is new): None compares the pair, True names the partitions, False skips the pair."""
    earlier, later = s(NOW - 10, [500, 7], [600, 9], NOW - 11), s(NOW, [100, 7], [600, 9], NOW - 1)
    assert evaluation.went_back(earlier.committed, later.committed) is True
    assert evaluation.went_back(later.committed, earlier.committed) is False
    parts = evaluate_partitions(later.committed, {p: (0, h) for p, h in later.high.items()})
    result = evaluate_status([earlier, later._replace(went_back=flag)], parts, 10, NOW)
    assert (result.status == Status.REWOUND) is rewound
    assert any("partition 0 500 -> 100" in r for r in result.reasons) is rewound
