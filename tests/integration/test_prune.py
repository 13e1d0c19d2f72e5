"""History retention: full resolution for a day, per minute for a week, per hour for 30 days."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command

from dashboard.models import Batch, LagSample, Pipeline, Store, WatermarkSample
from dashboard.monitoring.pruning import history_prune
from dashboard.monitoring.services import cluster_get_or_create
from offsetwatch.lib.packing import pack

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def pipeline():
    cluster = cluster_get_or_create(name="c", bootstrap_servers="b:9092")
    store = Store.objects.create(name="s", kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    return Pipeline.objects.create(store=store, topic="orders", group="etl")


def add_samples(pipeline, start: datetime, count: int, step: timedelta):
    for i in range(count):
        at = start + i * step
        WatermarkSample.objects.create(cluster=pipeline.store.cluster, topic="orders", sampled_at=at,
                                       partitions=pack([0]), lows=pack([0]), highs=pack([i]))
        LagSample.objects.create(pipeline=pipeline, sampled_at=at, total_lag=i, partitions=pack([0]), committed=pack([0]))


def test_prune_keeps_each_age_band_at_its_resolution(pipeline):
    add_samples(pipeline, NOW - timedelta(hours=1), 360, timedelta(seconds=10))  # last hour: all kept
    add_samples(pipeline, NOW - timedelta(days=2), 30, timedelta(seconds=10))  # 5 min at 10 s -> 5 kept
    add_samples(pipeline, NOW - timedelta(days=10), 60, timedelta(minutes=1))  # 1 h at 1/min -> 1 kept
    add_samples(pipeline, NOW - timedelta(days=40), 10, timedelta(seconds=10))  # beyond 30 days -> 0
    Batch.objects.create(pipeline=pipeline, batch_time_ms=int((NOW - timedelta(days=31)).timestamp() * 1000), offsets={})
    Batch.objects.create(pipeline=pipeline, batch_time_ms=int((NOW - timedelta(days=1)).timestamp() * 1000), offsets={})

    counts = history_prune(now=NOW)

    for model in (WatermarkSample, LagSample):
        assert model.objects.filter(sampled_at__gte=NOW - timedelta(days=1)).count() == 360
        two_days = model.objects.filter(sampled_at__lt=NOW - timedelta(days=1), sampled_at__gte=NOW - timedelta(days=7))
        assert two_days.count() == 5
        assert model.objects.filter(sampled_at__lt=NOW - timedelta(days=7), sampled_at__gte=NOW - timedelta(days=30)).count() == 1
        assert not model.objects.filter(sampled_at__lt=NOW - timedelta(days=30)).exists()
    # The kept sample of each bucket is its first: values stay monotonic for charts.
    kept = list(LagSample.objects.filter(sampled_at__lt=NOW - timedelta(days=1)).order_by("sampled_at")
                .values_list("total_lag", flat=True))
    assert kept == [0, 0, 6, 12, 18, 24]
    assert Batch.objects.count() == 1 and counts["Batch expired"] == 1
    assert history_prune(now=NOW)["LagSample to per-minute"] == 0  # idempotent


def test_prune_command_reports_what_it_deleted(pipeline, capsys, settings):
    add_samples(pipeline, datetime.now(timezone.utc) - timedelta(days=40), 3, timedelta(seconds=10))
    call_command("prune")
    assert "WatermarkSample expired: 3 rows deleted" in capsys.readouterr().out
