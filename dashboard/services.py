"""Writes: everything that changes the database goes through these functions."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets

from dataclasses import dataclass
from operator import itemgetter
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Min, Q, Subquery
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from streamoffsets.stores.reading import StoreReading
from dashboard import selectors
from dashboard.charts import render as charts
from dashboard.exports import views as exports
from dashboard.monitoring import storable
from offsetwatch.lib import sparkline
from dashboard.monitoring import partition_writes
from dashboard.audit.services import audit_append, changed_values
from offsetwatch.lib.pgcopy import copy_insert
from dashboard.models import (
    ApiToken,
    Batch,
    Cluster,
    ExportJob,
    Incident,
    LagSample,
    Pipeline,
    PipelineEvaluation,
    PipelineToken,
    RewindRequest,
    SourceHealth,
    StartReport,
    Store,
    StoreProblem,
    WatermarkSample,
)
from offsetwatch.lib.packing import pack, pack_map, pack_partitions, unpack_map, unpack_watermarks
from dashboard.web.params import ChartParams, TimeRange, time_zone
from streamoffsets import evaluation, partition_rules
from streamoffsets.evaluation import Sample
from streamoffsets.kafka import WatermarkResult
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
    known = set(store.pipelines.values_list("topic", "group"))
    Pipeline.objects.bulk_create(
        [Pipeline(store=store, topic=k.topic, group=k.group) for k in reading.pipelines if (k.topic, k.group) not in known],
        ignore_conflicts=True,
    )
    with_batches = {(k.topic, k.group): b for k, b in reading.batches.items() if b}
    pipelines = [p for p in store.pipelines.all() if (p.topic, p.group) in with_batches]
    newest = selectors.newest_batches(pipeline_ids=[p.pk for p in pipelines])
    # An applied rewind is verified from the first sample after its marker: keep that sample
    # even if it equals the one before (a replay can end where the job was).
    markers = dict(RewindRequest.objects.filter(
        pipeline__in=pipelines, status=RewindRequest.Status.APPLIED, marker_batch_ms__isnull=False,
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
    Pipeline.objects.bulk_update(changed, ["last_batch_ms", "recent_batch_ms"], batch_size=1000)
    Batch.objects.filter(now_committed).update(committed=True)
    _problems_record(store, problems)
    _history_importing_record(store, reading.more)
    # When each partition was last written (stores that say so; None for the others, which
    # clears what an earlier reading left), for the partition rules of the cluster poll's
    # evaluation. Written now, not on commit: the times are the store's truth either way.
    partition_writes.record({p.pk: with_batches[(p.topic, p.group)][-1].written_ms for p in pipelines})
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
            problems.append(RowProblem(store_name, where, f"batch time {_ms_text(at_ms)} is more than "
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


def _ms_text(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=dt_timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


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
    committed: dict[int, selectors.Committed] | None = None,
    record_misses: dict[tuple[str, int, int], str] | None = None,
    records_later=None,
) -> int:
    """Store the cluster's watermarks (one row per topic), then per pipeline reading its topics a
    lag sample, and evaluate them all (status, lag in seconds, retention risk, incidents).
    `record_times`: (topic, partition, offset) -> timestamp (ms) of the record at that offset,
    read from the broker; lag in seconds comes from them where they match the committed offset.
    `record_misses`: (topic, partition, offset) -> why that record's timestamp is not known (gone,
    not read this cycle), said next to the interpolated number or its absence.
    `records_later`: instead of the two, a function returning them, called only when the
    evaluation needs them (after the inserts and history queries): the caller's record read
    runs meanwhile.
    `committed`: each pipeline's newest offsets when the caller already read them
    (selectors.cluster_committed), else read here.
    A constant number of queries whatever the number of pipelines."""
    rows = []
    for topic, parts in result.by_topic.items():
        ids = sorted(parts)
        rows.append(WatermarkSample(
            cluster=cluster, topic=topic, sampled_at=sampled_at, partitions=pack_partitions(ids),
            lows=pack([parts[p].low for p in ids]), highs=pack([parts[p].high for p in ids]),
        ))
    copy_insert(WatermarkSample, rows)

    pipelines = list(Pipeline.objects.filter(store__cluster=cluster, topic__in=list(result.by_topic)))
    newest = committed if committed is not None else selectors.committed_offsets(pipeline_ids=[p.pk for p in pipelines])
    offsets_of = {pk: c.offsets for pk, c in newest.items()}
    samples = []
    for pipeline in pipelines:
        offsets = offsets_of.get(pipeline.pk, {})
        highs = {p: w.high for p, w in sorted(result.by_topic[pipeline.topic].items())}
        ids, values = pack_map(offsets)
        # The batch time read with these offsets, not the pipeline row's (a store poll may have
        # moved it on since).
        batch_ms = newest[pipeline.pk].batch_ms if pipeline.pk in newest else pipeline.last_batch_ms
        samples.append(LagSample(pipeline=pipeline, sampled_at=sampled_at, total_lag=evaluation.sample_lag(offsets, highs),
                                 partitions=ids, committed=values, last_batch_ms=batch_ms))
    copy_insert(LagSample, samples)
    _pipelines_evaluate(cluster, pipelines, offsets_of, result, now=sampled_at, record_times=record_times or {},
                        record_misses=record_misses or {}, records_later=records_later)
    return len(samples)


def _pipelines_evaluate(
    cluster: Cluster, pipelines: list[Pipeline], committed: dict[int, dict[int, int]], result: WatermarkResult,
    now: datetime, record_times: dict[tuple[str, int, int], int], record_misses: dict[tuple[str, int, int], str],
    records_later=None,
) -> None:
    """Evaluate every pipeline of a cluster poll with the pure rules of streamoffsets.evaluation."""
    if not pipelines:
        return
    n = settings.EVALUATION_WINDOW_SAMPLES
    window_since = now - timedelta(seconds=max(120.0, 3 * n * settings.POLL_INTERVAL_S))
    lookback_since = now - timedelta(seconds=settings.LAG_SECONDS_LOOKBACK_S)
    topics = sorted({p.topic for p in pipelines})

    # Plain tuples, not model instances: thousands of rows per cycle, and model __init__ is the
    # larger part of their cost.
    recent: dict[int, list[WindowSample]] = {}
    for pk, at, ids, values, last_ms, lag in (
        LagSample.objects.filter(pipeline__in=pipelines, sampled_at__gte=window_since).order_by("sampled_at")
        .values_list("pipeline_id", "sampled_at", "partitions", "committed", "last_batch_ms", "total_lag")
    ):
        offsets = {p: c for p, c in unpack_map(ids, values).items() if c is not None}
        recent.setdefault(pk, []).append(WindowSample(at, offsets, last_ms, lag))
    marks_at: dict[str, dict[datetime, dict[int, tuple[int, int]]]] = {}
    for topic, at, ids, lows, highs in WatermarkSample.objects.filter(
        cluster=cluster, topic__in=topics, sampled_at__gte=window_since
    ).values_list("topic", "sampled_at", "partitions", "lows", "highs"):
        marks_at.setdefault(topic, {})[at] = unpack_watermarks(ids, lows, highs)
    oldest = _oldest_watermarks(cluster, topics, lookback_since)

    # Lag older than the window needs the topic's earlier watermarks: fetched only for those topics.
    deep_topics = set()
    for pipeline in pipelines:
        window_marks = marks_at.get(pipeline.topic, {})
        if window_marks:
            first = window_marks[min(window_marks)]
            if any(p in first and c < first[p][1] for p, c in committed.get(pipeline.pk, {}).items()):
                deep_topics.add(pipeline.topic)
    for topic, at, ids, lows, highs in WatermarkSample.objects.filter(
        cluster=cluster, topic__in=deep_topics, sampled_at__gte=lookback_since, sampled_at__lt=window_since
    ).values_list("topic", "sampled_at", "partitions", "lows", "highs"):
        marks_at.setdefault(topic, {})[at] = unpack_watermarks(ids, lows, highs)

    # Open incidents: the pipelines' own, and their partitions' by pipeline.
    open_incidents: dict[int, Incident] = {}
    open_partition_incidents: dict[int, dict[int, Incident]] = {}
    for i in Incident.objects.filter(pipeline__in=pipelines, closed_at=None):
        if i.partition is None:
            open_incidents[i.pipeline_id] = i
        else:
            open_partition_incidents.setdefault(i.pipeline_id, {})[i.partition] = i
    written = partition_writes.read([p.pk for p in pipelines])
    sparklines = dict(PipelineEvaluation.objects.filter(pipeline__in=pipelines).values_list("pipeline", "sparkline"))
    # One job's offsets visible in two stores (same topic and group): compare them.
    twins: dict[tuple[str, str], list[Pipeline]] = {}
    for pipeline in pipelines:
        twins.setdefault((pipeline.topic, pipeline.group), []).append(pipeline)
    store_names = dict(Store.objects.filter(pk__in={p.store_id for p in pipelines}).values_list("pk", "name"))
    evaluations, incidents_new, incidents_changed = [], [], []
    series_of: dict[str, TopicSeries] = {}  # built once per topic, shared by its pipelines
    if records_later is not None:
        record_times, record_misses = records_later()
    for pipeline in pipelines:
        marks = {p: (w.low, w.high) for p, w in result.by_topic[pipeline.topic].items()}
        series = series_of.get(pipeline.topic)
        if series is None:
            history = dict(marks_at.get(pipeline.topic, {}))
            if pipeline.topic in oldest:
                history.setdefault(*oldest[pipeline.topic])
            series = series_of[pipeline.topic] = _topic_series(history)
        evaluated = _pipeline_evaluation(pipeline, committed.get(pipeline.pk, {}), marks,
                                         recent.get(pipeline.pk, [])[-n:], series, now, record_times,
                                         written.get(pipeline.pk), record_misses)
        if pipeline.topic in result.compacted:  # offsets with gaps: the lag counts offsets, not messages
            for row in evaluated.partitions:
                row["lag_is_upper_bound"] = row["lag"] is not None
        for twin in twins[(pipeline.topic, pipeline.group)]:
            mine, theirs = committed.get(pipeline.pk, {}), committed.get(twin.pk, {})
            if twin.pk != pipeline.pk and mine and theirs and evaluation.drift(mine, theirs):
                reason = evaluation.describe_drift(f"store {store_names[pipeline.store_id]}", mine,
                                                   f"store {store_names[twin.store_id]}", theirs)
                evaluated.reasons.append(reason)
                if evaluated.status < evaluation.Status.WARN:
                    evaluated.status = int(evaluation.Status.WARN)
                    evaluated.reasons = [r for r in evaluated.reasons if r not in ("caught up", "consuming normally")]
        evaluated.sparkline = sparkline.push(sparklines.get(pipeline.pk) or [], now.timestamp(), evaluated.total_lag or 0)
        evaluated.sparkline_svg = sparkline.svg_points(evaluated.sparkline)
        evaluated.sparkline_max = max(v for _, v in evaluated.sparkline)
        evaluations.append(evaluated)
        changes = [_incident_change(pipeline, None, evaluated.status, evaluated.reasons,
                                    open_incidents.get(pipeline.pk), now)]
        changes += _partition_incident_changes(pipeline, evaluated, open_partition_incidents.get(pipeline.pk, {}), now)
        for change in changes:
            if change is not None:
                (incidents_new if change.pk is None else incidents_changed).append(change)
    # An evaluation is derived and replaced every cycle: delete and insert (in this transaction)
    # costs two statements, where bulk_update builds a CASE per row and field.
    PipelineEvaluation.objects.filter(pipeline__in=pipelines).delete()
    copy_insert(PipelineEvaluation, evaluations)
    Incident.objects.bulk_create(incidents_new, batch_size=1000)
    Incident.objects.bulk_update(incidents_changed, ["closed_at", "worst_status", "reasons"], batch_size=1000)


def _oldest_watermarks(cluster: Cluster, topics: list[str], since: datetime) -> dict[str, tuple[datetime, dict]]:
    """Each topic's oldest watermark sample since `since` (the far end of its rates), in two queries."""
    firsts = dict(WatermarkSample.objects.filter(cluster=cluster, topic__in=topics, sampled_at__gte=since)
                  .values("topic").annotate(first=Min("sampled_at")).values_list("topic", "first"))
    # All topics of a cluster are sampled in the same cycles, so the distinct first times are few.
    rows = WatermarkSample.objects.filter(cluster=cluster, topic__in=list(firsts), sampled_at__in=set(firsts.values()))
    return {w.topic: (w.sampled_at, w.watermarks()) for w in rows if firsts.get(w.topic) == w.sampled_at}


