"""Plain values shared by the stores, the job, the collectors and the dashboard."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class PipelineKey:
    """A streaming job's position in a store is kept per (topic, consumer group)."""

    topic: str
    group: str


@dataclass(frozen=True)
class Watermarks:
    """A partition's low (earliest still on disk) and high (next to be written) offsets."""

    partition: int
    low: int
    high: int


@dataclass(frozen=True)
class BatchOffsets:
    """The offsets saved after one batch: partition -> next offset to read (the batch's until offset).

    `batch_id` is set by stores that number batches (Spark checkpoints). `committed` is False
    for a checkpoint batch that was planned (offsets/N written) but not committed (no commits/N).
    `time_observed` is True when the store holds no write time and `batch_time_ms` is when the
    reader looked (a Kafka group committed without our metadata): a later reading with the same
    offsets is then no sign that anything was written.
    """

    topic: str
    group: str
    batch_time_ms: int
    offsets: dict[int, int] = field(default_factory=dict)
    batch_id: int | None = None
    committed: bool = True
    time_observed: bool = field(default=False, compare=False)
    # When each partition was last written, by the store's clock (epoch ms), where the store
    # records it per partition (ZooKeeper znode mtimes, a Kafka group commit's batch-time
    # metadata); None where it does not. Read by the partition rules (streamoffsets.
    # partition_rules) to tell a stopped partition from a stalled one; not part of equality.
    written_ms: dict[int, int] | None = field(default=None, compare=False)

    @property
    def key(self) -> PipelineKey:
        return PipelineKey(self.topic, self.group)


@dataclass(frozen=True)
class RowProblem:
    """A stored record that could not be read; kept so it can be shown, never silently dropped."""

    store: str
    key: str
    problem: str

    def __str__(self) -> str:
        return f"{self.store}: {self.key!r}: {self.problem}"


@dataclass
class HistoryPage:
    """Batches read from a store in key order, plus the rows that were skipped and why."""

    batches: list[BatchOffsets] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)
    # True when the page stopped at the caller's limit: more rows may follow.
    truncated: bool = False
