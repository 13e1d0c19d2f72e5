"""The history the evaluation reads, in the shapes the rules take: a pipeline's window of lag
samples and a topic's watermark samples, built once per cycle and unpacked only where a rule
reads them (dashboard.monitoring.evaluation, every pipeline at every cycle)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from offsetwatch.lib.packing import unpack_watermarks


class WindowSample(NamedTuple):
    """A stored LagSample as the evaluation reads it."""

    sampled_at: datetime
    at_s: float  # sampled_at in epoch seconds
    committed: dict[int, int]
    last_batch_ms: int | None
    total_lag: int
    went_back: bool | None = None  # evaluation.Sample.went_back, as stored


@dataclass(slots=True)
class NewSample:
    """A pipeline's lag sample of this cycle, before it is stored: the evaluation reads it as the
    window's newest and sets `went_back` (against the sample before it); then it is stored."""

    total_lag: int
    last_batch_ms: int | None
    went_back: bool | None = None


class TopicSeries:
    """A topic's watermark history in the shapes the rules take, built once per topic per cycle.
    Each part is built when a rule first asks for it, then kept for the topic's other pipelines:
    a sample's highs for the window's samples only, a partition's series only for a lagging
    partition without its record's time (lag in seconds) or one whose low watermark moved
    (retention); a caught-up partition whose low watermark stands still needs neither."""

    def __init__(self, history: dict[datetime, PackedMarks], epoch: dict[datetime, float] | None = None):
        epoch = {} if epoch is None else epoch
        times = sorted(history)
        self._items = [(epoch[at] if at in epoch else at.timestamp(), history[at]) for at in times]
        self._history = history
        self._highs_at: dict[datetime, dict[int, int]] = {}
        self._highs: dict[int, list[tuple[float, int]]] = {}
        self._lows: dict[int, list[tuple[float, int]]] = {}
        self._low_moved: dict[int, bool] = {}
        self._ends_compared = False

    def highs_at(self, at: datetime) -> dict[int, int]:
        """partition -> high watermark of the sample at `at` (empty when there is none)."""
        highs = self._highs_at.get(at)
        if highs is None:
            packed = self._history.get(at)
            highs = self._highs_at[at] = {} if packed is None else {p: hi for p, (_, hi) in packed.marks().items()}
        return highs

    def highs(self, partition: int) -> list[tuple[float, int]]:
        """[(epoch s, high)] of the partition, oldest first."""
        series = self._highs.get(partition)
        if series is None:
            series = self._highs[partition] = [(t, marks[partition][1]) for t, marks in self._walk() if partition in marks]
        return series

    def lows(self, partition: int) -> list[tuple[float, int]]:
        """[(epoch s, low)] of the partition, oldest first."""
        series = self._lows.get(partition)
        if series is None:
            series = self._lows[partition] = [(t, marks[partition][0]) for t, marks in self._walk() if partition in marks]
        return series

    def low_moved(self, partition: int) -> bool:
        """Whether the partition's low watermark moved in the lookback (its first and last low
        differ): only then can it have a retention deadline (rule 2 of evaluation.retention_risk),
        so only then does it pay for the rates."""
        moved = self._low_moved.get(partition)
        if moved is None:
            if not self._ends_compared and self._items:
                # Every partition in the first and last samples at once (no walk): the usual case.
                self._ends_compared = True
                first, last = self._items[0][1].marks(), self._items[-1][1].marks()
                self._low_moved.update({p: first[p][0] != low for p, (low, _) in last.items() if p in first})
                moved = self._low_moved.get(partition)
            if moved is None:  # not in both: its own samples
                lows = self.lows(partition)
                moved = self._low_moved[partition] = bool(lows) and lows[0][1] != lows[-1][1]
        return moved

    def _walk(self):
        return ((t, packed.marks()) for t, packed in self._items)


class PackedMarks:
    """One WatermarkSample's packed columns, unpacked (partition -> (low, high)) when first read."""

    __slots__ = ("_packed", "_marks")

    def __init__(self, partitions: bytes, lows: bytes, highs: bytes):
        self._packed, self._marks = (partitions, lows, highs), None

    @classmethod
    def unpacked(cls, marks: dict[int, tuple[int, int]]) -> PackedMarks:
        """A sample already in hand (this cycle's watermarks)."""
        sample = cls.__new__(cls)
        sample._packed, sample._marks = None, marks
        return sample

    def marks(self) -> dict[int, tuple[int, int]]:
        if self._marks is None:
            self._marks = unpack_watermarks(*self._packed)
        return self._marks
