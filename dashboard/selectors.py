"""Reads: what the pages, the API and the collectors ask of the database."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import F, Min, Q
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


def pipelines_overview() -> list[Pipeline]:
    """Every pipeline with its evaluation, worst status first, then largest lag."""
    return list(
        Pipeline.objects.select_related("store", "store__cluster", "evaluation")
        .order_by(F("evaluation__status").desc(nulls_last=True), F("evaluation__total_lag").desc(nulls_last=True),
                  "topic", "group")
    )


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


def pipeline_batches(*, pipeline: Pipeline, page: int = 1, per_page: int = 50) -> tuple[Page, list[int], list[BatchRow]]:
    """One page of the batch history, newest first, with one column per partition seen on it."""
    paginator = Paginator(pipeline.batches.order_by("-batch_time_ms").only("batch_time_ms", "offsets", "records", "batch_id", "committed"), per_page)
    page_obj = paginator.get_page(page)
    batches: list[Batch] = list(page_obj.object_list)
    partitions = sorted({int(p) for b in batches for p in b.offsets})
    rows = [
        BatchRow(
            batch_time=datetime.fromtimestamp(b.batch_time_ms / 1000, tz=dt_timezone.utc),
            batch_time_ms=b.batch_time_ms,
            offsets=[b.offsets.get(str(p)) for p in partitions],
            records=b.records,
            batch_id=b.batch_id,
            committed=b.committed,
        )
        for b in batches
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
