"""Reads: what the pages, the API and the collectors ask of the database."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import F, JSONField, Min, OuterRef, Q, Subquery
from django.utils import timezone

from dashboard.models import Batch, Cluster, Incident, Pipeline, PipelineEvaluation, SourceHealth, StartReport, Store, StoreProblem
from streamoffsets.types import PipelineKey


def store_positions(*, store: Store) -> dict[PipelineKey, int]:
    """Where the next read of each pipeline's history starts: its newest stored batch, or just
    before its oldest planned (not yet committed) checkpoint batch, so that one is read again."""
    rows = store.pipelines.exclude(last_batch_ms=None).annotate(
        oldest_planned=Min("batches__batch_time_ms", filter=Q(batches__committed=False))
    ).values_list("topic", "group", "last_batch_ms", "oldest_planned")
    return {
        PipelineKey(topic, group): ms if planned is None else min(ms, planned - 1)
        for topic, group, ms, planned in rows
    }


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


def collector_health() -> list[SourceHealth]:
    """Every polled source, failing ones first."""
    return list(SourceHealth.objects.order_by("-consecutive_failures", "source"))


def unreachable_sources() -> list[SourceHealth]:
    return list(SourceHealth.objects.filter(consecutive_failures__gt=0).order_by("source"))


def stale_sources(*, now: datetime) -> list[SourceHealth]:
    """Sources that answer no more: their last success is older than STALE_AFTER_S while their
    polls do not fail (e.g. the collectors stopped): the numbers shown are old."""
    return list(SourceHealth.objects.filter(
        consecutive_failures=0, last_success_at__lt=now - timedelta(seconds=settings.STALE_AFTER_S)
    ).order_by("last_success_at"))


def store_names() -> list[str]:
    return list(Store.objects.order_by("name").values_list("name", flat=True))


def cluster_names() -> list[str]:
    return list(Cluster.objects.order_by("name").values_list("name", flat=True))


def open_incidents() -> list[Incident]:
    return list(Incident.objects.filter(closed_at=None).select_related("pipeline").order_by("-worst_status", "opened_at"))


def pipeline_incidents(*, pipeline: Pipeline, limit: int = 10) -> list[Incident]:
    return list(pipeline.incidents.order_by("-opened_at")[:limit])


def pipeline_get(*, pipeline_id: int) -> Pipeline:
    return Pipeline.objects.select_related("store", "store__cluster").get(pk=pipeline_id)


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
    paginator = Paginator(pipeline.batches.order_by("-batch_time_ms").only("batch_time_ms", "offsets", "records", "batch_id", "committed"), per_page)
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


def store_problems(*, store: Store, limit: int = 20) -> list[StoreProblem]:
    return list(store.problems.order_by("-last_seen_at")[:limit])


RANGES = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6),
          "24h": timedelta(hours=24), "7d": timedelta(days=7)}


# --- JSON API and /metrics -----------------------------------------------------------------------


def pipelines_filtered(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None
) -> list[Pipeline]:
    """Pipelines with their evaluation, ordered as the overview; each filter is optional:
    statuses (Status values, OR), store and cluster names (exact), q (text in topic or group)."""
    rows = Pipeline.objects.select_related("store", "store__cluster", "evaluation")
    if statuses is not None:
        rows = rows.filter(evaluation__status__in=statuses)
    if store is not None:
        rows = rows.filter(store__name=store)
    if cluster is not None:
        rows = rows.filter(store__cluster__name=cluster)
    if q:
        rows = rows.filter(Q(topic__icontains=q) | Q(group__icontains=q))
    return list(rows.order_by(F("evaluation__status").desc(nulls_last=True),
                              F("evaluation__total_lag").desc(nulls_last=True), "topic", "group", "pk"))


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
    found = list(rows.order_by("-batch_time_ms").only(
        "batch_time_ms", "offsets", "records", "batch_id", "committed")[:limit + 1])
    return found[:limit], len(found) > limit


def pipeline_lag_points(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[tuple[int, int]]:
    """(epoch ms, total lag) of every sample with since <= sampled_at < until, oldest first."""
    rows = pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lt=until).order_by("sampled_at")
    return [(int(at.timestamp() * 1000), lag) for at, lag in rows.values_list("sampled_at", "total_lag").iterator(
        chunk_size=10_000)]


@dataclass(frozen=True)
class PipelineMetrics:
    """What /metrics says of one pipeline: plain values, so dashboard.metrics stays pure."""

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


def newest_batches(*, pipeline_ids: list[int]) -> dict[int, tuple[int, dict[str, int]]]:
    """Each pipeline's newest batch (time, offsets), in one query (an indexed subquery each)."""
    newest = Batch.objects.filter(pipeline=OuterRef("pk")).order_by("-batch_time_ms")
    rows = Pipeline.objects.filter(pk__in=pipeline_ids).annotate(
        newest_ms=Subquery(newest.values("batch_time_ms")[:1]),
        newest_offsets=Subquery(newest.values("offsets")[:1], output_field=JSONField()),
    ).values_list("pk", "newest_ms", "newest_offsets")
    return {pk: (ms, offsets) for pk, ms, offsets in rows if ms is not None}


def record_timestamp_positions(
    *, cluster: Cluster, highs: dict[str, dict[int, int]], limit: int
) -> dict[tuple[str, int], int]:
    """The committed offsets whose records' timestamps give lag in seconds exactly: the `limit`
    most lagging (topic, partition) positions of the cluster's pipelines. One position per
    partition (a consumer reads a partition from one offset): the lowest committed, the oldest
    unprocessed record; other pipelines on that partition keep the interpolated estimate."""
    if limit <= 0:
        return {}
    pipelines = dict(Pipeline.objects.filter(store__cluster=cluster, topic__in=list(highs)).values_list("pk", "topic"))
    lowest: dict[tuple[str, int], int] = {}
    for pk, (_, offsets) in newest_batches(pipeline_ids=list(pipelines)).items():
        topic_highs = highs[pipelines[pk]]
        for p, committed in offsets.items():
            key = (pipelines[pk], int(p))
            high = topic_highs.get(key[1])
            if isinstance(committed, int) and high is not None and committed < high:
                lowest[key] = min(committed, lowest.get(key, committed))
    worst = sorted(lowest, key=lambda k: highs[k[0]][k[1]] - lowest[k], reverse=True)[:limit]
    return {key: lowest[key] for key in worst}