class WindowSample(NamedTuple):
    """A stored LagSample as the evaluation reads it."""

    sampled_at: datetime
    committed: dict[int, int]
    last_batch_ms: int | None
    total_lag: int


@dataclass
class TopicSeries:
    """A topic's watermark history in the shapes the rules take, built once per topic per cycle."""

    highs_at: dict[datetime, dict[int, int]]  # sample time -> partition -> high watermark
    highs: dict[int, list[tuple[float, int]]]  # partition -> [(epoch s, high)], oldest first
    lows: dict[int, list[tuple[float, int]]]  # partition -> [(epoch s, low)], oldest first
    # Partitions whose low watermark moved in the lookback: only they can have a retention
    # deadline (rule 2 of evaluation.retention_risk), so only they pay for its rates.
    moving_lows: set[int]


def _topic_series(history: dict[datetime, dict[int, tuple[int, int]]]) -> TopicSeries:
    items = [(at, at.timestamp(), history[at]) for at in sorted(history)]
    partitions = set().union(*(marks.keys() for _, _, marks in items))
    # Comprehensions per partition: this runs for every topic at every cycle.
    lows = {p: [(t, marks[p][0]) for _, t, marks in items if p in marks] for p in partitions}
    return TopicSeries(
        highs_at={at: {p: hi for p, (_, hi) in marks.items()} for at, _, marks in items},
        highs={p: [(t, marks[p][1]) for _, t, marks in items if p in marks] for p in partitions},
        lows=lows,
        moving_lows={p for p, series in lows.items() if series[0][1] != series[-1][1]},
    )


