"""Rewind targets, as pure functions: where a rewind sends a job, whether that is possible, and
what it costs (no I/O; the dashboard and the job library both call these).

A target is resolved against the job's current committed offsets and the topic's watermarks:
- `batch`: the offsets a past batch saved (partitions the batch lacks keep their current offset);
- `time`: the offsets of the newest batch at or before a point in time (from the batch history);
- `earliest` / `latest`: every partition's low / high watermark;
- `offsets`: explicit offsets for some partitions (the others keep theirs);
- `shift`: every partition moved by N (negative: back, re-read N messages per partition).
A target outside [low, high] is a hard error naming the partition and why, never clamped: a rewind
is a deliberate act, and moving it silently would replay something else than what was approved.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TargetKind = Literal["batch", "time", "earliest", "latest", "offsets", "shift"]
KINDS: tuple[TargetKind, ...] = ("batch", "time", "earliest", "latest", "offsets", "shift")


class TargetError(ValueError):
    """A target that cannot be honoured; `problems` has one sentence per partition or reason."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def resolve_target(
    kind: TargetKind, *, current: dict[int, int], watermarks: dict[int, tuple[int, int]],
    batch_offsets: dict[int, int] | None = None, offsets: dict[int, int] | None = None, shift: int | None = None,
) -> dict[int, int]:
    """The target offset of every partition of the topic. Rules:
    1. `batch`/`time`: the batch's offsets; partitions it lacks keep their current offset;
    2. `earliest`/`latest`: the low/high watermark of every partition;
    3. `offsets`: the explicit ones; others keep their current offset;
    4. `shift`: current + N for every partition with a current offset;
    5. a partition of the topic with neither a current offset nor a target: its low watermark
       (where a new job would start);
    6. a partition the target names that the topic does not have is an error.
    """
    if kind in ("batch", "time"):
        if batch_offsets is None:
            raise TargetError([f"a {kind} target needs the offsets of a batch"])
        chosen = dict(batch_offsets)
    elif kind == "earliest":
        chosen = {p: low for p, (low, _) in watermarks.items()}
    elif kind == "latest":
        chosen = {p: high for p, (_, high) in watermarks.items()}
    elif kind == "offsets":
        if not offsets:
            raise TargetError(["explicit offsets name no partition"])
        chosen = dict(offsets)
    elif kind == "shift":
        if shift is None or shift == 0:
            raise TargetError(["a shift needs a number of messages other than 0"])
        chosen = {p: c + shift for p, c in current.items()}
    else:
        raise TargetError([f"unknown target kind {kind!r} (one of {', '.join(KINDS)})"])
    unknown = sorted(set(chosen) - set(watermarks))
    if unknown:
        raise TargetError([f"partition {p}: the topic has no such partition (it has {len(watermarks)})" for p in unknown])
    return {p: chosen.get(p, current.get(p, watermarks[p][0])) for p in sorted(watermarks)}


def check_target(target: dict[int, int], watermarks: dict[int, tuple[int, int]]) -> list[str]:
    """One sentence per partition whose target is outside [low, high]; empty when all are fine."""
    problems = []
    for p, offset in sorted(target.items()):
        low, high = watermarks[p]
        if offset < low:
            problems.append(f"partition {p}: target {offset:,} is below the low watermark {low:,}: the "
                            f"{low - offset:,} messages before it were deleted by retention and cannot be re-read")
        elif offset > high:
            problems.append(f"partition {p}: target {offset:,} is above the high watermark {high:,}: that position "
                            "does not exist yet")
    return problems


@dataclass(frozen=True)
class PreviewRow:
    partition: int
    current: int | None
    target: int
    low: int
    high: int

    @property
    def reprocess(self) -> int:
        """Messages read again (positive) or skipped (negative) by moving from current to target."""
        return (self.current if self.current is not None else self.target) - self.target

    def as_dict(self) -> dict:
        return {"partition": self.partition, "current": self.current, "target": self.target, "low": self.low,
                "high": self.high, "reprocess": self.reprocess}


@dataclass(frozen=True)
class Preview:
    rows: list[PreviewRow]
    # Seconds to read back what is re-read, at the job's recent rate; None when the rate is unknown.
    replay_s: float | None

    @property
    def reprocess(self) -> int:
        return sum(r.reprocess for r in self.rows if r.reprocess > 0)

    @property
    def skipped(self) -> int:
        return -sum(r.reprocess for r in self.rows if r.reprocess < 0)

    def as_dict(self) -> dict:
        return {"rows": [r.as_dict() for r in self.rows], "reprocess": self.reprocess, "skipped": self.skipped,
                "replay_s": self.replay_s}


def preview(
    target: dict[int, int], current: dict[int, int], watermarks: dict[int, tuple[int, int]],
    rate_per_s: float | None,
) -> Preview:
    """Per partition current -> target, messages to re-read (or skip), and the replay time at the
    job's recent processing rate (records per second over its recent batches)."""
    rows = [PreviewRow(p, current.get(p), offset, *watermarks[p]) for p, offset in sorted(target.items())]
    reprocess = sum(r.reprocess for r in rows if r.reprocess > 0)
    replay = reprocess / rate_per_s if rate_per_s and rate_per_s > 0 else (0.0 if reprocess == 0 else None)
    return Preview(rows, replay)


def processing_rate(batches: list[tuple[int, int | None]]) -> float | None:
    """Records per second from recent batches [(batch time ms, records)], oldest first: the records
    of all but the first over the time they span. None with fewer than two batches or no records."""
    if len(batches) < 2:
        return None
    span_s = (batches[-1][0] - batches[0][0]) / 1000
    records = sum(r for _, r in batches[1:] if r)
    return records / span_s if span_s > 0 and records > 0 else None
