"""Where a job starts: stored offsets reconciled with the topic's partitions and watermarks.

This is the HBase pattern's decision (see BACKGROUND.md): no stored row means a first start
from earliest; partitions the row lacks start from earliest; otherwise every partition starts
from the row. An out-of-range stored offset is clamped to the watermark and the clamp is
reported in `decisions` (never silent). The result is also valid `startingOffsets` JSON for
Spark's official Kafka source.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from streamoffsets.types import BatchOffsets, Watermarks


@dataclass
class StartPlan:
    topic: str
    offsets: dict[int, int]
    # One line per non-obvious decision, in words, for logs and the dashboard.
    decisions: list[str] = field(default_factory=list)
    first_start: bool = False
    new_partitions: list[int] = field(default_factory=list)
    vanished_partitions: list[int] = field(default_factory=list)

    def spark_starting_offsets(self) -> str:
        return spark_starting_offsets_json(self.topic, self.offsets)


def spark_starting_offsets_json(topic: str, offsets: dict[int, int]) -> str:
    """`{"topic": {"0": 23, ...}}` as Spark's Kafka source expects (partition ids as strings)."""
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(offsets.items())}})


def resolve_start(topic: str, stored: BatchOffsets | None, watermarks: dict[int, Watermarks]) -> StartPlan:
    if stored is None:
        plan = StartPlan(topic, {p: w.low for p, w in watermarks.items()}, first_start=True)
        plan.decisions.append("no stored offsets: every partition starts from earliest")
        return plan
    plan = StartPlan(topic, {})
    for p, w in sorted(watermarks.items()):
        if p not in stored.offsets:
            plan.offsets[p] = w.low
            plan.new_partitions.append(p)
            plan.decisions.append(f"partition {p} is new (not in the stored batch): starts from earliest {w.low}")
            continue
        offset = stored.offsets[p]
        if offset < w.low:
            plan.decisions.append(
                f"partition {p}: stored offset {offset} is below the low watermark {w.low}; "
                f"clamped to {w.low}: {w.low - offset} messages were deleted before being processed"
            )
            offset = w.low
        elif offset > w.high:
            plan.decisions.append(
                f"partition {p}: stored offset {offset} is above the high watermark {w.high}; clamped to {w.high}"
            )
            offset = w.high
        plan.offsets[p] = offset
    plan.vanished_partitions = sorted(set(stored.offsets) - set(watermarks))
    for p in plan.vanished_partitions:
        plan.decisions.append(f"partition {p} is stored but no longer exists in the topic: ignored")
    return plan