CAUGHT_UP = evaluation.TimeLag(0.0, "caught up")
_partition_of, _lag_of = itemgetter(0), itemgetter(4)  # PartitionEvaluation's partition and lag


def _pipeline_evaluation(
    pipeline: Pipeline, committed: dict[int, int], marks: dict[int, tuple[int, int]], recent: list[WindowSample],
    series: TopicSeries, now: datetime, record_times: dict[tuple[str, int, int], int],
    written_ms: dict[int, int] | None = None,
    record_misses: dict[tuple[str, int, int], str] | None = None,
) -> PipelineEvaluation:
    """One pipeline's evaluation from data already in memory (no queries). `written_ms`: when
    each partition was last written, where the store says (dashboard.monitoring.partition_writes)."""
    window = [
        Sample(s.sampled_at.timestamp(), s.committed, series.highs_at.get(s.sampled_at, {}),
               s.last_batch_ms / 1000 if s.last_batch_ms else None, s.total_lag)
        for s in recent
    ]
    partitions = evaluation.evaluate_partitions(committed, marks)
    interval = evaluation.batch_interval_s([t / 1000 for t in pipeline.recent_batch_ms])
    status = evaluation.evaluate_status(
        window, partitions, interval, now.timestamp(),
        stop_after_intervals=settings.STOP_AFTER_INTERVALS, min_stale_s=settings.STALE_AFTER_S,
    )
    # A partition stuck while the others of its pipeline move (partition_rules): its status and
    # reason on its row, the worst of them on the pipeline (and so on its incident).
    # Only the few flagged partitions are checked for their state (an out-of-range partition's
    # own state is the news there, not a stall).
    def lags():  # called only when some partition may be stuck
        return dict(zip(map(_partition_of, partitions), map(_lag_of, partitions)))

    flagged = partition_rules.partition_status(window, lags, interval, written_ms,
                                               stop_after_intervals=settings.STOP_AFTER_INTERVALS)
    if flagged:
        states = {e.partition: e.state for e in partitions}
        flagged = [ps for ps in flagged if states[ps.partition] is evaluation.PartitionState.LAGGING]
    stuck = {ps.partition: ps for ps in flagged}
    status = partition_rules.merge_into(status, list(stuck.values()))
    highs, lows = series.highs, series.lows
    commits: dict[int, list[tuple[float, int]]] = {}
    for sample in window:
        for p, c in sample.committed.items():
            commits.setdefault(p, []).append((sample.at_s, c))

    rows, time_lags, soonest_loss = [], [], None
    for e in partitions:
        row = {"partition": e.partition, "committed": e.committed, "low": e.low, "high": e.high, "lag": e.lag,
               "state": e.state.value, "messages_lost": e.messages_lost, "lag_seconds": None,
               "lag_method": "", "retention_margin": None, "retention_seconds_left": None,
               "lag_absent": e.lag_absent,
               "status": stuck[e.partition].status.name if e.partition in stuck else "OK",
               "status_reason": stuck[e.partition].reason if e.partition in stuck else ""}
        if e.lag is None and e.committed is not None and e.high is not None:
            # Out of range: the state wins; no number derived from a position that does not exist.
            # Below the low watermark the margin stays: negative, it is the data lost (metrics).
            time_lags.append((e.partition, None, evaluation.TimeLag(None, e.lag_absent)))
            if e.state is evaluation.PartitionState.LOW_OUT_OF_RANGE:
                row["retention_margin"] = e.committed - e.low
        elif e.committed is not None and e.high is not None:
            # A partition at the high watermark of this cycle (the newest sample) is caught up:
            # rule 1 of lag_seconds, without walking its history.
            position = (pipeline.topic, e.partition, e.committed)
            record_ms = record_times.get(position)
            if e.lag == 0:
                tl = CAUGHT_UP
            elif record_ms is not None:
                tl = evaluation.lag_seconds_from_record(record_ms, now.timestamp())
            elif e.lag > 0:
                # The record's own time is not known (gone, or not read this cycle): estimated
                # from the high watermark samples, with the reason beside it.
                no_record = "record deleted by retention" if e.state is evaluation.PartitionState.LOW_OUT_OF_RANGE else (
                    (record_misses or {}).get(position))
                tl = evaluation.lag_seconds_without_record(e.committed, highs.get(e.partition, []), now.timestamp(), no_record)
            else:
                tl = evaluation.lag_seconds(e.committed, highs.get(e.partition, []), now.timestamp())
            row["lag_seconds"], row["lag_method"] = tl.seconds, tl.method
            time_lags.append((e.partition, e.lag, tl))
            if e.partition in series.moving_lows:
                risk = evaluation.retention_risk(e.committed, lows.get(e.partition, []), commits.get(e.partition, []))
            else:
                risk = evaluation.RetentionRisk(e.committed - e.low, None)  # rules 1 and 2, without the rates
            row["retention_margin"], row["retention_seconds_left"] = risk.margin, risk.seconds_left
            if risk.seconds_left is not None:
                soonest_loss = risk.seconds_left if soonest_loss is None else min(soonest_loss, risk.seconds_left)
                if risk.seconds_left < settings.RETENTION_WARN_S and status.status < evaluation.Status.WARN:
                    status.status = evaluation.Status.WARN
                    status.reasons.append(risk.describe(e.partition))
        rows.append(row)
    pipeline_time_lag = evaluation.pipeline_lag_seconds(time_lags)
    # No partition with a lag number (all out of range or unknown): no total either, not 0.
    total = evaluation.total_lag(partitions) if any(e.lag is not None for e in partitions) else None
    worst = max((e for e in partitions if e.lag is not None and e.lag > 0), key=lambda e: e.lag, default=None)
    return PipelineEvaluation(
        pipeline=pipeline, evaluated_at=now, status=int(status.status), reasons=status.reasons, partitions=rows,
        total_lag=total, lag_seconds=pipeline_time_lag.seconds,
        lag_seconds_method=pipeline_time_lag.method[:100],
        batch_interval_s=interval, retention_seconds_left=soonest_loss,
        worst_partition=worst.partition if worst else None, worst_partition_lag=worst.lag if worst else None,
    )


