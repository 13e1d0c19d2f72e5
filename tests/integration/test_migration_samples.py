"""Migration 0022: sample rows written in the old shape (surrogate id, one table, raw int64
arrays) are all there after it, in their day partitions, and read through the app. (Run with a
sqlite:/// DATABASE_URL it checks the demo's plain tables.)"""
from __future__ import annotations

from array import array
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from dashboard.models import LagSample, WatermarkSample
from dashboard.monitoring.selectors import pipeline_lag_series

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("dashboard", "0021_chart_rollups")]
AT = datetime(2026, 11, 20, 23, 59, 50, tzinfo=timezone.utc)  # the rows straddle a day boundary


def old_pack(values):
    return array("q", (-1 if v is None else v for v in values)).tobytes()


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_old_rows_survive_and_read_back():
    old = migrate(BEFORE)
    Cluster, Store, Pipeline = (old.get_model("dashboard", m) for m in ("Cluster", "Store", "Pipeline"))
    cluster = Cluster.objects.create(name="c", bootstrap_servers="b:9092")
    store = Store.objects.create(name="s", kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    pipeline = Pipeline.objects.create(store=store, topic="orders", group="etl")
    for i in range(4):
        at = AT + timedelta(seconds=5 * i)
        old.get_model("dashboard", "WatermarkSample").objects.create(
            cluster=cluster, topic="orders", sampled_at=at, partitions=b"", lows=old_pack([0, 0]),
            highs=old_pack([100 + i, 2**63 - 1]))
        old.get_model("dashboard", "LagSample").objects.create(
            pipeline=pipeline, sampled_at=at, total_lag=i, partitions=old_pack([0, 3]),
            committed=old_pack([90 + i, None]), last_batch_ms=1000 * i)

    migrate(migrate_targets_latest())

    samples = list(LagSample.objects.filter(pipeline_id=pipeline.pk).order_by("sampled_at"))
    assert [(s.sampled_at, s.total_lag, s.last_batch_ms) for s in samples] == [
        (AT + timedelta(seconds=5 * i), i, 1000 * i) for i in range(4)]
    assert [s.committed_offsets() for s in samples] == [{0: 90 + i} for i in range(4)]
    marks = [w.watermarks() for w in WatermarkSample.objects.filter(topic="orders").order_by("sampled_at")]
    assert marks == [{0: (0, 100 + i), 1: (0, 2**63 - 1)} for i in range(4)]
    lag_series = pipeline_lag_series(pipeline=samples[0].pipeline, since=AT - timedelta(hours=1))
    assert len(lag_series) == 4
    if connection.vendor != "postgresql":
        return  # the demo's SQLite: plain tables
    with connection.cursor() as cur:
        cur.execute("SELECT DISTINCT tableoid::regclass::text FROM dashboard_lagsample ORDER BY 1")
        assert [r[0] for r in cur.fetchall()] == ["dashboard_lagsample_p20261120", "dashboard_lagsample_p20261121"]
        cur.execute("SELECT count(*) FROM dashboard_lagsample_default")
        assert cur.fetchone()[0] == 0


def migrate_targets_latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()
