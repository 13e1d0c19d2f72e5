"""Reads: what the pages, the API and the collectors ask of the database."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from math import nan as NAN
from typing import Iterator

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import BigIntegerField, F, JSONField, Min, OuterRef, Q, Subquery, Value
from typing import NamedTuple

from django.utils import timezone

from streamoffsets.stores.reading import ReadPlan
from dashboard.models import (Batch, Cluster, ExportJob, Incident, Pipeline, PipelineEvaluation, SourceHealth, StartReport, Store,
                              StoreProblem, WatermarkSample)
from dashboard.monitoring import health as collector_state
from offsetwatch.lib.packing import NONE, unpack, unpack_partitions
from dashboard.web.params import RANGES  # noqa: F401  (the chart's preset ranges, kept importable from here)
from dashboard.web.params import shifted
from streamoffsets import evaluation
from streamoffsets.types import PipelineKey


def store_read_plan(*, store: Store, now: datetime) -> ReadPlan:
    """What the next poll of a store reads (three queries at most).

    A pipeline's position is its newest imported batch, never past the future horizon, and just
    before its oldest planned (not yet committed) checkpoint batch, so that one is read again.
    The window behind it is searched for rows that arrived late; the batch times already
    imported there are given so only the missing ones are fetched."""
    now_ms = int(now.timestamp() * 1000)
    plan = ReadPlan(
        now_ms=now_ms, future_tolerance_ms=int(settings.FUTURE_BATCH_TOLERANCE_S * 1000),
        late_window_ms=int(settings.LATE_BATCH_WINDOW_S * 1000), max_batches=settings.MAX_BATCHES_PER_CYCLE,
        # Listing an HBase table is a skip scan over its row keys (and every malformed key): it
        # runs every STORE_DISCOVERY_INTERVAL_S; the other stores list cheaply at every poll.
        discover=store.kind != Store.Kind.HBASE or store.discovered_at is None
        or (now - store.discovered_at).total_seconds() >= settings.STORE_DISCOVERY_INTERVAL_S,
    )
    rows = store.pipelines.all()
    if store.kind == Store.Kind.CHECKPOINT:  # only checkpoints have planned batches
        rows = rows.annotate(oldest_planned=Min("batches__batch_time_ms", filter=Q(batches__committed=False)))
        rows = rows.values_list("pk", "topic", "group", "last_batch_ms", "oldest_planned")
    else:
        rows = rows.values_list("pk", "topic", "group", "last_batch_ms", Value(None, output_field=BigIntegerField()))
    windows, keys = Q(pk__in=[]), {}
    for pk, topic, group, ms, planned in rows:
        key = PipelineKey(topic, group)
        position = -1 if ms is None else min(ms, plan.horizon_ms)
        if planned is not None:
            position = min(position, planned - 1)
        plan.positions[key] = position
        if position >= 0 and plan.late_window_ms > 0:
            windows |= Q(pipeline_id=pk, batch_time_ms__gte=position - plan.late_window_ms,
                         batch_time_ms__lte=position)
            keys[pk] = key
    if keys:
        for pk, ms in Batch.objects.filter(windows, committed=True).values_list("pipeline_id", "batch_time_ms"):
            plan.recent.setdefault(keys[pk], set()).add(ms)
    return plan


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
    healths = {h.source: h for h in SourceHealth.objects.filter(
        source__in=[f"store:{pipeline.store_id}", f"cluster:{pipeline.store.cluster_id}"]
    )}
    reasons = _source_reasons(healths.get(f"store:{pipeline.store_id}"), f"store {pipeline.store.name}", now)
    reasons += _source_reasons(
        healths.get(f"cluster:{pipeline.store.cluster_id}"), f"cluster {pipeline.store.cluster.name}", now
    )
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


def open_incidents() -> list[Incident]:
    """The pipelines' own open incidents (a partition's is named in its pipeline's reasons, and
    listed on the pipeline's page)."""
    return list(Incident.objects.filter(closed_at=None, partition=None).select_related("pipeline")
                .order_by("-worst_status", "opened_at"))


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