def _incident_change(
    pipeline: Pipeline, partition: int | None, status: int, reasons: list[str], open_incident: Incident | None,
    now: datetime,
) -> Incident | None:
    """A status above OK opens an incident (or raises the open one's worst); OK closes it. For the
    pipeline (`partition` None) or one of its partitions. Returns the incident to save (new when
    its pk is None), or None when nothing changes."""
    if status == evaluation.Status.OK:
        if open_incident is None:
            return None
        open_incident.closed_at = now
        return open_incident
    if open_incident is None:
        return Incident(pipeline=pipeline, partition=partition, opened_at=now, worst_status=status, reasons=reasons)
    if status >= open_incident.worst_status:
        open_incident.worst_status = status
        open_incident.reasons = reasons
        return open_incident
    return None


def _partition_incident_changes(
    pipeline: Pipeline, evaluated: PipelineEvaluation, open_incidents: dict[int, Incident], now: datetime
) -> list[Incident | None]:
    """A partition flagged by the partition rules (STALLED, STOPPED) has its own incident, with
    its own reason, beside the pipeline's (which names it too); it closes when the partition is
    OK again or gone from the evaluation."""
    if evaluated.status < evaluation.Status.STALLED and not open_incidents:
        return []  # the pipeline takes its worst partition's status: none is flagged (the usual case)
    statuses = {row["partition"]: (evaluation.Status[row.get("status") or "OK"], row.get("status_reason") or "")
                for row in evaluated.partitions}
    flagged = {p for p, (status, _) in statuses.items() if status != evaluation.Status.OK}
    changes = []
    for p in sorted(flagged | set(open_incidents)):
        status, reason = statuses.get(p, (evaluation.Status.OK, ""))
        changes.append(_incident_change(pipeline, p, int(status), [reason] if reason else [],
                                        open_incidents.get(p), now))
    return changes


