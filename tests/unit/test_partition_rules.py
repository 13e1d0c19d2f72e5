"""streamoffsets.partition_rules: every rule proven by cases numbered as the rules are."""
from __future__ import annotations

import pytest

from streamoffsets.evaluation import Sample, Status, StatusResult
from streamoffsets.partition_rules import merge_into, partition_status

NOW = 10_000.0
MS = int(NOW * 1000)


def s(at, committed, high=None):
    high = high or [c + 40 for c in committed]
    return Sample(NOW + at, dict(enumerate(committed)), dict(enumerate(high)), NOW + at)


# Four partitions, commits every 5 s. Partitions 0-2 frozen at 120 for the last 30 s while 3 advances.
STUCK = [s(-40, [100, 100, 100, 300]), s(-30, [120, 120, 120, 320]), s(-20, [120, 120, 120, 340]),
         s(-10, [120, 120, 120, 360]), s(0, [120, 120, 120, 380])]
LAGS = {0: 40, 1: 40, 2: 40, 3: 40}

CASES = [
    # (case, window, lags, interval, written_ms, expected {partition: status}, fragment of partition 0's reason)
    # 1a. ZooKeeper mtimes: 0-2 last written 30 s before 3's newest write (6 intervals >= 3): STOPPED.
    ("1a", STUCK, LAGS, 5.0, {0: MS - 30_000, 1: MS - 30_000, 2: MS - 30_000, 3: MS},
     {0: Status.STOPPED, 1: Status.STOPPED, 2: Status.STOPPED, 3: Status.OK},
     "partition 0 stopped at offset 120: not committed for 30 s (6 commit intervals) while partition 3 kept committing;"
     " 40 messages waiting"),
    # 1b. Silent for 10 s only (2 intervals < 3): not stopped, but frozen 30 s with writes: STALLED (rule 2).
    ("1b", STUCK, LAGS, 5.0, {0: MS - 10_000, 1: MS - 10_000, 2: MS - 10_000, 3: MS},
     {0: Status.STALLED, 1: Status.STALLED, 2: Status.STALLED, 3: Status.OK}, "stalled at offset 120"),
    # 1c. Not written for long but nothing waits (an old consumer skips an idle partition): OK.
    ("1c", STUCK, {0: 0, 1: 0, 2: 0, 3: 40}, 5.0, {0: MS - 60_000, 1: MS - 60_000, 2: MS - 60_000, 3: MS},
     {0: Status.OK, 1: Status.OK, 2: Status.OK, 3: Status.OK}, None),
    # 1d. Written one at a time (ms apart), then 0-2 stop: only the partition that kept
    #     committing is named, not a neighbour written 4 ms later in the same commit.
    ("1d", STUCK, LAGS, 5.0, {0: MS - 30_000, 1: MS - 29_996, 2: MS - 29_990, 3: MS},
     {0: Status.STOPPED, 1: Status.STOPPED, 2: Status.STOPPED, 3: Status.OK}, "while partition 3 kept committing"),
    # 2a. Re-written unchanged (mtimes move) while 3 advances: STALLED, naming the partition, the
    #     offset, the time, the commits and who advanced.
    ("2a", STUCK, LAGS, 5.0, {0: MS, 1: MS, 2: MS, 3: MS},
     {0: Status.STALLED, 1: Status.STALLED, 2: Status.STALLED, 3: Status.OK},
     "partition 0 stalled at offset 120 for 30 s (6 commit intervals) with 40 messages waiting while partition 3 "
     "advanced"),
    # 2b. A store without per-partition write times: STALLED, and the reason says a stop looks the same.
    ("2b", STUCK, LAGS, 5.0, None,
     {0: Status.STALLED, 1: Status.STALLED, 2: Status.STALLED, 3: Status.OK},
     "does not record when each partition was written"),
    # 2c. Frozen for exactly 2 intervals (10 s) while 3 advances: STALLED at the threshold.
    ("2c", [s(-20, [100, 0, 0, 300]), s(-10, [120, 0, 0, 320]), s(0, [120, 0, 0, 340])],
     {0: 40, 1: 0, 2: 0, 3: 40}, 5.0, None,
     {0: Status.STALLED, 1: Status.OK, 2: Status.OK, 3: Status.OK}, "for 10 s (2 commit intervals)"),
    # 3a. Frozen for one interval only (a slow batch): OK.
    ("3a", [s(-10, [100, 300]), s(-5, [120, 320]), s(0, [120, 340])], {0: 40, 1: 40}, 5.0, None,
     {0: Status.OK, 1: Status.OK}, None),
    # 3b. Nothing waits on the frozen partition (caught up): OK.
    ("3b", STUCK, {0: 0, 1: 0, 2: 0, 3: 40}, 5.0, None,
     {0: Status.OK, 1: Status.OK, 2: Status.OK, 3: Status.OK}, None),
    # 3c. Every partition frozen: the pipeline rules own it (no per-partition flag).
    ("3c", [s(-30, [120, 320]), s(-20, [120, 320]), s(-10, [120, 320]), s(0, [120, 320])],
     {0: 40, 1: 40}, 5.0, None, {0: Status.OK, 1: Status.OK}, None),
    # 3d. Cadence unknown (fewer than two batches): OK.
    ("3d", STUCK, LAGS, None, None, {0: Status.OK, 1: Status.OK, 2: Status.OK, 3: Status.OK}, None),
    # 3e. One sample: OK.
    ("3e", STUCK[-1:], LAGS, 5.0, None, {0: Status.OK, 1: Status.OK, 2: Status.OK, 3: Status.OK}, None),
    # 3f. Every partition advances: OK.
    ("3f", [s(-10, [100, 300]), s(-5, [110, 320]), s(0, [120, 340])], {0: 40, 1: 40}, 5.0, None,
     {0: Status.OK, 1: Status.OK}, None),
    # 3g. Lag unknown (the partition is missing from the topic): never flagged.
    ("3g", STUCK, {0: None, 1: None, 2: None, 3: 40}, 5.0, None,
     {0: Status.OK, 1: Status.OK, 2: Status.OK, 3: Status.OK}, None),
]


