"""Where a job starts (streamoffsets.restart), table-driven: each numbered case says why.

Tansu cannot move a low watermark above 0 (delete_records crashes it) nor add partitions, so
those conditions are produced here at the watermark seam; tests/integration/test_restart_kafka.py runs the
same decisions against real brokers (Tansu, and a full Kafka when KAFKA_BOOTSTRAP is set).
"""
from __future__ import annotations

import json

import pytest

from streamoffsets.restart import StartRefused, resolve_start, spark_starting_offsets_json
from streamoffsets.types import BatchOffsets, Watermarks


def wm(*triples):
    return {p: Watermarks(p, low, high) for p, low, high in triples}


CASES = [
    # (stored, watermarks, on_missing, out_of_range) -> (offsets, first, new, vanished, clamped partitions)
    # 1. No stored offsets, policy earliest: every partition from its low watermark.
    (None, wm((0, 0, 10), (1, 5, 9)), "earliest", "clamp", {0: 0, 1: 5}, True, [], [], []),
    # 2. No stored offsets, policy latest: every partition from its high watermark.
    (None, wm((0, 0, 10), (1, 5, 9)), "latest", "clamp", {0: 10, 1: 9}, True, [], [], []),
    # 3. Stored offsets cover every partition and are in range: start exactly there.
    ({0: 7, 1: 8}, wm((0, 0, 10), (1, 5, 9)), "earliest", "clamp", {0: 7, 1: 8}, False, [], [], []),
    # 4. Offsets equal to the watermarks are in range (nothing to read / nothing lost).
    ({0: 0, 1: 9}, wm((0, 0, 10), (1, 5, 9)), "earliest", "fail", {0: 0, 1: 9}, False, [], [], []),
    # 5. The topic grew: the new partition starts from earliest, the others from the store.
    ({0: 7}, wm((0, 0, 10), (1, 2, 9)), "earliest", "clamp", {0: 7, 1: 2}, False, [1], [], []),
    # 6. A stored partition no longer exists: reported, not fatal.
    ({0: 7, 5: 3}, wm((0, 0, 10)), "earliest", "fail", {0: 7}, False, [], [5], []),
    # 7. Low out-of-range (retention deleted data), clamp: to the low watermark.
    ({0: 2}, wm((0, 4, 10)), "earliest", "clamp", {0: 4}, False, [], [], [0]),
    # 8. High out-of-range (topic re-created), clamp: to the high watermark.
    ({0: 50}, wm((0, 0, 10)), "earliest", "clamp", {0: 10}, False, [], [], [0]),
    # 9. Both kinds at once, on different partitions, with a healthy third.
    ({0: 1, 1: 99, 2: 5}, wm((0, 3, 10), (1, 0, 20), (2, 0, 9)), "earliest", "clamp", {0: 3, 1: 20, 2: 5}, False, [], [], [0, 1]),
]


@pytest.mark.parametrize(
    "stored, marks, on_missing, policy, expected, first, new, vanished, clamped",
    CASES, ids=[f"case{i + 1}" for i in range(len(CASES))],
)
def test_resolve_start(stored, marks, on_missing, policy, expected, first, new, vanished, clamped):
    batch = None if stored is None else BatchOffsets("t", "g", 1, stored)
    plan = resolve_start("t", batch, marks, "g", on_missing, policy)
    assert plan.offsets == expected
    assert plan.first_start is first
    assert plan.new_partitions == new
    assert plan.vanished_partitions == vanished
    assert [c.partition for c in plan.clamps] == clamped
    assert json.loads(plan.spark_starting_offsets()) == {"t": {str(p): o for p, o in expected.items()}}


REFUSALS = [
    # 1. First start refused by policy.
    (None, wm((0, 0, 10)), "fail", "clamp", ["no stored offsets"]),
    # 2. Low out-of-range refused: names partition, stored offset and both watermarks.
    ({0: 2, 1: 5}, wm((0, 4, 10), (1, 0, 9)), "earliest", "fail",
     ["partition 0: stored offset 2 is below the low watermark 4 (high 10)"]),
    # 3. Every offending partition is named, not just the first.
    ({0: 2, 1: 50}, wm((0, 4, 10), (1, 0, 9)), "earliest", "fail",
     ["partition 0: stored offset 2 is below", "partition 1: stored offset 50 is above the high watermark 9 (low 0)"]),
]


@pytest.mark.parametrize("stored, marks, on_missing, policy, fragments", REFUSALS,
                         ids=[f"refusal{i + 1}" for i in range(len(REFUSALS))])
def test_refusals_name_every_partition(stored, marks, on_missing, policy, fragments):
    batch = None if stored is None else BatchOffsets("t", "g", 1, stored)
    with pytest.raises(StartRefused) as err:
        resolve_start("t", batch, marks, "g", on_missing, policy)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_clamps_are_reported_with_messages_lost():
    plan = resolve_start("t", BatchOffsets("t", "g", 1, {0: 2, 1: 50}), wm((0, 4, 10), (1, 0, 10)))
    low, high = plan.clamps
    assert (low.kind, low.stored, low.started_at, low.messages_lost) == ("low", 2, 4, 2)
    assert (high.kind, high.stored, high.started_at, high.messages_lost) == ("high", 50, 10, 0)
    assert any("2 messages were deleted by retention" in d for d in plan.decisions)
    report = plan.report()
    assert report["offsets"] == {"0": 4, "1": 10} and report["stored"] == {"0": 2, "1": 50}
    assert json.loads(json.dumps(report))["clamps"][0]["messages_lost"] == 2


def test_spark_json_sorts_partitions_as_strings():
    assert spark_starting_offsets_json("orders", {10: 1, 2: 3}) == '{"orders": {"2": 3, "10": 1}}'