# --- machine tokens and start reports -----------------------------------------------------------

TOKEN_PREFIX = "owp_"
API_TOKEN_PREFIX = "owu_"


def token_hash(token: str) -> str:
    """What is stored of a machine token (pipeline or API token): its SHA-256, never the token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _token_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


@transaction.atomic
def pipeline_token_issue(
    *, pipeline: Pipeline, name: str, actor: str = "system", actor_user_id: int | None = None, remote_addr: str = "",
) -> tuple[PipelineToken, str]:
    """A new token for a pipeline's job. The plain token is returned once and never stored; the
    audit event names its prefix only."""
    plain = _token_new(TOKEN_PREFIX)
    token = PipelineToken.objects.create(pipeline=pipeline, name=name, token_hash=token_hash(plain), prefix=plain[:12])
    audit_append(action="token.issued", subject=f"pipeline token {token.prefix}… ({name}) for {pipeline}",
                 pipeline=pipeline, after={"kind": "pipeline", "prefix": token.prefix, "name": name},
                 actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)
    return token, plain


@transaction.atomic
def pipeline_token_revoke(
    *, token: PipelineToken, actor: str = "system", actor_user_id: int | None = None, remote_addr: str = "",
) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_append(action="token.revoked", subject=f"pipeline token {token.prefix}… ({token.name}) for {token.pipeline}",
                     pipeline=token.pipeline, before={"revoked_at": None},
                     after={"revoked_at": token.revoked_at.isoformat()},
                     actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)


@transaction.atomic
def pipeline_get_or_declare(
    *, store: Store, topic: str, group: str, actor: str = "system", actor_user_id: int | None = None,
    remote_addr: str = "",
) -> tuple[Pipeline, bool]:
    """The pipeline, declared by a person before the collectors discovered it (so its job can
    report from its first start); a declaration is audited, a discovery by the collectors is not."""
    pipeline, created = Pipeline.objects.get_or_create(store=store, topic=topic, group=group)
    if created:
        audit_append(action="pipeline.declared", subject=f"pipeline {pipeline} in store {store.name}", pipeline=pipeline,
                     after={"store": store.name, "topic": topic, "group": group},
                     actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)
    return pipeline, created


def pipeline_for_token(*, token: str) -> Pipeline | None:
    """The pipeline a (non-revoked) token belongs to; None for unknown or revoked tokens."""
    found = pipeline_token_for(token=token)
    return found.pipeline if found else None


def pipeline_token_for(*, token: str) -> PipelineToken | None:
    """The (non-revoked) pipeline token, with its pipeline; None for unknown or revoked tokens."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    return PipelineToken.objects.select_related("pipeline", "pipeline__store").filter(
        token_hash=token_hash(token), revoked_at=None
    ).first()


