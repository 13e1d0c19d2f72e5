"""Recording what the collectors read: clusters and stores, source health, a store's batches
(history, lag samples, row problems) and a cluster's watermarks, then the evaluation
(dashboard.monitoring.evaluation)."""
from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from dashboard.alerting import lifecycle
from dashboard.models import (
    Batch,
    Cluster,
    LagSample,
    Pipeline,
    PipelineEvaluation,
    RewindRequest,
    SourceHealth,
    Store,
    StoreProblem,
    WatermarkSample,
)
from dashboard.monitoring import partition_writes, sample_partitions, storable
from dashboard.monitoring.evaluation import pipelines_evaluate
from dashboard.monitoring.history import NewSample
from dashboard.monitoring.selectors import Committed, committed_offsets, newest_batches
from offsetwatch.lib.packing import pack, pack_map, pack_partitions
from offsetwatch.lib.pgcopy import copy_rows
from offsetwatch.lib.pgupdate import values_update
from offsetwatch.lib.timefmt import ms_text
from streamoffsets import evaluation
from streamoffsets.kafka import WatermarkResult
from streamoffsets.stores.reading import StoreReading
from streamoffsets.types import BatchOffsets, PipelineKey, RowProblem

log = logging.getLogger(__name__)


def cluster_get_or_create(*, name: str, bootstrap_servers: str) -> Cluster:
    cluster, _ = Cluster.objects.update_or_create(name=name, defaults={"bootstrap_servers": bootstrap_servers})
    return cluster


def store_get_or_create(*, name: str, kind: str, url: str, cluster: Cluster) -> Store:
    store, _ = Store.objects.update_or_create(name=name, defaults={"kind": kind, "url": url, "cluster": cluster})
    return store


def source_health_record(
    *, source: str, label: str, started_at: datetime, duration_ms: int, error: str | None = None,
    warning: str = "", error_by: str = "source",
) -> SourceHealth:
    """Record one poll of a source; an error marks it failing until the next success. A warning
    (the poll worked, something it found needs telling) is kept until a poll without one.
    `error_by`: "source" (the server failed) or "collector" (the worker's time limit cut the poll)."""
    health, _ = SourceHealth.objects.get_or_create(source=source, defaults={"label": label})
    health.label = storable.stored_text(label, 300)
    health.last_attempt_at = started_at
    health.last_duration_ms = duration_ms
    if error is None:
        health.last_success_at = started_at
        health.consecutive_failures = 0
        health.warning = storable.stored_text(warning, 5000)
    else:
        health.last_error = storable.stored_text(error, 5000)
        health.last_error_at = started_at
        health.last_error_by = error_by
        health.consecutive_failures += 1
    health.save()
    return health


def _records_between(previous: dict[str, int] | None, current: dict[str, int]) -> int | None:
    """Records processed by a batch: the sum of per-partition advances; None when unknowable."""
    if previous is None:
        return None
    total = 0  # a sum of offsets up to 2^63-1 each may pass bigint: then unknown, not an error
    for partition, offset in current.items():
        before = previous.get(partition)
        if before is None or offset < before:
            return None  # a new partition or a rewind: the batch's start is not known
        total += offset - before
    return total if total <= storable.BIGINT_MAX else None


def _as_json_offsets(batch: BatchOffsets) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(batch.offsets.items())}


