"""History retention: thins old batches, lag and watermark samples to one per minute, then one per
hour, and drops what is past retention (the prune task, collectors.tasks.prune)."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Min, Subquery
from django.db.models.functions import TruncHour, TruncMinute

from dashboard.alerting.outbox import notifications_prune
from dashboard.charts.rollups import rollups_prune
from dashboard.exports.services import export_jobs_prune
from dashboard.models import (
    Batch,
    LagSample,
    StoreProblem,
    WatermarkSample,
)


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
    counts["Notification expired"] = notifications_prune(now=now)
    counts.update(rollups_prune(now=now))
    return counts