def pipeline_batches(*, pipeline: Pipeline, page: int = 1, per_page: int = 50) -> tuple[Page, list[int], list[BatchRow]]:
    """One page of the batch history, newest first, with one column per partition seen on it."""
    # `pipeline` among the loaded fields: the related manager sets it on every row, and a deferred
    # foreign key made that one query per row (50 per page).
    paginator = Paginator(pipeline.batches.order_by("-batch_time_ms").only(
        "pipeline", "batch_time_ms", "offsets", "records", "batch_id", "committed"), per_page)
    page_obj = paginator.get_page(page)
    batches: list[Batch] = list(page_obj.object_list)
    partitions = sorted({int(p) for b in batches for p in b.offsets})
    # The cadence of the page's oldest row needs the batch just before it (on the next page).
    before = None
    if batches:
        before = pipeline.batches.filter(batch_time_ms__lt=batches[-1].batch_time_ms).order_by(
            "-batch_time_ms").values_list("batch_time_ms", flat=True).first()
    older_ms = [b.batch_time_ms for b in batches[1:]] + [before]
    rows = [
        BatchRow(
            batch_time=datetime.fromtimestamp(b.batch_time_ms / 1000, tz=dt_timezone.utc),
            batch_time_ms=b.batch_time_ms,
            offsets=[b.offsets.get(str(p)) for p in partitions],
            records=b.records,
            batch_id=b.batch_id,
            committed=b.committed,
            gap_s=None if prev is None else (b.batch_time_ms - prev) / 1000,
        )
        for b, prev in zip(batches, older_ms)
    ]
    return page_obj, partitions, rows


def pipeline_lag_series(*, pipeline: Pipeline, since: datetime) -> list[tuple[datetime, int]]:
    return list(
        pipeline.lag_samples.filter(sampled_at__gte=since).order_by("sampled_at").values_list("sampled_at", "total_lag")
    )


# --- charts -------------------------------------------------------------------------------------

MISSING = -(2**63)  # "unknown" in an int64 column (a lag can be negative: high out-of-range)


@dataclass
class ChartTable:
    """A chart's numbers: one row per lag sample, one column per series.

    Columns are arrays ('q' for messages with MISSING for unknown, 'd' for seconds with NaN for
    unknown), so 30 days of samples of 64 partitions take tens of MB, not hundreds.
    """

    kind: str  # "total" | "partitions"
    unit: str  # "messages" | "seconds"
    times: array  # epoch seconds ('d'), increasing
    names: list[str]
    partitions: list[int | None]  # the partition of each column (None for the total)
    columns: list[array]

    def values(self, index: int) -> list[int | float | None]:
        col = self.columns[index]
        if col.typecode == "q":
            return [None if v == MISSING else v for v in col]
        return [None if v != v else v for v in col]  # NaN is the only value unequal to itself

    def rows(self) -> Iterator[tuple[float, list[int | float | None]]]:
        """(time, values) row by row, read from the arrays as it goes (an export streams them)."""
        kinds = [(col, col.typecode == "q") for col in self.columns]
        for i, t in enumerate(self.times):
            yield t, [None if (col[i] == MISSING if ints else col[i] != col[i]) else col[i] for col, ints in kinds]


def _lag_rows(pipeline: Pipeline, since: datetime, until: datetime):
    return (pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until).order_by("sampled_at")
            .values_list("sampled_at", "partitions", "committed").iterator(chunk_size=2000))


def _watermark_rows(pipeline: Pipeline, since: datetime, until: datetime):
    # Only the high watermarks: the lows of 30 days of samples are not worth reading here.
    return (WatermarkSample.objects.filter(cluster_id=pipeline.store.cluster_id, topic=pipeline.topic,
                                           sampled_at__gte=since, sampled_at__lte=until)
            .order_by("sampled_at").values_list("sampled_at", "partitions", "highs").iterator(chunk_size=2000))