@transaction.atomic
def store_reading_record(*, store: Store, reading: StoreReading, now_ms: int | None = None) -> int:
    """Register discovered pipelines, append their new and late batches and keep row problems visible.

    A constant number of queries whatever the number of pipelines or problems. Returns the
    number of batches added; re-recording the same batches adds nothing. `now_ms`: the poll's
    clock (batch times further ahead than FUTURE_BATCH_TOLERANCE_S are never a position).
    """
    now_ms = int(timezone.now().timestamp() * 1000) if now_ms is None else now_ms
    horizon_ms = now_ms + int(settings.FUTURE_BATCH_TOLERANCE_S * 1000)
    # A name or number the database cannot hold is its row's problem, never the whole store's.
    reading = storable.reading_storable(reading, store_name=store.name)
    existing = list(store.pipelines.all())
    known = {(p.topic, p.group) for p in existing}
    discovered = [Pipeline(store=store, topic=k.topic, group=k.group)
                  for k in reading.pipelines if (k.topic, k.group) not in known]
    if discovered:
        Pipeline.objects.bulk_create(discovered, ignore_conflicts=True)
        existing = list(store.pipelines.all())  # with their ids (a conflict's row is another's)
    with_batches = {(k.topic, k.group): b for k, b in reading.batches.items() if b}
    pipelines = [p for p in existing if (p.topic, p.group) in with_batches]
    newest = newest_batches(pipeline_ids=[p.pk for p in pipelines])
    # An applied rewind is verified from the first sample after its marker: keep that sample
    # even if it equals the one before (a replay can end where the job was).
    markers = dict(RewindRequest.objects.filter(
        pipeline_id__any=[p.pk for p in pipelines], status=RewindRequest.Status.APPLIED, marker_batch_ms__isnull=False,
    ).values_list("pipeline_id", "marker_batch_ms")) if not reading.keeps_history else {}
    rows: list[Batch] = []
    changed: list[Pipeline] = []
    now_committed = Q(pk__in=[])
    problems = list(reading.problems)
    for pipeline in pipelines:
        last_ms, previous = newest.get(pipeline.pk, (None, None))
        batches = with_batches[(pipeline.topic, pipeline.group)]
        if reading.keeps_history:
            new, committed_ms = _history_new(pipeline, batches, last_ms, previous, horizon_ms)
            if committed_ms:
                now_committed |= Q(pipeline=pipeline, batch_time_ms__in=committed_ms, committed=False)
        else:
            new = _samples_new(pipeline, batches, last_ms, previous, now_ms, horizon_ms, problems,
                               store_name=store.name, keep_from_ms=markers.get(pipeline.pk))
        if new:
            rows.extend(new)
            times = [b.batch_time_ms for b in new]
            pipeline.last_batch_ms = max([pipeline.last_batch_ms or -1, *times])
            recent = sorted(set(pipeline.recent_batch_ms) | set(times))
            pipeline.recent_batch_ms = recent[-Pipeline.RECENT_BATCHES:]
            changed.append(pipeline)
    Batch.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    values_update(Pipeline, changed, ["last_batch_ms", "recent_batch_ms"])  # every moving pipeline, every poll
    Batch.objects.filter(now_committed).update(committed=True)
    _problems_record(store, problems)
    _history_importing_record(store, reading.more)
    # When each partition was last written (stores that say so; None for the others, which
    # clears what an earlier reading left), for the partition rules of the cluster poll's
    # evaluation. Written now, not on commit: the times are the store's truth either way.
    partition_writes.record(store.pk, {p.pk: with_batches[(p.topic, p.group)][-1].written_ms for p in pipelines})
    if reading.discovered and reading.pipelines:  # a store still empty is listed again next poll
        Store.objects.filter(pk=store.pk).update(discovered_at=timezone.now())
    return len(rows)


def _history_importing_record(store: Store, more: set[PipelineKey]) -> None:
    """Mark the pipelines whose history import goes on next cycle (two UPDATEs at most)."""
    importing = Q(pk__in=[])
    for key in more:
        importing |= Q(topic=key.topic, group=key.group)
    store.pipelines.filter(history_importing=True).exclude(importing).update(history_importing=False)
    if more:
        store.pipelines.filter(importing, history_importing=False).update(history_importing=True)


def _history_new(
    pipeline: Pipeline, batches: list[BatchOffsets], last_ms: int | None, previous: dict[str, int] | None,
    horizon_ms: int,
) -> tuple[list[Batch], list[int]]:
    """Rows of a store with history not imported yet: (new Batch rows, times of planned checkpoint
    batches now committed). The reader gives rows after the position and rows missing from the
    window behind it (late); a late row's start is not known, so its record count is not either."""
    rows, now_committed = [], []
    for batch in sorted(batches, key=lambda b: b.batch_time_ms):
        if batch.batch_time_ms > horizon_ms:
            continue  # the reader names it; never imported while in the future
        offsets = _as_json_offsets(batch)
        if last_ms is not None and batch.batch_time_ms <= last_ms:
            if batch.batch_id is not None and batch.committed:
                now_committed.append(batch.batch_time_ms)  # a planned checkpoint batch re-read, committed since
            # A late row (or the re-read planned batch, which the unique key keeps once).
            rows.append(Batch(pipeline=pipeline, batch_time_ms=batch.batch_time_ms, offsets=offsets, records=None,
                              batch_id=batch.batch_id, committed=batch.committed))
            continue
        rows.append(Batch(
            pipeline=pipeline, batch_time_ms=batch.batch_time_ms, offsets=offsets,
            records=_records_between(previous, offsets), batch_id=batch.batch_id, committed=batch.committed,
        ))
        previous = offsets
    return rows, now_committed