def pipeline_token_actor(token: PipelineToken) -> str:
    """Who a job is in the audit log: the token it authenticated with (its prefix and name). What
    the job says of itself (its `instance`) is its own claim and goes into an event's details."""
    return f"pipeline token {token.prefix}… ({token.name})"


API_TOKEN_TOUCH_EVERY = timedelta(seconds=60)


@transaction.atomic
def api_token_issue(
    *, user, name: str, actor: str = "system", actor_user_id: int | None = None, remote_addr: str = "",
) -> tuple[ApiToken, str]:
    """A new API token acting as `user`. The plain token is returned once and never stored; the
    audit event names its prefix only."""
    plain = _token_new(API_TOKEN_PREFIX)
    token = ApiToken.objects.create(user=user, name=name, token_hash=token_hash(plain), prefix=plain[:12])
    audit_append(action="token.issued", subject=f"API token {token.prefix}… ({name}) acting as {user.get_username()}",
                 after={"kind": "api", "prefix": token.prefix, "name": name, "user": user.get_username()},
                 details={"user_id": user.pk},
                 actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)
    return token, plain


@transaction.atomic
def api_token_revoke(
    *, token: ApiToken, actor: str = "system", actor_user_id: int | None = None, remote_addr: str = "",
) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_append(action="token.revoked",
                     subject=f"API token {token.prefix}… ({token.name}) acting as {token.user.get_username()}",
                     before={"revoked_at": None}, after={"revoked_at": token.revoked_at.isoformat()},
                     details={"user_id": token.user_id},
                     actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)


def api_token_user(*, token: str):
    """The active user a live API token acts as; None for unknown, revoked or inactive-user tokens.
    Records when the token was last used, at most once a minute (a conditional UPDATE)."""
    if not token.startswith(API_TOKEN_PREFIX) or len(token) > 200:
        return None
    found = ApiToken.objects.select_related("user").filter(token_hash=token_hash(token), revoked_at=None).first()
    if found is None or not found.user.is_active:
        return None
    now = timezone.now()
    ApiToken.objects.filter(pk=found.pk).filter(
        Q(last_used_at=None) | Q(last_used_at__lt=now - API_TOKEN_TOUCH_EVERY)
    ).update(last_used_at=now)
    return found.user


# --- people and roles ---------------------------------------------------------------------------


class InvalidUser(ValueError):
    """A user that cannot be created as asked; the message names what is wrong."""


@transaction.atomic
def user_create_or_update(
    *, username: str, roles: list[str], password: str | None = None, email: str | None = None,
    actor: str = "system", actor_user_id: int | None = None, remote_addr: str = "",
) -> tuple[object, bool]:
    """Create a user or update an existing one: its role groups become exactly `roles` (other
    groups are kept), the password and email are set when given. Returns (user, created).
    A new user without a password gets an unusable one: it can only act through API tokens.
    What changed is audited (roles, email, whether a password was set; never the password)."""
    from django.contrib.auth import get_user_model, password_validation
    from django.contrib.auth.models import Group
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    from dashboard.accounts.roles import ROLES

    User = get_user_model()
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise InvalidUser(f"unknown role(s) {', '.join(map(repr, unknown)) or '(none given)'}: use {', '.join(ROLES)}")
    username_field = User._meta.get_field(User.USERNAME_FIELD)
    try:
        username_field.clean(username, None)
    except ValidationError as exc:
        raise InvalidUser(f"user name {username!r}: {' '.join(exc.messages)}") from None
    if email is not None:
        try:
            validate_email(email)
        except ValidationError:
            raise InvalidUser(f"email {email!r} is not a valid address") from None
    user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
    created = user is None
    before = None if created else {
        "email": user.email, "roles": sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True))}
    had_password = not created and user.has_usable_password()
    if created:
        user = User(**{User.USERNAME_FIELD: username})
    if email is not None:
        user.email = email
    if password is not None:
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise InvalidUser(f"password refused: {' '.join(exc.messages)}") from None
        user.set_password(password)
    elif created:
        user.set_unusable_password()
    user.save()
    # The migration creates the groups; get_or_create keeps this working on a flushed database.
    wanted = [Group.objects.get_or_create(name=role)[0] for role in roles]
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name__in=roles))
    user.groups.add(*wanted)
    after = {"email": user.email, "roles": sorted(set(roles))}
    if created:
        after["password"] = "set" if password is not None else "none (API tokens only)"
        audit_append(action="user.created", subject=f"user {username}", after=after, details={"user_id": user.pk},
                     actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)
    else:
        before, after = changed_values(before, after)
        if password is not None:
            before["password"] = "set" if had_password else "none (API tokens only)"
            after["password"] = "changed"
        if after:
            audit_append(action="user.roles_changed" if "roles" in after else "user.changed",
                         subject=f"user {username}", before=before, after=after, details={"user_id": user.pk},
                         actor=actor, actor_user_id=actor_user_id, remote_addr=remote_addr)
    return user, created


