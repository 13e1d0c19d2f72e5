"""Reads of the monitoring area: what the collectors ask (committed offsets, record
positions; read plans are in read_plan.py), freshness and collector health, and a pipeline's page (evaluation, batches, incidents,
import progress, start reports)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import NamedTuple

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import JSONField, OuterRef, Subquery
from django.utils import timezone

from dashboard.models import (
    Batch,
    Cluster,
    Incident,
    Pipeline,
    PipelineEvaluation,
    SourceHealth,
    StartReport,
    Store,
    StoreProblem,
)
from dashboard.monitoring import health as collector_state
from dashboard.monitoring.partition_rows import BATCH_COLUMNS
from dashboard.monitoring.shards import cluster_last_poll, pipeline_cluster_source


def cluster_topics(*, cluster: Cluster) -> list[str]:
    return sorted(set(Pipeline.objects.filter(store__cluster=cluster).values_list("topic", flat=True)))


@dataclass
class Freshness:
    stale: bool
    reasons: list[str] = field(default_factory=list)


def _source_reasons(health: SourceHealth | None, what: str, now: datetime) -> list[str]:
    if health is None or health.last_attempt_at is None:
        return [f"{what} has not been collected yet"]
    reasons = []
    if health.consecutive_failures:
        since = health.last_success_at.isoformat(timespec="seconds") if health.last_success_at else "never"
        reasons.append(
            f"{health.label}: the last {health.consecutive_failures} poll(s) failed (last success {since}): "
            f"{health.last_error}"
        )
    elif health.last_success_at and (now - health.last_success_at).total_seconds() > settings.STALE_AFTER_S:
        age = int((now - health.last_success_at).total_seconds())
        reasons.append(f"{health.label} was last read {age} s ago")
    return reasons


def pipeline_freshness(*, pipeline: Pipeline, now: datetime | None = None) -> Freshness:
    """Whether the numbers shown for a pipeline are current, and if not, why."""
    now = now or timezone.now()
    # A cluster polled in shards: the row of the shard whose poll reads this pipeline's topic.
    cluster_source = pipeline_cluster_source(cluster=pipeline.store.cluster, topic=pipeline.topic)
    healths = {h.source: h for h in SourceHealth.objects.filter(source__in=[f"store:{pipeline.store_id}", cluster_source])}
    reasons = _source_reasons(healths.get(f"store:{pipeline.store_id}"), f"store {pipeline.store.name}", now)
    cluster_health = healths.get(cluster_source)
    if cluster_health is None:
        # Its shard has not polled yet (the cluster's shard count just changed): the cluster's last poll.
        cluster_health = cluster_last_poll(pipeline.store.cluster_id)
    reasons += _source_reasons(cluster_health, f"cluster {pipeline.store.cluster.name}", now)
    return Freshness(stale=bool(reasons), reasons=reasons)


def collector_health(*, now: datetime | None = None) -> list[SourceHealth]:
    """Every polled source (not the collectors' own rows), judged at `now`: each row carries
    `state`, `healthy`, `poll_age_s` and `problem` (collector_health.source_state). Failing and
    stale ones first. The collectors' own parts: collector_health.collector_health."""
    now = now or timezone.now()
    polled = set(collector_state.sources_polled())
    rows = [collector_state.source_state(h, now=now, polled=h.source in polled) for h in
            SourceHealth.objects.exclude(source__startswith=collector_state.COLLECTOR_PREFIX)]
    return sorted(rows, key=lambda h: (h.healthy, -h.consecutive_failures, h.source))


def collector_status(*, now: datetime | None = None) -> collector_state.CollectorHealth:
    """The collector system (broker, beat, workers) and every source, derived at `now` from
    timestamps: a stopped collector writes nothing, so nothing it would record can tell."""
    return collector_state.collector_health(now=now or timezone.now())


def broker_check() -> str:
    """"" when Redis (the Celery broker) answers a PING within 2 s, else why not."""
    broker = collector_state.broker_read()
    return "" if broker.up else f"Redis does not answer: {broker.error}"


def unreachable_sources() -> list[SourceHealth]:
    return list(SourceHealth.objects.filter(consecutive_failures__gt=0)
                .exclude(source__startswith=collector_state.COLLECTOR_PREFIX).order_by("source"))


def stale_sources(*, now: datetime) -> list[SourceHealth]:
    """Sources that answer no more: their last success is older than STALE_AFTER_S while their
    polls do not fail (e.g. the collectors stopped): the numbers shown are old."""
    return list(SourceHealth.objects.filter(
        consecutive_failures=0, last_success_at__lt=now - timedelta(seconds=settings.STALE_AFTER_S)
    ).exclude(source__startswith=collector_state.COLLECTOR_PREFIX).order_by("last_success_at"))


def store_names() -> list[str]:
    return list(Store.objects.order_by("name").values_list("name", flat=True))


def kafka_client_config(*, cluster_name: str) -> dict | None:
    """The librdkafka properties configured for a cluster (OFFSETWATCH_KAFKA_CLIENT_CONFIGS), None if none."""
    return settings.KAFKA_CLIENT_CONFIGS.get(cluster_name) or None


def cluster_names() -> list[str]:
    return list(Cluster.objects.order_by("name").values_list("name", flat=True))


def open_incidents(limit: int | None = None) -> list[Incident]:
    """The pipelines' own open incidents, worst and oldest first, at most `limit` (a partition's is
    named in its pipeline's reasons, and listed on the pipeline's page)."""
    rows = (Incident.objects.filter(closed_at=None, partition=None).select_related("pipeline")
            .order_by("-worst_status", "opened_at", "pk"))
    return list(rows[:limit] if limit is not None else rows)


def open_incidents_count() -> int:
    return Incident.objects.filter(closed_at=None, partition=None).count()


def pipeline_incidents(*, pipeline: Pipeline, limit: int = 10) -> list[Incident]:
    return list(pipeline.incidents.order_by("-opened_at")[:limit])


def pipeline_get(*, pipeline_id: int) -> Pipeline:
    return Pipeline.objects.select_related("store", "store__cluster").get(pk=pipeline_id)


@dataclass
class ImportProgress:
    percent: int  # of the time between the oldest stored batch and now, imported so far
    batches: int
    imported_until: datetime


def pipeline_import_progress(*, pipeline: Pipeline, now: datetime) -> ImportProgress | None:
    """How far the first import of the store's retained history has come (None: not importing).
    Batches are read oldest first, so the newest imported batch is how far the import got."""
    if not pipeline.history_importing or pipeline.last_batch_ms is None:
        return None
    oldest = pipeline.batches.order_by("batch_time_ms").values_list("batch_time_ms", flat=True).first()
    span = now.timestamp() * 1000 - oldest
    done = pipeline.last_batch_ms - oldest
    return ImportProgress(
        percent=min(99, int(100 * done / span)) if span > 0 else 0,
        batches=pipeline.batches.count(),
        imported_until=datetime.fromtimestamp(pipeline.last_batch_ms / 1000, tz=dt_timezone.utc),
    )


def pipeline_start_reports(*, pipeline: Pipeline, limit: int = 10) -> list[StartReport]:
    return list(pipeline.start_reports.order_by("-received_at")[:limit])


def pipeline_evaluation(*, pipeline: Pipeline) -> PipelineEvaluation | None:
    return PipelineEvaluation.objects.filter(pipeline=pipeline).first()


@dataclass
class BatchRow:
    batch_time: datetime
    batch_time_ms: int
    offsets: list[int | None]
    records: int | None
    batch_id: int | None
    committed: bool
    # Seconds since the previous (older) batch: the job's cadence, batch by batch; None for the oldest.
    gap_s: float | None = None


def _offsets_of(*, pipeline: Pipeline, batch_times: list[int], partitions: list[int]) -> dict[int, list]:
    """batch time -> the offsets of `partitions` (None where a batch has none) of those batches.

    On PostgreSQL the database picks them: a batch of 1,000 partitions holds ~18 KB of JSON,
    and 50 of them decoded here cost 20-35 ms, against 2 ms for jsonb_to_record, which reads
    each batch's JSON once (`offsets ->> key` per column would decompress it once per column:
    60 ms for ten). Elsewhere (SQLite, the demo) the JSON is decoded here."""
    if not batch_times or not partitions:
        return {ms: [None] * len(partitions) for ms in batch_times}
    if connection.vendor != "postgresql":
        return _offsets_decoded_here(pipeline=pipeline, batch_times=batch_times, partitions=partitions)
    # The column names are the partitions' numbers (ints from the evaluation), quoted; as text, so
    # no stored value can make the query fail (the stored offsets are whole numbers).
    columns = ", ".join(f"{connection.ops.quote_name(str(int(p)))} text" for p in partitions)
    sql = (f"SELECT b.batch_time_ms, x.* FROM {Batch._meta.db_table} b, jsonb_to_record(b.offsets) AS x({columns}) "
           "WHERE b.pipeline_id = %s AND b.batch_time_ms = ANY(%s)")
    with connection.cursor() as cursor:
        cursor.execute(sql, [pipeline.pk, batch_times])
        return {ms: [None if o is None else int(o) if o.lstrip("-").isdigit() else o for o in offsets]
                for ms, *offsets in cursor.fetchall()}


def _offsets_decoded_here(*, pipeline: Pipeline, batch_times: list[int], partitions: list[int]) -> dict[int, list]:
    """_offsets_of on a database without jsonb_to_record: each batch's JSON decoded in Python."""
    rows = pipeline.batches.filter(batch_time_ms__in=batch_times).values_list("batch_time_ms", "offsets")
    return {ms: [offsets.get(str(p)) for p in partitions] for ms, offsets in rows}


def pipeline_batches(
    *, pipeline: Pipeline, page: int = 1, per_page: int = 50, partitions: list[int] | None = None,
) -> tuple[Page, list[int], list[BatchRow]]:
    """One page of the batch history, newest first, with the offsets of `partitions` (the page's
    columns: read apart, whatever the batches' width), or, when None (no evaluation yet), of the
    first BATCH_COLUMNS partitions seen on the page."""
    paginator = Paginator(pipeline.batches.order_by("-batch_time_ms").values_list(
        "batch_time_ms", "records", "batch_id", "committed"), per_page)
    page_obj = paginator.get_page(page)
    batches = list(page_obj.object_list)
    times = [b[0] for b in batches]
    if partitions is None:
        found = dict(pipeline.batches.filter(batch_time_ms__in=times).values_list("batch_time_ms", "offsets"))
        partitions = sorted({int(p) for offsets in found.values() for p in offsets})[:BATCH_COLUMNS]
        offsets = {ms: [o.get(str(p)) for p in partitions] for ms, o in found.items()}
    else:
        offsets = _offsets_of(pipeline=pipeline, batch_times=times, partitions=partitions)
    # The cadence of the page's oldest row needs the batch just before it (on the next page).
    before = None
    if batches:
        before = pipeline.batches.filter(batch_time_ms__lt=times[-1]).order_by(
            "-batch_time_ms").values_list("batch_time_ms", flat=True).first()
    rows = [
        BatchRow(
            batch_time=datetime.fromtimestamp(ms / 1000, tz=dt_timezone.utc),
            batch_time_ms=ms,
            offsets=offsets.get(ms, [None] * len(partitions)),
            records=records,
            batch_id=batch_id,
            committed=committed,
            gap_s=None if prev is None else (ms - prev) / 1000,
        )
        for (ms, records, batch_id, committed), prev in zip(batches, times[1:] + [before])
    ]
    return page_obj, partitions, rows


def pipeline_lag_series(*, pipeline: Pipeline, since: datetime) -> list[tuple[datetime, int]]:
    return list(
        pipeline.lag_samples.filter(sampled_at__gte=since).order_by("sampled_at").values_list("sampled_at", "total_lag")
    )


def store_problems(*, store: Store, limit: int = 20) -> list[StoreProblem]:
    return list(store.problems.order_by("-last_seen_at")[:limit])


def pipeline_with_evaluation(*, pipeline_id: int) -> Pipeline:
    """One pipeline with store, cluster and evaluation in one query (DoesNotExist if none)."""
    return Pipeline.objects.select_related("store", "store__cluster", "evaluation").get(pk=pipeline_id)


def pipeline_batches_keyset(
    *, pipeline: Pipeline, from_ms: int | None = None, to_ms: int | None = None, before_ms: int | None = None,
    limit: int = 100,
) -> tuple[list[Batch], bool]:
    """Batches with from_ms <= time < to_ms, newest first, at most `limit`, older than before_ms
    (the cursor: batch times are unique per pipeline). Returns (batches, whether more follow).
    Keyset, not OFFSET: page 1,000 of a long history costs what page 1 costs (batch_pipeline_time)."""
    rows = pipeline.batches.all()
    if from_ms is not None:
        rows = rows.filter(batch_time_ms__gte=from_ms)
    if to_ms is not None:
        rows = rows.filter(batch_time_ms__lt=to_ms)
    if before_ms is not None:
        rows = rows.filter(batch_time_ms__lt=before_ms)
    # `pipeline` loaded too: the related manager sets it on every row (deferred, a query per row).
    found = list(rows.order_by("-batch_time_ms").only(
        "pipeline", "batch_time_ms", "offsets", "records", "batch_id", "committed")[:limit + 1])
    return found[:limit], len(found) > limit


def pipeline_lag_points(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[tuple[int, int]]:
    """(epoch ms, total lag) of every sample with since <= sampled_at < until, oldest first."""
    rows = pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lt=until).order_by("sampled_at")
    return [(int(at.timestamp() * 1000), lag) for at, lag in rows.values_list("sampled_at", "total_lag").iterator(
        chunk_size=10_000)]


def newest_batches(
    *, pipeline_ids: list[int], committed_only: bool = False,
) -> dict[int, tuple[int, dict[str, int]]]:
    """Each pipeline's newest batch (time, offsets), in one query (one index probe each).
    `committed_only`: skip planned checkpoint batches (offsets/N without commits/N)."""
    if connection.vendor == "postgresql":
        return _newest_batches_lateral(pipeline_ids, committed_only)
    return _newest_batches_subqueries(pipeline_ids, committed_only)


def _newest_batches_subqueries(pipeline_ids: list[int], committed_only: bool) -> dict[int, tuple[int, dict[str, int]]]:
    """newest_batches in Django's terms (the demo's SQLite)."""
    newest = Batch.objects.filter(pipeline=OuterRef("pk")).order_by("-batch_time_ms")
    if committed_only:
        newest = newest.filter(committed=True)
    rows = Pipeline.objects.filter(pk__in=pipeline_ids).annotate(
        newest_ms=Subquery(newest.values("batch_time_ms")[:1]),
        newest_offsets=Subquery(newest.values("offsets")[:1], output_field=JSONField()),
    ).values_list("pk", "newest_ms", "newest_offsets")
    return {pk: (ms, offsets) for pk, ms, offsets in rows if ms is not None}


def _newest_batches_lateral(pipeline_ids: list[int], committed_only: bool) -> dict[int, tuple[int, dict[str, int]]]:
    """newest_batches on PostgreSQL: the ids as one array parameter and a LATERAL probe of the
    (pipeline, -batch_time_ms) index each, reading both columns in that one probe. Django's form
    (two correlated subqueries, and an IN list of 500 parameters to compile) took twice as long
    in the 10,000-partition cycle, where it runs twice (store poll and cluster poll)."""
    if not pipeline_ids:
        return {}
    table = connection.ops.quote_name(Batch._meta.db_table)
    committed = "AND b.committed " if committed_only else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT p.id, n.batch_time_ms, n.offsets::text FROM unnest(%s::bigint[]) AS p(id) CROSS JOIN LATERAL "
            f"(SELECT b.batch_time_ms, b.offsets FROM {table} b WHERE b.pipeline_id = p.id {committed}"
            "ORDER BY b.batch_time_ms DESC LIMIT 1) AS n",
            [[int(pk) for pk in pipeline_ids]],
        )
        rows = cursor.fetchall()
    return {pk: (ms, json.loads(offsets)) for pk, ms, offsets in rows}