def _samples_new(
    pipeline: Pipeline, batches: list[BatchOffsets], last_ms: int | None, previous: dict[str, int] | None,
    now_ms: int, horizon_ms: int, problems: list[RowProblem], *, store_name: str, keep_from_ms: int | None = None,
) -> list[Batch]:
    """The current state of a store without history, as a sample if it moved or was written
    again (issue #13: a writer re-writing unchanged offsets, its time moving, is a batch written
    while no offset moved: the stall rule needs it, else a stall reads as a stop). A state whose
    time is only when it was read (`time_observed`) is a sample only when it moved. A state dated
    beyond the horizon, or older than the newest sample while its offsets changed (the writer's
    clock stepped), is recorded at the collector's clock with a named problem: its offsets are
    real and would be lost otherwise, and its time must not become the pipeline's position."""
    rows = []
    for batch in batches:
        offsets = _as_json_offsets(batch)
        at_ms = batch.batch_time_ms
        # The store dated this state itself (a znode's mtime, a file's batch time) and it is
        # newer than the newest recorded: it was written again, even with the same offsets.
        rewritten = not batch.time_observed and (last_ms is None or at_ms > last_ms) and at_ms <= horizon_ms
        where = f"{pipeline.topic} / {pipeline.group}"
        if at_ms > horizon_ms:
            problems.append(RowProblem(store_name, where, f"batch time {ms_text(at_ms)} is more than "
                                       f"{int(settings.FUTURE_BATCH_TOLERANCE_S)} s ahead of the collector's clock: "
                                       "offsets recorded at the collector's read time (check the writer's clock)"))
            at_ms = max(now_ms, (last_ms or -1) + 1)
        elif last_ms is not None and at_ms <= last_ms:
            if offsets == previous:
                continue  # the same state read again
            problems.append(RowProblem(store_name, where, "batch time older than the newest recorded although the "
                                       "offsets changed (the writer's clock went back?): recorded at the collector's "
                                       "read time"))
            at_ms = max(now_ms, last_ms + 1)
        if offsets == previous and not rewritten and (keep_from_ms is None or at_ms < keep_from_ms):
            continue  # sampled again and had not moved
        rows.append(Batch(pipeline=pipeline, batch_time_ms=at_ms, offsets=offsets,
                          records=_records_between(previous, offsets), batch_id=batch.batch_id,
                          committed=batch.committed))
        previous, last_ms = offsets, at_ms
    return rows


def _problems_record(store: Store, problems: list[RowProblem]) -> None:
    """Keep each distinct problem as one row with a count: one SELECT, one UPDATE and one INSERT
    per chunk of problems, whatever their number."""
    distinct = {(storable.stored_text(p.key, 500), storable.stored_text(p.problem, 1000)) for p in problems}
    items = sorted(distinct)
    now = timezone.now()
    for i in range(0, len(items), 2000):
        chunk = items[i:i + 2000]
        existing = {
            (key, problem): pk for pk, key, problem in StoreProblem.objects.filter(
                store=store, key__in={k for k, _ in chunk}).values_list("pk", "key", "problem")
        }
        seen = [existing[item] for item in chunk if item in existing]
        if seen:
            StoreProblem.objects.filter(pk__in=seen).update(occurrences=F("occurrences") + 1, last_seen_at=now)
        StoreProblem.objects.bulk_create(
            [StoreProblem(store=store, key=k, problem=p) for k, p in chunk if (k, p) not in existing],
            ignore_conflicts=True,
        )