def _packed_columns(rows) -> tuple[array, dict[int, array]]:
    """(times, partition -> column) from rows of (time, packed partitions, packed values);
    packing.NONE where a row lacks a partition (e.g. before the topic grew)."""
    times = array("d")
    columns: dict[int, array] = {}
    for n, (at, parts, packed) in enumerate(rows):
        times.append(at.timestamp())
        values = unpack(packed)
        ids = unpack_partitions(parts, len(values))
        for p, v in zip(ids, values):
            col = columns.get(p)
            if col is None:
                col = columns[p] = array("q", [NONE]) * n
            col.append(NONE if v is None else v)
        if len(ids) != len(columns):
            for col in columns.values():
                if len(col) == n:
                    col.append(NONE)
    return times, columns


def pipeline_chart_table(*, pipeline: Pipeline, kind: str, unit: str, since: datetime, until: datetime) -> ChartTable:
    """The chart of a pipeline over [since, until]: total or per-partition lag, in messages or
    seconds, at each stored lag sample (full resolution: the chart downsamples, exports may not)."""
    if kind == "total" and unit == "messages":
        times, total = array("d"), array("q")
        for at, lag in (pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until)
                        .order_by("sampled_at").values_list("sampled_at", "total_lag").iterator(chunk_size=5000)):
            times.append(at.timestamp())
            total.append(lag)
        return ChartTable(kind, unit, times, ["total lag"], [None], [total])

    times, committed = _packed_columns(_lag_rows(pipeline, since, until))
    # Lag in seconds needs the watermark history before the range too: as far back as the
    # evaluation looks, so the chart's newest point agrees with the pipeline page's number.
    # Saturating: a range from year 1 has no "before" to look back into (no OverflowError).
    lookback = timedelta(seconds=settings.LAG_SECONDS_LOOKBACK_S)
    wm_times, highs = _packed_columns(_watermark_rows(pipeline, shifted(since, -lookback), until))
    partitions = sorted(committed)
    columns: list[array] = []
    if unit == "messages":
        # Each lag sample against the newest watermark sample at or before it: the one of the
        # same cycle, unless pruning kept different samples of a minute or hour for the two.
        at_wm = array("q")
        k = -1
        for t in times:
            while k + 1 < len(wm_times) and wm_times[k + 1] <= t:
                k += 1
            at_wm.append(k)
        for p in partitions:
            c_col, h_col, col = committed[p], highs.get(p), array("q")
            for i, k in enumerate(at_wm):
                c, h = c_col[i], (h_col[k] if h_col is not None and k >= 0 else NONE)
                col.append(MISSING if c == NONE or h == NONE else h - c)
            columns.append(col)
    else:
        for p in partitions:
            h_col = highs.get(p, ())
            high_samples = [(t, h) for t, h in zip(wm_times, h_col) if h != NONE]
            committed_samples = [(t, None if c == NONE else c) for t, c in zip(times, committed[p])]
            seconds = evaluation.lag_seconds_series(committed_samples, high_samples)
            columns.append(array("d", (NAN if s is None else round(s, 1) for s in seconds)))
        if kind == "total":
            # The pipeline's lag in seconds is its most-behind partition's.
            total = array("d")
            for row in zip(*columns):
                known = [s for s in row if s == s]
                total.append(max(known) if known else NAN)
            return ChartTable(kind, unit, times, ["lag (max over partitions)"], [None], [total])
    return ChartTable(kind, unit, times, [f"partition {p}" for p in partitions], list(partitions), columns)


def lag_sample_count(*, pipeline: Pipeline, since: datetime, until: datetime) -> int:
    """The rows of the pipeline's chart data over [since, until]."""
    return pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until).count()


