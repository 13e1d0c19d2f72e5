"""Where a job starts (streamoffsets.restart), table-driven: each case says why."""
from __future__ import annotations

import json

import pytest

from streamoffsets.restart import resolve_start, spark_starting_offsets_json
from streamoffsets.types import BatchOffsets, Watermarks


def wm(*triples):
    return {p: Watermarks(p, low, high) for p, low, high in triples}


CASES = [
    # 1. No stored row: a first start reads every partition from earliest.
    (None, wm((0, 0, 10), (1, 5, 9)), {0: 0, 1: 5}, True, [], []),
    # 2. Stored row covers every partition: start exactly there.
    ({0: 7, 1: 8}, wm((0, 0, 10), (1, 5, 9)), {0: 7, 1: 8}, False, [], []),
    # 3. The topic grew: the new partition starts from earliest, the others from the row.
    ({0: 7}, wm((0, 0, 10), (1, 2, 9)), {0: 7, 1: 2}, False, [1], []),
    # 4. A stored partition no longer exists: reported, not fatal.
    ({0: 7, 5: 3}, wm((0, 0, 10)), {0: 7}, False, [], [5]),
    # 5. Low out-of-range (retention deleted data): clamped to low, never silently.
    ({0: 2}, wm((0, 4, 10)), {0: 4}, False, [], []),
    # 6. High out-of-range (topic re-created): clamped to high.
    ({0: 50}, wm((0, 0, 10)), {0: 10}, False, [], []),
]


@pytest.mark.parametrize("stored, marks, expected, first, new, vanished", CASES, ids=[f"case{i+1}" for i in range(len(CASES))])
def test_resolve_start(stored, marks, expected, first, new, vanished):
    batch = None if stored is None else BatchOffsets("t", "g", 1, stored)
    plan = resolve_start("t", batch, marks)
    assert plan.offsets == expected
    assert plan.first_start is first
    assert plan.new_partitions == new
    assert plan.vanished_partitions == vanished
    assert json.loads(plan.spark_starting_offsets()) == {"t": {str(p): o for p, o in expected.items()}}


def test_clamps_are_explained_with_messages_lost():
    plan = resolve_start("t", BatchOffsets("t", "g", 1, {0: 2, 1: 50}), wm((0, 4, 10), (1, 0, 10)))
    assert any("partition 0" in d and "2 messages were deleted" in d for d in plan.decisions)
    assert any("partition 1" in d and "above the high watermark 10" in d for d in plan.decisions)


def test_spark_json_sorts_partitions_as_strings():
    assert spark_starting_offsets_json("orders", {10: 1, 2: 3}) == '{"orders": {"2": 3, "10": 1}}'