@pytest.mark.parametrize("case, window, lags, interval, written, expected, fragment", CASES,
                         ids=[c[0] for c in CASES])
def test_partition_rules(case, window, lags, interval, written, expected, fragment):
    result = partition_status(window, lags, interval, written)  # the flagged partitions only
    assert {p: Status.OK for p in lags} | {ps.partition: ps.status for ps in result} == expected
    reasons = {ps.partition: ps.reason for ps in result}
    if fragment is None:
        assert 0 not in reasons
    else:
        assert fragment in reasons[0], reasons


# 4. The pipeline's status is its worst partition's (or its own, if worse); the reasons list each
#    flagged partition and "consuming normally" goes.
def test_case_4a_worst_partition_becomes_the_pipeline_status():
    parts = partition_status(STUCK, LAGS, 5.0, {0: MS - 30_000, 1: MS, 2: MS, 3: MS})
    merged = merge_into(StatusResult(Status.OK, ["consuming normally"]), parts)
    assert merged.status == Status.STOPPED
    assert merged.reasons[0].startswith("partition 0 stopped")
    assert [r.split()[1] for r in merged.reasons] == ["0", "1", "2"]
    assert not any("consuming normally" in r for r in merged.reasons)


def test_case_4b_a_worse_pipeline_status_stays_with_its_reason_first():
    parts = partition_status(STUCK, LAGS, 5.0, None)
    merged = merge_into(StatusResult(Status.REWOUND, ["offsets went backwards: partition 3 9 -> 1"]), parts)
    assert merged.status == Status.REWOUND
    assert merged.reasons[0].startswith("offsets went backwards") and len(merged.reasons) == 4


def test_case_4c_nothing_flagged_leaves_the_result_as_it_was():
    result = StatusResult(Status.OK, ["consuming normally"])
    assert merge_into(result, partition_status(STUCK, {0: 0, 1: 0, 2: 0, 3: 0}, 5.0, None)) is result


def test_case_4d_many_flagged_partitions_are_counted_after_the_first_ten():
    n = 25  # partitions 0..23 frozen, 24 advances
    window = [Sample(NOW + at, {p: (c if p < n - 1 else 300 + at) for p in range(n)}, {p: 500 for p in range(n)},
                     NOW + at) for at, c in ((-20, 100), (-10, 120), (0, 120))]
    window[0].committed.update({p: 100 for p in range(n - 1)})
    parts = partition_status([window[0], *[w._replace(committed={**w.committed, **{p: 120 for p in range(n - 1)}})
                                           for w in window[1:]]], {p: 40 for p in range(n)}, 5.0, None)
    assert [ps.status for ps in parts] == [Status.STALLED] * (n - 1)
    merged = merge_into(StatusResult(Status.OK, ["consuming normally"]), parts)
    assert len(merged.reasons) == 11 and merged.reasons[-1] == "and 14 more partitions (14 STALLED): see the partitions table"
