"""Store readers and the watermark reader: they read, they never evaluate or write the database."""
from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field

from streamoffsets.errors import OffsetStoreError, StoreUnreachable
from streamoffsets.kafka import KafkaWatermarkReader, WatermarkResult
from streamoffsets.store import open_store
from streamoffsets.types import BatchOffsets, PipelineKey, RowProblem


@dataclass
class StoreReading:
    pipelines: list[PipelineKey] = field(default_factory=list)
    # New batches per pipeline (batch time > the position given), oldest first.
    batches: dict[PipelineKey, list[BatchOffsets]] = field(default_factory=dict)
    problems: list[RowProblem] = field(default_factory=list)
    # False for stores that keep only the current offsets: each reading is then a sample.
    keeps_history: bool = True
    # Pipelines whose read stopped at the per-cycle limit: their history import goes on next cycle.
    more: set[PipelineKey] = field(default_factory=set)


def read_store(
    url: str, positions: dict[PipelineKey, int], max_batches: int, timeout_s: float, kafka_config: dict | None = None
) -> StoreReading:
    """Discover the pipelines in a store and read each one's batches after its position."""
    with closing(open_store(url, timeout_s=timeout_s, kafka_config=kafka_config)) as store:
        reading = StoreReading(keeps_history=store.keeps_history)
        if hasattr(store, "snapshot"):
            # Stores that only hold current offsets can give every pipeline's in one pass.
            current, reading.problems = store.snapshot()
            reading.pipelines = sorted(current)
            for key, batch in current.items():
                reading.batches[key] = [batch] if batch.batch_time_ms > positions.get(key, -1) else []
            return reading
        reading.pipelines, reading.problems = store.list_pipelines()
        for key in reading.pipelines:
            try:
                page = store.history(key.topic, key.group, start_ms=positions.get(key, -1) + 1, limit=max_batches)
            except StoreUnreachable:
                raise  # the whole source is down: recorded as such by the caller
            except OffsetStoreError as exc:
                # One unreadable pipeline is shown as a problem; the others are still read.
                reading.problems.append(RowProblem(exc.store, exc.key, exc.problem))
                continue
            reading.batches[key] = page.batches
            if page.truncated:
                reading.more.add(key)
            reading.problems.extend(page.problems)
    return reading


def read_watermarks(
    bootstrap: str, topics: list[str], timeout_s: float, chunk_size: int = 500, config: dict | None = None
) -> WatermarkResult:
    reader = KafkaWatermarkReader(bootstrap, timeout_s=timeout_s, chunk_size=chunk_size, config=config)
    return reader.watermarks(sorted(set(topics)))


def read_record_timestamps(
    bootstrap: str, positions: dict[tuple[str, int], int], timeout_s: float, config: dict | None = None
) -> dict[tuple[str, int], int]:
    return KafkaWatermarkReader(bootstrap, timeout_s=timeout_s, config=config).record_timestamps(positions)