class Committed(NamedTuple):
    """A pipeline's newest committed batch: its time and offsets, read together (a sample that took
    the offsets from one read and the batch time from another could see batches "come" while
    the offsets stood still: a false STALLED)."""

    batch_ms: int
    offsets: dict[int, int]


def committed_offsets(*, pipeline_ids: list[int]) -> dict[int, Committed]:
    """Each pipeline's newest COMMITTED batch: pipeline id -> (batch time, partition -> offset).
    A checkpoint's planned batch (offsets/N, no commits/N yet) is not where the query stands: a
    restart re-runs it from the batch before, so lag and state come from that one (issue #13)."""
    return {pk: Committed(ms, {int(p): o for p, o in offsets.items()})
            for pk, (ms, offsets) in newest_batches(pipeline_ids=pipeline_ids, committed_only=True).items()}


def cluster_committed(*, cluster: Cluster, topics: list[str]) -> tuple[list[Pipeline], dict[int, Committed]]:
    """The cluster's pipelines reading `topics` and their newest stored batches (the poll's
    evaluation takes both: its pipelines are read once)."""
    pipelines = list(Pipeline.objects.filter(store__cluster=cluster, topic__any=topics))
    return pipelines, committed_offsets(pipeline_ids=[p.pk for p in pipelines])


