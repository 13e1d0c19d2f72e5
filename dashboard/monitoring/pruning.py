"""History retention: thins old batches, lag and watermark samples to one per minute, then one per
hour, and drops what is past retention (the prune task, collectors.tasks.prune).

On PostgreSQL the sample tables are partitioned by day (dashboard.monitoring.sample_partitions):
a day is thinned once all of it is past a threshold, by swapping its partition for a thinned
copy, and expired by dropping its partition, so no row is DELETEd and no table bloats. A day is
thus kept at full resolution for 1 to 2 days (not exactly RETENTION_RAW_S) and expires 0 to 1 day
after RETENTION_HOUR_S. A raw day's index is rebuilt once the day is over (it shrinks by about a
third; sample_partitions.partition_index_rebuild). On SQLite (the demo) rows are deleted as before.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db.models import DateTimeField, Exists, ExpressionWrapper, OuterRef
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
from dashboard.monitoring import sample_partitions

_MODELS = ((WatermarkSample, ["cluster_id", "topic"]), (LagSample, ["pipeline_id"]))


def _thin(queryset, key_fields: list[str], trunc) -> int:
    """Keep the first sample per key in each bucket (minute or hour); delete the others: those
    with an earlier sample of their key in their bucket."""
    model = queryset.model
    earlier = model.objects.filter(
        **{k: OuterRef(k) for k in key_fields},
        sampled_at__lt=OuterRef("sampled_at"), sampled_at__gte=trunc(ExpressionWrapper(OuterRef("sampled_at"), output_field=DateTimeField()), tzinfo=timezone.utc),
    )
    deleted, _ = queryset.filter(Exists(earlier)).delete()
    return deleted


def _rows_prune(raw_until: datetime, minute_until: datetime, hour_until: datetime) -> dict[str, int]:
    counts = {}
    for model, key in _MODELS:
        name = model.__name__
        counts[f"{name} expired"] = model.objects.filter(sampled_at__lt=hour_until).delete()[0]
        counts[f"{name} to hourly"] = _thin(
            model.objects.filter(sampled_at__lt=minute_until, sampled_at__gte=hour_until), key, TruncHour)
        counts[f"{name} to per-minute"] = _thin(
            model.objects.filter(sampled_at__lt=raw_until, sampled_at__gte=minute_until), key, TruncMinute)
    return counts


def _partitions_prune(now: datetime, raw_until: datetime, minute_until: datetime,
                      hour_until: datetime) -> dict[str, int]:
    counts = {}
    today = sample_partitions.day_of(now)
    for model, _key in _MODELS:
        name, table = model.__name__, model._meta.db_table
        # Ahead of the writers: the first write of a day finds its partition.
        sample_partitions.partitions_ensure({today, today + timedelta(days=1)}, (table,))
        default = sample_partitions.default_prune(
            table, raw_until=raw_until, minute_until=minute_until, hour_until=hour_until)
        expired, hourly, minutely, dropped, swapped = default["expired"], default["hour"], default["minute"], 0, 0
        rebuilt = sample_partitions.partitions_rebuilt(table)
        reindexed = 0
        for partition, day, level in sample_partitions.partitions_list(table):
            if day is None:
                continue
            end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)
            if end <= hour_until:
                expired += sample_partitions.partition_drop(table, partition)
                dropped += 1
            elif end <= minute_until and level != "hour":
                hourly += sample_partitions.partition_thin(table, partition, day, "hour")
                swapped += 1
            elif end <= raw_until and level == "raw":
                minutely += sample_partitions.partition_thin(table, partition, day, "minute")
                swapped += 1
            elif day < today and level == "raw" and partition not in rebuilt:
                sample_partitions.partition_index_rebuild(partition)
                reindexed += 1
        counts[f"{name} expired"] = expired
        counts[f"{name} to hourly"] = hourly
        counts[f"{name} to per-minute"] = minutely
        counts[f"{name} partitions dropped"] = dropped
        counts[f"{name} partitions thinned"] = swapped
        counts[f"{name} partitions reindexed"] = reindexed
    return counts


def history_prune(*, now: datetime) -> dict[str, int]:
    """Bound history: full resolution for RETENTION_RAW_S, then one sample per minute, then per
    hour, then nothing; old batches and store problems go after RETENTION_BATCHES_S.
    Returns the rows removed (and, on PostgreSQL, the partitions dropped and thinned) by kind."""
    raw_until = now - timedelta(seconds=settings.RETENTION_RAW_S)
    minute_until = now - timedelta(seconds=settings.RETENTION_MINUTE_S)
    hour_until = now - timedelta(seconds=settings.RETENTION_HOUR_S)
    if sample_partitions.partitioned():
        counts = _partitions_prune(now, raw_until, minute_until, hour_until)
    else:
        counts = _rows_prune(raw_until, minute_until, hour_until)
    batches_until_ms = int((now - timedelta(seconds=settings.RETENTION_BATCHES_S)).timestamp() * 1000)
    counts["Batch expired"] = Batch.objects.filter(batch_time_ms__lt=batches_until_ms).delete()[0]
    counts["StoreProblem expired"] = StoreProblem.objects.filter(
        last_seen_at__lt=now - timedelta(seconds=settings.RETENTION_BATCHES_S)).delete()[0]
    counts["ExportJob expired"] = export_jobs_prune(now=now)
    counts["Notification expired"] = notifications_prune(now=now)
    counts.update(rollups_prune(now=now))
    return counts