def chart_series_count(*, pipeline: Pipeline, kind: str, since: datetime, until: datetime) -> int:
    """The series of the pipeline's chart over [since, until]: 1 for a total, else the partitions
    of the newest lag sample in the range (one indexed row: enough to bound an export's size)."""
    if kind == "total":
        return 1
    newest = (pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until).order_by("-sampled_at")
              .values_list("committed", flat=True).first())
    return max(1, len(unpack(newest))) if newest is not None else 1


@dataclass(frozen=True)
class Marker:
    """An event drawn on a chart's time axis."""

    at: datetime
    kind: str  # "incident opened" | "incident closed" | "restart" | "rewind"
    label: str


def _incident_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    markers = []
    # The pipeline's own incidents: its partitions' are named in their reasons already.
    for i in pipeline.incidents.filter(Q(opened_at__range=(since, until)) | Q(closed_at__range=(since, until)),
                                       partition=None):
        why = "; ".join(i.reasons[:2]) if i.reasons else ""
        if since <= i.opened_at <= until:
            markers.append(Marker(i.opened_at, "incident opened", f"{i.worst_status_name}: {why}"[:300]))
        if i.closed_at and since <= i.closed_at <= until:
            markers.append(Marker(i.closed_at, "incident closed", f"{i.worst_status_name} incident closed"))
    return markers


def _restart_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    markers = []
    for r in pipeline.start_reports.filter(received_at__range=(since, until)):
        decisions = r.report.get("decisions") if isinstance(r.report, dict) else None
        what = "first start" if r.first_start else "job restarted"
        if r.messages_lost:
            what += f", {r.messages_lost:,} messages lost to clamping"
        detail = "; ".join(str(d) for d in decisions[:2]) if decisions else "resumed from the stored offsets"
        markers.append(Marker(r.received_at, "restart", f"{what}: {detail}"[:300]))
    return markers


def _rewind_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    """Rewinds applied to the pipeline (when the job or the dashboard applied them): who asked,
    to what, and how it ended."""
    from dashboard.models import RewindRequest

    markers = []
    for r in RewindRequest.objects.filter(pipeline=pipeline, applied_at__range=(since, until)).select_related("requested_by"):
        target = ", ".join(f"p{p}: {o:,}" for p, o in r.target_offsets.items())
        markers.append(Marker(r.applied_at, "rewind", f"rewind #{r.pk} to {r.target_kind} ({target}) by "
                                                      f"{r.requested_by.username}: {r.status}"[:300]))
    return markers


# Each source of markers: a function (pipeline, since, until) -> list[Marker]. A new kind of event
# is one more function here.
MARKER_SOURCES = (_incident_markers, _restart_markers, _rewind_markers)


def chart_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    """Every event of the pipeline within [since, until], in time order."""
    markers = [m for source in MARKER_SOURCES for m in source(pipeline=pipeline, since=since, until=until)]
    return sorted(markers, key=lambda m: m.at)


# --- batch history exports ----------------------------------------------------------------------


def _batches_in(pipeline: Pipeline, since_ms: int | None, until_ms: int):
    qs = pipeline.batches.filter(batch_time_ms__lte=until_ms)
    return qs if since_ms is None else qs.filter(batch_time_ms__gte=since_ms)


def batch_export_count(*, pipeline: Pipeline, since_ms: int | None, until_ms: int) -> int:
    return _batches_in(pipeline, since_ms, until_ms).count()


def batch_export_width(*, pipeline: Pipeline, since_ms: int | None, until_ms: int) -> int:
    """The partitions of the newest batch in the range (one indexed row): an export's columns,
    near enough to bound its size before it runs."""
    newest = _batches_in(pipeline, since_ms, until_ms).order_by("-batch_time_ms").values_list("offsets", flat=True).first()
    return max(1, len(newest or {}))


