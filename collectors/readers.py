"""Store readers and the watermark reader: they read, they never evaluate or write the database."""
from __future__ import annotations

from dataclasses import dataclass, field

from streamoffsets.hbase import HBaseOffsetStore
from streamoffsets.kafka import KafkaWatermarkReader, WatermarkResult
from streamoffsets.types import BatchOffsets, PipelineKey, RowProblem


@dataclass
class StoreReading:
    pipelines: list[PipelineKey] = field(default_factory=list)
    # New batches per pipeline (batch time > the position given), oldest first.
    batches: dict[PipelineKey, list[BatchOffsets]] = field(default_factory=dict)
    problems: list[RowProblem] = field(default_factory=list)


def read_hbase_store(
    url: str, positions: dict[PipelineKey, int], max_batches: int, timeout_ms: int
) -> StoreReading:
    """Discover the pipelines in an HBase table and read each one's batches after its position."""
    reading = StoreReading()
    with HBaseOffsetStore.from_url(url, timeout_ms=timeout_ms) as store:
        reading.pipelines, reading.problems = store.list_pipelines()
        for key in reading.pipelines:
            start = positions.get(key, -1) + 1
            page = store.history(key.topic, key.group, start_ms=start, limit=max_batches)
            reading.batches[key] = page.batches
            reading.problems.extend(page.problems)
    return reading


def read_watermarks(bootstrap: str, topics: list[str], timeout_s: float) -> WatermarkResult:
    return KafkaWatermarkReader(bootstrap, timeout_s=timeout_s).watermarks(sorted(set(topics)))