class InvalidReport(ValueError):
    """A start report that does not have the shape streamoffsets.restart produces."""


@transaction.atomic
def start_report_record(*, pipeline: Pipeline, report: dict, actor: str = "system", remote_addr: str = "") -> StartReport:
    """Record where a job started, audited (`actor`: the pipeline token, pipeline_token_actor); the
    report must be for the token's own pipeline."""
    if not isinstance(report, dict):
        raise InvalidReport("the report must be a JSON object")
    if report.get("topic") != pipeline.topic or report.get("group") != pipeline.group:
        raise InvalidReport(
            f"the report is for {report.get('topic')!r}/{report.get('group')!r} but the token belongs to "
            f"{pipeline.topic!r}/{pipeline.group!r}"
        )
    offsets = report.get("offsets")
    if not isinstance(offsets, dict) or not all(
        str(p).isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= 0 for p, o in offsets.items()
    ):
        raise InvalidReport("'offsets' must map partition ids to non-negative integers")
    clamps = report.get("clamps") or []
    if not isinstance(clamps, list) or not all(isinstance(c, dict) for c in clamps):
        raise InvalidReport("'clamps' must be a list of objects")
    try:
        lost = sum(int(c.get("messages_lost", 0)) for c in clamps)
    except (TypeError, ValueError):
        raise InvalidReport("'clamps[].messages_lost' must be integers") from None
    start = StartReport.objects.create(
        pipeline=pipeline, report=report, first_start=bool(report.get("first_start")),
        clamped_partitions=len(clamps), messages_lost=lost,
    )
    audit_append(action="start_report.received", subject=f"start report #{start.pk} of {pipeline}", pipeline=pipeline,
                 after=offsets, actor=actor, remote_addr=remote_addr,
                 details={"id": start.pk, "instance": str(report.get("instance", ""))[:300],
                          "first_start": start.first_start, "clamped_partitions": start.clamped_partitions,
                          "messages_lost": start.messages_lost})
    return start


# --- history retention -------------------------------------------------------------------------


def _thin(queryset, key_fields: list[str], trunc) -> int:
    """Keep the first sample per key in each bucket (minute or hour); delete the others."""
    keep = (
        queryset.annotate(bucket=trunc("sampled_at"))
        .values(*key_fields, "bucket")
        .annotate(keep=Min("id"))
        .values("keep")
    )
    deleted, _ = queryset.exclude(id__in=Subquery(keep)).delete()
    return deleted


def history_prune(*, now: datetime) -> dict[str, int]:
    """Bound history: full resolution for RETENTION_RAW_S, then one sample per minute, then per
    hour, then nothing; old batches and store problems go after RETENTION_BATCHES_S."""
    raw_until = now - timedelta(seconds=settings.RETENTION_RAW_S)
    minute_until = now - timedelta(seconds=settings.RETENTION_MINUTE_S)
    hour_until = now - timedelta(seconds=settings.RETENTION_HOUR_S)
    counts = {}
    for model, key in ((WatermarkSample, ["cluster_id", "topic"]), (LagSample, ["pipeline_id"])):
        name = model.__name__
        counts[f"{name} expired"] = model.objects.filter(sampled_at__lt=hour_until).delete()[0]
        counts[f"{name} to hourly"] = _thin(
            model.objects.filter(sampled_at__lt=minute_until, sampled_at__gte=hour_until), key, TruncHour)
        counts[f"{name} to per-minute"] = _thin(
            model.objects.filter(sampled_at__lt=raw_until, sampled_at__gte=minute_until), key, TruncMinute)
    batches_until_ms = int((now - timedelta(seconds=settings.RETENTION_BATCHES_S)).timestamp() * 1000)
    counts["Batch expired"] = Batch.objects.filter(batch_time_ms__lt=batches_until_ms).delete()[0]
    counts["StoreProblem expired"] = StoreProblem.objects.filter(
        last_seen_at__lt=now - timedelta(seconds=settings.RETENTION_BATCHES_S)).delete()[0]
    counts["ExportJob expired"] = export_jobs_prune(now=now)
    return counts


# --- background exports -------------------------------------------------------------------------


class ExportQueueFull(Exception):
    """The user already has EXPORT_JOBS_PER_USER background exports queued or running."""