def batch_export_partitions(*, pipeline: Pipeline, since_ms: int | None, until_ms: int) -> list[int]:
    """Every partition of any batch in the range (a CSV's columns are known before its rows):
    asked of the database, so the offsets of 30 days of batches are not read twice."""
    table = Batch._meta.db_table
    keys = ("SELECT DISTINCT jsonb_object_keys(offsets) FROM {t} WHERE pipeline_id = %s AND batch_time_ms <= %s"
            if connection.vendor == "postgresql" else
            "SELECT DISTINCT j.key FROM {t}, json_each({t}.offsets) AS j WHERE pipeline_id = %s AND batch_time_ms <= %s")
    sql, args = keys.format(t=table), [pipeline.pk, until_ms]
    if since_ms is not None:
        sql, args = sql + " AND batch_time_ms >= %s", args + [since_ms]
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        return sorted(int(key) for (key,) in cursor.fetchall())


def export_jobs(*, user, limit: int = 50) -> list[ExportJob]:
    """A user's background exports, newest first."""
    return list(ExportJob.objects.filter(user=user).select_related("pipeline").order_by("-created_at")[:limit])


def export_job_done(*, user, job_id: int) -> ExportJob | None:
    """One of the user's finished exports (None for another user's, or one not done)."""
    return ExportJob.objects.filter(pk=job_id, user=user, status=ExportJob.Status.DONE).first()


def batch_export_rows(
    *, pipeline: Pipeline, since_ms: int | None, until_ms: int, chunk_size: int = 2000
) -> Iterator[tuple[int, int | None, bool, int | None, dict[str, int]]]:
    """(batch_time_ms, batch_id, committed, records, offsets) oldest first, read in chunks (a
    server-side cursor on PostgreSQL): 30 days of batches never sit in memory at once."""
    return (_batches_in(pipeline, since_ms, until_ms).order_by("batch_time_ms")
            .values_list("batch_time_ms", "batch_id", "committed", "records", "offsets")
            .iterator(chunk_size=chunk_size))


def store_problems(*, store: Store, limit: int = 20) -> list[StoreProblem]:
    return list(store.problems.order_by("-last_seen_at")[:limit])



# --- JSON API and /metrics -----------------------------------------------------------------------


def pipelines_filtered(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None
) -> list[Pipeline]:
    """Pipelines with their evaluation, ordered as the overview; each filter is optional:
    statuses (Status values, OR), store and cluster names (exact), q (text in topic or group)."""
    rows = _pipelines_query(statuses=statuses, store=store, cluster=cluster, q=q)
    return list(rows.select_related("store", "store__cluster", "evaluation"))


def overview_rows(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None
) -> list[dict]:
    """The overview table: the same pipelines in the same order as pipelines_filtered, as plain
    rows of the shown columns only (a thousand model instances and their per-partition JSON cost
    more than the page may)."""
    rows = _pipelines_query(statuses=statuses, store=store, cluster=cluster, q=q)
    return list(rows.values(
        "pk", "topic", "group", "last_batch_ms", store_name=F("store__name"), status=F("evaluation__status"),
        reasons=F("evaluation__reasons"), total_lag=F("evaluation__total_lag"),
        lag_seconds=F("evaluation__lag_seconds"), lag_seconds_method=F("evaluation__lag_seconds_method"),
        retention_seconds_left=F("evaluation__retention_seconds_left"),
        sparkline_svg=F("evaluation__sparkline_svg"), sparkline_max=F("evaluation__sparkline_max"), worst_partition=F("evaluation__worst_partition"),
        worst_partition_lag=F("evaluation__worst_partition_lag"),
    ))


def _pipelines_query(*, statuses: list[int] | None, store: str | None, cluster: str | None, q: str | None):
    rows = Pipeline.objects.all()
    if statuses is not None:
        rows = rows.filter(evaluation__status__in=statuses)
    if store is not None:
        rows = rows.filter(store__name=store)
    if cluster is not None:
        rows = rows.filter(store__cluster__name=cluster)
    if q:
        rows = rows.filter(Q(topic__icontains=q) | Q(group__icontains=q))
    return rows.order_by(F("evaluation__status").desc(nulls_last=True),
                         F("evaluation__total_lag").desc(nulls_last=True), "topic", "group", "pk")


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


