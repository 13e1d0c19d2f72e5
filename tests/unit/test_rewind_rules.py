"""Rewind targets, range checks and previews: numbered cases (streamoffsets.rewind)."""
from __future__ import annotations

import re

import pytest

from streamoffsets.rewind import TargetError, check_target, preview, processing_rate, resolve_target

MARKS = {0: (100, 1_000), 1: (0, 500), 2: (50, 60)}
CURRENT = {0: 900, 1: 450, 2: 60}

RESOLVE_CASES = [
    # 1. a past batch's offsets; partition 2, missing from that batch, keeps its current offset
    ("batch", {"batch_offsets": {0: 700, 1: 300}}, {0: 700, 1: 300, 2: 60}),
    # 2. a point in time resolves like a batch (the newest batch at or before it)
    ("time", {"batch_offsets": {0: 800, 1: 400, 2: 55}}, {0: 800, 1: 400, 2: 55}),
    # 3. earliest and latest are the watermarks
    ("earliest", {}, {0: 100, 1: 0, 2: 50}),
    ("latest", {}, {0: 1_000, 1: 500, 2: 60}),
    # 4. explicit offsets for some partitions, the others unchanged
    ("offsets", {"offsets": {1: 10}}, {0: 900, 1: 10, 2: 60}),
    # 5. a shift moves every partition by N
    ("shift", {"shift": -50}, {0: 850, 1: 400, 2: 10}),
]


@pytest.mark.parametrize("kind, given, expected", RESOLVE_CASES, ids=[f"case{i + 1}" for i in range(len(RESOLVE_CASES))])
def test_resolve_target(kind, given, expected):
    assert resolve_target(kind, current=CURRENT, watermarks=MARKS, **given) == expected


def test_a_partition_without_offset_or_target_starts_at_its_low_watermark():
    # 6. partition 2 has no stored offset (the topic grew) and the target does not name it
    assert resolve_target("offsets", current={0: 900}, watermarks=MARKS, offsets={1: 5}) == {0: 900, 1: 5, 2: 50}


ERROR_CASES = [
    # 7. a partition the topic lacks
    ("offsets", {"offsets": {7: 10}}, "partition 7: the topic has no such partition (it has 3)"),
    # 8. empty explicit offsets, zero shift, a batch target without a batch, an unknown kind
    ("offsets", {"offsets": {}}, "explicit offsets name no partition"),
    ("shift", {"shift": 0}, "a shift needs a number of messages other than 0"),
    ("batch", {}, "a batch target needs the offsets of a batch"),
    ("yesterday", {}, "unknown target kind 'yesterday'"),
]


@pytest.mark.parametrize("kind, given, message", ERROR_CASES, ids=[f"case{i + 7}" for i in range(len(ERROR_CASES))])
def test_resolve_target_errors(kind, given, message):
    with pytest.raises(TargetError, match=re.escape(message)):
        resolve_target(kind, current=CURRENT, watermarks=MARKS, **given)


def test_out_of_range_targets_are_hard_errors_naming_partition_and_why():
    # 9. below the low watermark (deleted) and above the high one (does not exist): never clamped
    problems = check_target({0: 40, 1: 501, 2: 55}, MARKS)
    assert problems == [
        "partition 0: target 40 is below the low watermark 100: the 60 messages before it were deleted by retention "
        "and cannot be re-read",
        "partition 1: target 501 is above the high watermark 500: that position does not exist yet",
    ]
    assert check_target({0: 100, 1: 500, 2: 50}, MARKS) == []  # both ends are valid positions


def test_preview_counts_reprocessed_and_skipped_messages_and_replay_time():
    # 10. rewinding 0 by 200 and 1 by 50, moving 2 forward by... nothing; replay at 25 records/s
    p = preview({0: 700, 1: 400, 2: 60}, CURRENT, MARKS, rate_per_s=25.0)
    assert [(r.partition, r.current, r.target, r.reprocess) for r in p.rows] == [(0, 900, 700, 200), (1, 450, 400, 50), (2, 60, 60, 0)]
    assert p.reprocess == 250 and p.skipped == 0 and p.replay_s == 10.0
    # 11. jumping forward skips messages (shown, not hidden); nothing to replay
    forward = preview({0: 1_000, 1: 500, 2: 60}, CURRENT, MARKS, rate_per_s=25.0)
    assert forward.skipped == 150 and forward.reprocess == 0 and forward.replay_s == 0.0
    # 12. unknown rate: the replay time is unknown, not 0
    assert preview({0: 700, 1: 450, 2: 60}, CURRENT, MARKS, rate_per_s=None).replay_s is None


def test_processing_rate_from_recent_batches():
    # 13. records of all but the first batch over the time they span
    assert processing_rate([(0, None), (10_000, 100), (20_000, 300)]) == 20.0
    # 14. too few batches or no records: unknown
    assert processing_rate([(0, 5)]) is None
    assert processing_rate([(0, None), (10_000, 0)]) is None
