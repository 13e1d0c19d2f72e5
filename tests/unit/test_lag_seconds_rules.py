"""Lag in seconds without the record (streamoffsets.evaluation.lag_seconds_without_record) and the
positions whose records are read (dashboard.monitoring.selectors.record_positions): numbered cases, no I/O."""
from __future__ import annotations

import pytest

from dashboard.monitoring.selectors import record_positions
from streamoffsets.evaluation import lag_seconds_without_record

NOW = 1_000.0
WITHOUT_RECORD_CASES = [
    # (committed, [(t, high)], why no record) -> (seconds, method starts with)
    # 1. interpolation where it knows (offset 5 written at 100 + 100 x 6/10), the reason beside it
    (5, [(100.0, 0), (200.0, 10)], "record deleted by retention", 840.0, "interpolated (record deleted by retention)"),
    # 2. flat high watermark over several samples: at least the time since it was first seen
    (5, [(400.0, 10), (700.0, 10), (900.0, 10)], None, 600.0, "at least: high watermark flat since first sampled"),
    # 3. ... with the reason the record was not read
    (5, [(400.0, 10), (900.0, 10)], "record not read: over this cycle's budget", 600.0,
     "at least: high watermark flat since first sampled (record not read: over this cycle's budget)"),
    # 4. one sample only (a new pipeline): unknown, never 0, and why
    (5, [(NOW, 10)], "record not read: over this cycle's budget", None,
     "unknown: record not read: over this cycle's budget; not enough watermark samples yet"),
    # 5. a watermark that moved within the samples is interpolated (offset 5 at 100 + 300 x 3/7),
    #    not the flat rule's lower bound
    (5, [(100.0, 3), (400.0, 10), (900.0, 10)], None, NOW - (100.0 + 300.0 * 3 / 7), "interpolated"),
    # 6. no samples at all: unknown
    (5, [], None, None, "unknown: not enough watermark samples yet"),
]


@pytest.mark.parametrize("committed, samples, why, seconds, method", WITHOUT_RECORD_CASES,
                         ids=[f"case{i + 1}" for i in range(len(WITHOUT_RECORD_CASES))])
def test_lag_seconds_without_record(committed, samples, why, seconds, method):
    tl = lag_seconds_without_record(committed, samples, NOW, why)
    assert tl.method.startswith(method), tl.method
    if seconds is None:
        assert tl.seconds is None
    else:
        assert tl.seconds == pytest.approx(seconds)


def test_every_group_s_position_is_read_most_lagging_first_and_deleted_ones_are_named():
    topics = {1: "t", 2: "t", 3: "t", 4: "u"}
    committed = {1: {0: 2, 1: 9}, 2: {0: 6, 1: 9}, 3: {0: 6, 1: 1}, 4: {0: 0}}
    marks = {"t": {0: (0, 10), 1: (3, 9)}, "u": {0: (0, 0)}}
    positions, deleted = record_positions(topics=topics, committed=committed, marks=marks)
    # Distinct positions (groups 2 and 3 share offset 6 of partition 0), caught up (9 of 9) and
    # empty partitions left out, the most lagging first.
    assert positions == [("t", 0, 2), ("t", 0, 6)]
    assert deleted == {("t", 1, 1)}  # below the low watermark 3: deleted by retention