@dataclass(frozen=True)
class PipelineMetrics:
    """What /metrics says of one pipeline: plain values, so dashboard.api.metrics stays pure."""

    store: str
    topic: str
    group: str
    cluster: str
    status: int | None  # streamoffsets.evaluation.Status; None before the first evaluation
    total_lag: int | None
    lag_seconds: float | None
    retention_seconds_left: float | None
    retention_margin_min: int | None
    evaluated: bool
    partition_lags: tuple[tuple[int, int | None], ...] = ()


def pipelines_metrics() -> list[PipelineMetrics]:
    """Every pipeline's metric values, in one query."""
    out = []
    for p in Pipeline.objects.select_related("store", "store__cluster", "evaluation").order_by("pk"):
        e = getattr(p, "evaluation", None)
        rows = e.partitions if e else []
        margins = [r["retention_margin"] for r in rows if r.get("retention_margin") is not None]
        out.append(PipelineMetrics(
            store=p.store.name, topic=p.topic, group=p.group, cluster=p.store.cluster.name,
            status=e.status if e else None, total_lag=e.total_lag if e else None,
            lag_seconds=e.lag_seconds if e else None,
            retention_seconds_left=e.retention_seconds_left if e else None,
            retention_margin_min=min(margins) if margins else None, evaluated=e is not None,
            partition_lags=tuple((r["partition"], r.get("lag")) for r in rows),
        ))
    return out


def newest_batches(
    *, pipeline_ids: list[int], committed_only: bool = False,
) -> dict[int, tuple[int, dict[str, int]]]:
    """Each pipeline's newest batch (time, offsets), in one query (an indexed subquery each).
    `committed_only`: skip planned checkpoint batches (offsets/N without commits/N)."""
    newest = Batch.objects.filter(pipeline=OuterRef("pk")).order_by("-batch_time_ms")
    if committed_only:
        newest = newest.filter(committed=True)
    rows = Pipeline.objects.filter(pk__in=pipeline_ids).annotate(
        newest_ms=Subquery(newest.values("batch_time_ms")[:1]),
        newest_offsets=Subquery(newest.values("offsets")[:1], output_field=JSONField()),
    ).values_list("pk", "newest_ms", "newest_offsets")
    return {pk: (ms, offsets) for pk, ms, offsets in rows if ms is not None}


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


def cluster_committed(*, cluster: Cluster, topics: list[str]) -> tuple[dict[int, str], dict[int, Committed]]:
    """The cluster's pipelines reading `topics` (id -> topic) and their newest stored batches."""
    pipelines = dict(Pipeline.objects.filter(store__cluster=cluster, topic__in=topics).values_list("pk", "topic"))
    return pipelines, committed_offsets(pipeline_ids=list(pipelines))


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


# --- rewinds ---------------------------------------------------------------------------------------


def pipeline_rewinds(*, pipeline: Pipeline, limit: int = 20) -> list:
    from dashboard.models import RewindRequest

    return list(RewindRequest.objects.filter(pipeline=pipeline).select_related("requested_by", "decided_by")
                .order_by("-requested_at")[:limit])


def rewinds_list(*, open_only: bool = False, limit: int = 200) -> list:
    """Rewinds, open ones first, newest first."""
    from dashboard.models import RewindRequest

    rows = RewindRequest.objects.select_related("pipeline", "pipeline__store", "requested_by", "decided_by")
    if open_only:
        rows = rows.filter(status__in=RewindRequest.OPEN)
    return sorted(rows.order_by("-requested_at")[:limit], key=lambda r: not r.is_open)


