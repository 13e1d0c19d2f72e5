"""Where a job starts: stored offsets reconciled with the topic's partitions and watermarks.

The decision (BACKGROUND.md, the HBase pattern generalised to every store):
- no stored offsets: start from earliest, latest, or refuse (policy `on_missing`);
- partitions the store lacks (the topic grew): keep the stored ones, new ones from earliest;
- stored partitions that no longer exist: reported, ignored;
- a stored offset below the low watermark (data already deleted: low out-of-range) or above the
  high watermark (the position does not exist: high out-of-range): `clamp` to the watermark, as
  the paper's scheme does, or `fail`, naming each partition, its offset and the watermarks.
A clamp is never silent: it is in the plan's `clamps` (with the messages lost), its
`decisions` in words, and logged. The offsets are also valid `startingOffsets` JSON for
Spark's official Kafka source.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Callable, Literal

from streamoffsets.types import BatchOffsets, Watermarks

log = logging.getLogger("offsetwatch.restart")

OnMissing = Literal["earliest", "latest", "fail"]
OutOfRange = Literal["clamp", "fail"]


class StartRefused(Exception):
    """The policy says the job must not start; the message names every offending partition."""

    def __init__(self, topic: str, group: str, reasons: list[str]):
        self.topic, self.group, self.reasons = topic, group, reasons
        super().__init__(f"{topic}/{group}: refusing to start: " + "; ".join(reasons))


@dataclass(frozen=True)
class Clamp:
    partition: int
    stored: int
    low: int
    high: int
    started_at: int
    kind: Literal["low", "high"]
    # Low out-of-range: messages deleted by retention before being processed (= low - stored).
    messages_lost: int


@dataclass
class StartPlan:
    topic: str
    group: str
    offsets: dict[int, int]
    decisions: list[str] = field(default_factory=list)
    first_start: bool = False
    new_partitions: list[int] = field(default_factory=list)
    vanished_partitions: list[int] = field(default_factory=list)
    clamps: list[Clamp] = field(default_factory=list)
    stored: dict[int, int] | None = None

    def spark_starting_offsets(self) -> str:
        return spark_starting_offsets_json(self.topic, self.offsets)

    def report(self) -> dict:
        """The structured report a job logs and sends to the dashboard."""
        data = asdict(self)
        data["offsets"] = {str(p): o for p, o in sorted(self.offsets.items())}
        data["stored"] = None if self.stored is None else {str(p): o for p, o in sorted(self.stored.items())}
        return data


def spark_starting_offsets_json(topic: str, offsets: dict[int, int]) -> str:
    """`{"topic": {"0": 23, ...}}` as Spark's Kafka source expects (partition ids as strings)."""
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(offsets.items())}})


def resolve_start(
    topic: str,
    stored: BatchOffsets | None,
    watermarks: dict[int, Watermarks],
    group: str = "",
    on_missing: OnMissing = "earliest",
    out_of_range: OutOfRange = "clamp",
) -> StartPlan:
    """Pure: decide the starting offsets from what the store holds and the broker's watermarks."""
    group = group or (stored.group if stored else "")
    if stored is None:
        if on_missing == "fail":
            raise StartRefused(topic, group, ["no stored offsets and the policy for a first start is 'fail'"])
        pick = (lambda w: w.low) if on_missing == "earliest" else (lambda w: w.high)
        plan = StartPlan(topic, group, {p: pick(w) for p, w in sorted(watermarks.items())}, first_start=True)
        plan.decisions.append(f"no stored offsets: every partition starts from {on_missing}")
        return plan

    plan = StartPlan(topic, group, {}, stored=dict(stored.offsets))
    refusals: list[str] = []
    for p, w in sorted(watermarks.items()):
        if p not in stored.offsets:
            plan.offsets[p] = w.low
            plan.new_partitions.append(p)
            plan.decisions.append(f"partition {p} is new (not in the store): starts from earliest {w.low}")
            continue
        offset = stored.offsets[p]
        if w.low <= offset <= w.high:
            plan.offsets[p] = offset
            continue
        kind = "low" if offset < w.low else "high"
        target = w.low if kind == "low" else w.high
        lost = w.low - offset if kind == "low" else 0
        if kind == "low":
            why = (f"partition {p}: stored offset {offset} is below the low watermark {w.low} "
                   f"(high {w.high}): {lost} messages were deleted by retention before being processed")
        else:
            why = (f"partition {p}: stored offset {offset} is above the high watermark {w.high} "
                   f"(low {w.low}): that position does not exist")
        if out_of_range == "fail":
            refusals.append(why)
            continue
        plan.offsets[p] = target
        plan.clamps.append(Clamp(p, offset, w.low, w.high, target, kind, lost))
        plan.decisions.append(f"{why}; clamped to {target}")
    if refusals:
        raise StartRefused(topic, group, refusals)
    plan.vanished_partitions = sorted(set(stored.offsets) - set(watermarks))
    for p in plan.vanished_partitions:
        plan.decisions.append(f"partition {p} is stored (offset {stored.offsets[p]}) but no longer exists in the topic: ignored")
    return plan


def restart(
    store,
    topic: str,
    group: str,
    watermarks: Callable[[str], dict[int, Watermarks]],
    on_missing: OnMissing = "earliest",
    out_of_range: OutOfRange = "clamp",
) -> StartPlan:
    """One call for a job: load its newest stored offsets, fetch the watermarks, decide, log.

    `watermarks` is the seam to the broker (e.g. `KafkaWatermarkReader(...).topic_watermarks`).
    """
    plan = resolve_start(topic, store.load_latest(topic, group), watermarks(topic), group, on_missing, out_of_range)
    for decision in plan.decisions:
        level = logging.WARNING if plan.clamps or plan.vanished_partitions else logging.INFO
        log.log(level, "%s/%s start: %s", topic, group, decision)
    log.info("%s/%s starts from %s (report: %s)", topic, group, plan.spark_starting_offsets(), json.dumps(plan.report()))
    return plan
