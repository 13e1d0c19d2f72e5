"""Plain values shared by the stores, the job, the collectors and the dashboard."""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
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


MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64; the dashboard keeps them in bigint columns
_PARTITION_TEXT = re.compile(r"[0-9]{1,10}", re.ASCII)  # int() also reads '٣', '+1', ' 1', '1_0': not here


class OffsetsError(ValueError):
    """An offset map that is not partition id -> non-negative int64; the message says which entry."""


class Offsets(Mapping[int, int]):
    """Partition -> offset, as the code uses it: int keys, in partition order, every offset a
    non-negative int64. JSON (the JSONFields, the API) has text keys: `from_json` / `to_json`
    convert, so callers do not convert the keys by hand."""

    __slots__ = ("_by_partition",)

    def __init__(self, offsets: Mapping[int, int] | None = None):
        checked = {}
        for partition, offset in (offsets or {}).items():
            if type(partition) is not int or partition < 0:
                raise OffsetsError(f"partition {partition!r} is not a partition id (a non-negative integer)")
            checked[partition] = _offset(partition, offset)
        self._by_partition = dict(sorted(checked.items()))

    @classmethod
    def from_json(cls, data: Mapping[str, int] | None) -> Offsets:
        """{"0": 120, "1": 98} (keys: partition ids in ASCII digits; '007' is partition 7)."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise OffsetsError(f"{data!r:.60} is not a map of partition id to offset")
        checked = {}
        for key, offset in data.items():
            if not isinstance(key, str) or not _PARTITION_TEXT.fullmatch(key):
                raise OffsetsError(f"partition {key!r:.40} is not a partition id (ASCII digits)")
            if int(key) in checked:
                raise OffsetsError(f"partition {int(key)} is given twice")
            checked[int(key)] = _offset(key, offset)
        return cls(checked)

    def to_json(self) -> dict[str, int]:
        """{"0": 120, "1": 98}, in partition order: what the JSONFields hold and the API sends."""
        return {str(partition): offset for partition, offset in self._by_partition.items()}

    def __getitem__(self, partition: int) -> int:
        return self._by_partition[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_partition)

    def __len__(self) -> int:
        return len(self._by_partition)

    def __repr__(self) -> str:
        return f"Offsets({self._by_partition!r})"


def _offset(partition, offset) -> int:
    if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:  # bool is not an offset
        raise OffsetsError(f"partition {partition}: offset {offset!r:.40} is not an integer from 0 to {MAX_OFFSET}")
    return offset
