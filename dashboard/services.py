"""Writes: everything that changes the database goes through these functions."""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from collectors.readers import StoreReading
from dashboard.models import Batch, Cluster, LagSample, Pipeline, SourceHealth, Store, StoreProblem, WatermarkSample
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import BatchOffsets, RowProblem, Watermarks


def cluster_get_or_create(*, name: str, bootstrap_servers: str) -> Cluster:
    cluster, _ = Cluster.objects.update_or_create(name=name, defaults={"bootstrap_servers": bootstrap_servers})
    return cluster


def store_get_or_create(*, name: str, kind: str, url: str, cluster: Cluster) -> Store:
    store, _ = Store.objects.update_or_create(name=name, defaults={"kind": kind, "url": url, "cluster": cluster})
    return store


def source_health_record(
    *, source: str, label: str, started_at: datetime, duration_ms: int, error: str | None = None
) -> SourceHealth:
    """Record one poll of a source; an error marks it unreachable until the next success."""
    health, _ = SourceHealth.objects.get_or_create(source=source, defaults={"label": label})
    health.label = label
    health.last_attempt_at = started_at
    health.last_duration_ms = duration_ms
    if error is None:
        health.last_success_at = started_at
        health.consecutive_failures = 0
    else:
        health.last_error = error[:5000]
        health.last_error_at = started_at
        health.consecutive_failures += 1
    health.save()
    return health


def _records_between(previous: dict[str, int] | None, current: dict[str, int]) -> int | None:
    """Records processed by a batch: the sum of per-partition advances; None when unknowable."""
    if previous is None:
        return None
    total = 0
    for partition, offset in current.items():
        before = previous.get(partition)
        if before is None or offset < before:
            return None  # a new partition or a rewind: the batch's start is not known
        total += offset - before
    return total


def _as_json_offsets(batch: BatchOffsets) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(batch.offsets.items())}


@transaction.atomic
def store_reading_record(*, store: Store, reading: StoreReading) -> int:
    """Register discovered pipelines, append their new batches and keep row problems visible.

    Returns the number of batches added. Re-recording the same batches adds nothing.
    """
    added = 0
    pipelines = {}
    for key in reading.pipelines:
        pipeline, _ = Pipeline.objects.get_or_create(store=store, topic=key.topic, group=key.group)
        pipelines[key] = pipeline
    for key, batches in reading.batches.items():
        if batches:
            added += _batches_append(pipelines[key], batches, reading.keeps_history)
    _problems_record(store, reading.problems)
    return added


def _batches_append(pipeline: Pipeline, batches: list[BatchOffsets], keeps_history: bool) -> int:
    last = pipeline.batches.order_by("-batch_time_ms").only("offsets", "batch_time_ms").first()
    previous = last.offsets if last else None
    rows = []
    for batch in sorted(batches, key=lambda b: b.batch_time_ms):
        if last is not None and batch.batch_time_ms <= last.batch_time_ms:
            if batch.committed:  # a planned checkpoint batch re-read after Spark committed it
                pipeline.batches.filter(batch_time_ms=batch.batch_time_ms, committed=False).update(committed=True)
            continue
        offsets = _as_json_offsets(batch)
        if not keeps_history and offsets == previous:
            continue  # a store without history was sampled again and had not moved
        rows.append(
            Batch(
                pipeline=pipeline,
                batch_time_ms=batch.batch_time_ms,
                offsets=offsets,
                records=_records_between(previous, offsets),
                batch_id=batch.batch_id,
                committed=batch.committed,
            )
        )
        previous = offsets
    Batch.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    if rows:
        Pipeline.objects.filter(pk=pipeline.pk).update(last_batch_ms=rows[-1].batch_time_ms)
    return len(rows)


def _problems_record(store: Store, problems: list[RowProblem]) -> None:
    for problem in problems:
        updated = StoreProblem.objects.filter(
            store=store, key=problem.key[:500], problem=problem.problem[:1000]
        ).update(occurrences=F("occurrences") + 1, last_seen_at=timezone.now())
        if not updated:
            StoreProblem.objects.create(store=store, key=problem.key[:500], problem=problem.problem[:1000])


def lag_partitions(committed: dict[str, int] | None, watermarks: dict[int, Watermarks]) -> dict[str, dict]:
    """Per-partition lag = high watermark - committed; partitions missing in the store have none."""
    committed = committed or {}
    result = {}
    for partition, wm in sorted(watermarks.items()):
        offset = committed.get(str(partition))
        result[str(partition)] = {
            "committed": offset,
            "low": wm.low,
            "high": wm.high,
            "lag": None if offset is None else wm.high - offset,
        }
    for partition, offset in committed.items():
        if int(partition) not in watermarks:
            result[partition] = {"committed": offset, "low": None, "high": None, "lag": None}
    return result


@transaction.atomic
def watermarks_record(*, cluster: Cluster, result: WatermarkResult, sampled_at: datetime) -> int:
    """Store the cluster's watermarks and one lag sample per pipeline reading its topics."""
    WatermarkSample.objects.bulk_create(
        [
            WatermarkSample(cluster=cluster, topic=topic, partition=p, low=w.low, high=w.high, sampled_at=sampled_at)
            for topic, parts in result.by_topic.items()
            for p, w in parts.items()
        ],
        batch_size=1000,
    )
    samples = []
    pipelines = Pipeline.objects.filter(store__cluster=cluster, topic__in=list(result.by_topic))
    for pipeline in pipelines:
        last = pipeline.batches.order_by("-batch_time_ms").only("offsets").first()
        parts = lag_partitions(last.offsets if last else None, result.by_topic[pipeline.topic])
        total = sum(max(0, v["lag"]) for v in parts.values() if v["lag"] is not None)
        samples.append(LagSample(pipeline=pipeline, sampled_at=sampled_at, total_lag=total, partitions=parts))
    LagSample.objects.bulk_create(samples)
    return len(samples)