def record_positions(
    *, topics: dict[int, str], committed: dict[int, dict[int, int]], marks: dict[str, dict[int, tuple[int, int]]]
) -> tuple[list[tuple[str, int, int]], set[tuple[str, int, int]]]:
    """The committed positions whose records' timestamps give lag in seconds: every distinct
    (topic, partition, offset) at which a pipeline (`topics`: id -> topic, with its `committed`
    offsets) has unread records (low <= offset < high in `marks`: topic -> partition -> (low,
    high)), most lagging first. Several groups on one partition give several positions, each
    group's own. Returns (those positions, the lagging positions below the low watermark: their
    records were deleted by retention, nothing to read)."""
    lag: dict[tuple[str, int, int], int] = {}
    deleted: set[tuple[str, int, int]] = set()
    for pk, offsets in committed.items():
        topic = topics.get(pk)
        topic_marks = marks.get(topic, {})
        for p, offset in offsets.items():
            low_high = topic_marks.get(p)
            if not isinstance(offset, int) or low_high is None or offset >= low_high[1]:
                continue
            if offset < low_high[0]:
                deleted.add((topic, p, offset))
            else:
                lag[(topic, p, offset)] = low_high[1] - offset
    return sorted(lag, key=lag.__getitem__, reverse=True), deleted