@transaction.atomic
def watermarks_record(
    *, cluster: Cluster, result: WatermarkResult, sampled_at: datetime,
    record_times: dict[tuple[str, int, int], int] | None = None,
    committed: dict[int, Committed] | None = None,
    record_misses: dict[tuple[str, int, int], str] | None = None,
    records_later=None,
    pipelines: list[Pipeline] | None = None,
) -> int:
    """Store the cluster's watermarks (one row per topic), then per pipeline reading its topics a
    lag sample, and evaluate them all (status, lag in seconds, retention risk, incidents).
    Everything here follows the topics of `result`: a shard of a cluster's poll (dashboard.
    monitoring.shards) passes its own topics' watermarks and records and evaluates their
    pipelines only (a topic's pipelines, twins included, are always in one shard).
    `record_times`: (topic, partition, offset) -> timestamp (ms) of the record at that offset,
    read from the broker; lag in seconds comes from them where they match the committed offset.
    `record_misses`: (topic, partition, offset) -> why that record's timestamp is not known (gone,
    not read this cycle), said next to the interpolated number or its absence.
    `records_later`: instead of the two, a function returning them, called only when the
    evaluation needs them (after the inserts and history queries): the caller's record read
    runs meanwhile.
    `committed`, `pipelines`: each pipeline's newest offsets and the pipelines reading the
    topics of `result`, when the caller already read them (cluster_committed), else read here.
    A constant number of queries whatever the number of pipelines."""
    # A write never waits for the prune to have created its day (nor lands in the default partition).
    sample_partitions.partitions_ensure({sample_partitions.day_of(sampled_at)})
    rows = []
    for topic, parts in result.by_topic.items():
        ids = sorted(parts)
        rows.append((cluster.pk, topic, sampled_at, pack_partitions(ids), pack([parts[p].low for p in ids]),
                     pack([parts[p].high for p in ids])))
    copy_rows(WatermarkSample, ["cluster_id", "topic", "sampled_at", "partitions", "lows", "highs"], rows)

    if pipelines is None:
        pipelines = list(Pipeline.objects.filter(store__cluster=cluster, topic__any=list(result.by_topic)))
    newest = committed if committed is not None else committed_offsets(pipeline_ids=[p.pk for p in pipelines])
    offsets_of = {pk: c.offsets for pk, c in newest.items()}
    samples: dict[int, NewSample] = {}
    for pipeline in pipelines:
        offsets = offsets_of.get(pipeline.pk, {})
        highs = {p: w.high for p, w in sorted(result.by_topic[pipeline.topic].items())}
        # The batch time read with these offsets, not the pipeline row's (a store poll may have
        # moved it on since).
        batch_ms = newest[pipeline.pk].batch_ms if pipeline.pk in newest else pipeline.last_batch_ms
        samples[pipeline.pk] = NewSample(evaluation.sample_lag(offsets, highs), batch_ms)
    pipelines_evaluate(cluster, pipelines, offsets_of, result, now=sampled_at, record_times=record_times or {},
                        record_misses=record_misses or {}, records_later=records_later, new_samples=samples)
    # Stored after the evaluation gave each its went_back.
    copy_rows(LagSample, ["pipeline_id", "sampled_at", "total_lag", "partitions", "committed", "last_batch_ms",
                          "went_back"],
              [(pk, sampled_at, s.total_lag, *pack_map(offsets_of.get(pk, {})), s.last_batch_ms, s.went_back)
               for pk, s in samples.items()])
    _gone_topics_archive(cluster, result, sampled_at)
    return len(samples)


def _gone_topics_archive(cluster: Cluster, result: WatermarkResult, now: datetime) -> None:
    """Pipelines whose topic the cluster no longer has are not evaluated (no watermarks): the ones
    silent for long are archived (dashboard.alerting.lifecycle), their status OK with the reason."""
    if not result.missing:
        return
    gone = list(Pipeline.objects.filter(store__cluster=cluster, topic__in=list(result.missing)))
    reasons = {p: lifecycle.archive_reason(p, now, topic_gone=True) for p in gone}
    lifecycle.archived_record(reasons, now)
    for p, why in reasons.items():
        if why:
            PipelineEvaluation.objects.filter(pipeline=p).update(status=int(evaluation.Status.OK), reasons=[why])