def rewind_get(*, rewind_id: int):
    from dashboard.models import RewindRequest

    return RewindRequest.objects.select_related("pipeline", "pipeline__store", "pipeline__store__cluster",
                                                "requested_by", "decided_by").get(pk=rewind_id)


def rewind_events(*, rewind_id: int) -> list:
    """The audit events of one rewind, oldest first (its timeline)."""
    from dashboard.models import AuditEvent

    return list(AuditEvent.objects.filter(action__startswith="rewind.", subject__startswith=f"rewind #{rewind_id} ")
                .order_by("id"))


# --- audit log ----------------------------------------------------------------------------------


def _audit_filtered(*, pipeline_id: int | None = None, actor: str | None = None, action: str | None = None,
                    q: str | None = None, since: datetime | None = None, until: datetime | None = None):
    from dashboard.audit.services import ACTION_FAMILIES
    from dashboard.models import AuditEvent

    rows = AuditEvent.objects.all()
    if pipeline_id is not None:
        rows = rows.filter(pipeline_id=pipeline_id)
    if actor:
        rows = rows.filter(actor__icontains=actor)
    if action:
        # A family ("rewind") matches every action of it ("rewind.requested", ...).
        rows = rows.filter(action__startswith=action + ".") if action in ACTION_FAMILIES else rows.filter(action=action)
    if q:
        rows = rows.filter(Q(subject__icontains=q) | Q(pipeline_label__icontains=q))
    if since is not None:
        rows = rows.filter(at__gte=since)
    if until is not None:
        rows = rows.filter(at__lt=until)
    return rows


def audit_events_page(*, before_id: int | None = None, limit: int = 50, **filters) -> tuple[list[dict], int | None]:
    """Events matching the filters (see _audit_filtered), newest first, at most `limit`, older
    than `before_id` (the cursor: keyset on the primary key, so an old page costs what the first
    does). Returns (rows, the next page's cursor or None). Each row says whether its pipeline
    still exists (one query for the page)."""
    rows = _audit_filtered(**filters)
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    found = list(rows.order_by("-id").values(
        "id", "at", "actor", "remote_addr", "action", "subject", "pipeline_id", "pipeline_label", "before", "after",
        "details")[:limit + 1])
    page = found[:limit]
    alive = set(Pipeline.objects.filter(pk__in={r["pipeline_id"] for r in page if r["pipeline_id"]})
                .values_list("pk", flat=True))
    for row in page:
        row["pipeline_exists"] = row["pipeline_id"] in alive
    return page, (page[-1]["id"] if len(found) > limit else None)


def audit_events_export(*, chunk_size: int = 2000, **filters) -> Iterator[dict]:
    """Every event matching the filters, oldest first (the chain's order), read in chunks."""
    return (_audit_filtered(**filters).order_by("id").values(
        "id", "at", "actor", "actor_user_id", "remote_addr", "action", "subject", "pipeline_id", "pipeline_label",
        "before", "after", "details", "prev_hash", "hash").iterator(chunk_size=chunk_size))


@dataclass(frozen=True)
class AuditCheck:
    """A verification of the chain and when it was made."""

    result: object  # dashboard.audit.services.Verification
    checked_at: datetime


_audit_checked: tuple[float, AuditCheck] | None = None  # (monotonic time, check), per process


def audit_verification(*, max_age_s: float = 60.0, refresh: bool = False) -> AuditCheck:
    """The chain's verification (dashboard.audit.services.audit_verify), at most `max_age_s` old: it walks
    the whole log, so pages reuse one result per process for a minute instead of each walking it.
    `refresh` walks it now ("verify now")."""
    import time

    from dashboard.audit.services import audit_verify

    global _audit_checked
    cached = _audit_checked
    if not refresh and cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    check = AuditCheck(audit_verify(), timezone.now())
    _audit_checked = (time.monotonic(), check)
    return check


def audit_verification_forget() -> None:
    """Drop the cached verification (tests; a restore of the log)."""
    global _audit_checked
    _audit_checked = None