def export_job_create(*, user, pipeline: Pipeline, kind: str, time_range, chart_kind: str = "total",
                      chart_unit: str = "messages") -> ExportJob:
    """Record an export to run in the background and queue it once the row is committed. The
    range is frozen now: "last 30 days" means the 30 days before the request. ExportQueueFull
    if the user has EXPORT_JOBS_PER_USER exports pending: one viewer cannot fill the workers."""
    with transaction.atomic():
        # The user's row locked: two requests at once cannot both count the same pending jobs.
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
        pending = ExportJob.objects.filter(
            user=user, status__in=(ExportJob.Status.QUEUED, ExportJob.Status.RUNNING)).count()
        if pending >= settings.EXPORT_JOBS_PER_USER:
            raise ExportQueueFull(
                f"you have {pending} background exports queued or running, the most a user may have "
                f"(OFFSETWATCH_EXPORT_JOBS_PER_USER={settings.EXPORT_JOBS_PER_USER}): wait for one to finish "
                "(see your exports)")
        job = ExportJob.objects.create(
            user=user, pipeline=pipeline, kind=kind,
            params={"since": time_range.since.isoformat() if time_range.since else None,
                    "until": time_range.until.isoformat(), "preset": time_range.preset,
                    "kind": chart_kind, "unit": chart_unit},
        )
        transaction.on_commit(lambda: _export_enqueue(job.pk))
    return job


def _export_enqueue(job_id: int) -> None:
    from dashboard.tasks import export_run

    try:
        export_run.delay(job_id)
    except Exception as exc:  # the broker is away: the job says so instead of waiting forever
        log.exception("export job %s: could not be queued", job_id)
        ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
            status=ExportJob.Status.FAILED, error=f"could not be queued (is Redis running?): {exc}"[:2000],
            finished_at=timezone.now())


def export_job_time_range(job: ExportJob) -> TimeRange:
    p = job.params
    return TimeRange(datetime.fromisoformat(p["since"]) if p.get("since") else None,
                     datetime.fromisoformat(p["until"]), p.get("preset"))


def export_job_run(*, job_id: int) -> ExportJob | None:
    """Write a queued export to its file in chunks, updating its progress; None when another
    worker claimed it first (or it is not queued). Failures are recorded on the job."""
    claimed = ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
        status=ExportJob.Status.RUNNING, started_at=timezone.now())
    if not claimed:
        return None
    job = ExportJob.objects.select_related("pipeline", "pipeline__store", "pipeline__store__cluster").get(pk=job_id)
    final = settings.EXPORT_DIR / f"export-{job.pk}.csv"
    partial = settings.EXPORT_DIR / f"export-{job.pk}.csv.part"  # never downloadable half-written
    rows_of_job = ExportJob.objects.filter(pk=job.pk)
    try:
        settings.EXPORT_DIR.mkdir(parents=True, exist_ok=True)
        tz, time_range, pipeline = time_zone(), export_job_time_range(job), job.pipeline
        if job.kind == ExportJob.Kind.BATCHES_CSV:
            what = "per-batch history"
            since_ms, until_ms = exports.range_ms(time_range)
            rows_of_job.update(rows_total=selectors.batch_export_count(pipeline=pipeline, since_ms=since_ms,
                                                                       until_ms=until_ms))
            header, rows = exports.batches_table(pipeline=pipeline, time_range=time_range, tz=tz)
            name_what = "batches"
        else:
            params = ChartParams(kind=job.params.get("kind", "total"), unit=job.params.get("unit", "messages"),
                                 range=time_range)
            chart = charts.pipeline_chart(pipeline=pipeline, params=params, tz=tz)
            what = chart.title
            rows_of_job.update(rows_total=len(chart.table.times))
            header, rows = exports.chart_table_rows(chart.table, tz)
            name_what = f"{params.kind}-{params.unit}"
        preamble = exports.export_preamble(pipeline=pipeline, what=what, time_range=time_range, tz=tz,
                                           now=timezone.now())
        count = exports.csv_write(path=partial, header=header, rows=rows, preamble=preamble,
                                  progress=lambda n: rows_of_job.update(rows_done=n))
        partial.rename(final)
        rows_of_job.update(
            status=ExportJob.Status.DONE, rows_done=count, rows_total=count, file_path=str(final),
            file_name=exports.download_name(pipeline=pipeline, what=name_what, time_range=time_range, ext="csv"),
            finished_at=timezone.now())
    except Exception as exc:
        log.exception("export job %s failed", job_id)
        with contextlib.suppress(OSError):  # the reason recorded is the first failure, not this one
            partial.unlink(missing_ok=True)
        rows_of_job.update(status=ExportJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000],
                           finished_at=timezone.now())
    job.refresh_from_db()
    return job


def export_jobs_prune(*, now: datetime) -> int:
    """Delete finished exports (and their files) older than EXPORT_RETENTION_S; a job still
    "running" long after the task's hard time limit lost its worker: it is marked failed."""
    ExportJob.objects.filter(status=ExportJob.Status.RUNNING, started_at__lt=now - timedelta(hours=2)).update(
        status=ExportJob.Status.FAILED, error="the worker stopped while writing this export", finished_at=now)
    old = ExportJob.objects.filter(finished_at__lt=now - timedelta(seconds=settings.EXPORT_RETENTION_S))
    for path in old.exclude(file_path="").values_list("file_path", flat=True):
        Path(path).unlink(missing_ok=True)
    return old.delete()[0]
