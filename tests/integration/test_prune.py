"""History retention: full resolution for a day, per minute for a week, per hour for 30 days."""
from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection

from dashboard.models import Batch, LagSample, Pipeline, Store, WatermarkSample
from dashboard.monitoring import pruning, sample_partitions
from dashboard.monitoring.pruning import history_prune
from dashboard.monitoring.services import cluster_get_or_create, watermarks_record
from offsetwatch.lib.packing import pack
from offsetwatch.lib.pgcopy import copy_insert
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import Watermarks

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def no_day_partitions_of_other_tests():
    """Day partitions outlive the tests that made them (a migration test, a collection cycle): the
    prune here must count only this test's days."""
    if sample_partitions.partitioned():
        for table in sample_partitions.SAMPLE_TABLES:
            for name, day, _ in sample_partitions.partitions_list(table):
                if day is not None:
                    sample_partitions.partition_drop(table, name)


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


# --- PostgreSQL: the sample tables are partitioned by day (dashboard.monitoring.sample_partitions)

partitioned = pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite's tables are not partitioned")

def partition_of(model, **key) -> set[str]:
    with connection.cursor() as cur:
        where = " AND ".join(f"{k} = %s" for k in key)
        cur.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {model._meta.db_table} WHERE {where}", list(key.values()))
        return {row[0] for row in cur.fetchall()}


def jittered_samples(pipeline, start: datetime, days: int, seed: int):
    """Samples every ~10 s with jitter (several per minute, some minutes without), whole days."""
    rng = random.Random(seed)
    at, end, i = start, start + timedelta(days=days), 0
    lag, wm = [], []
    while at < end:
        lag.append(LagSample(pipeline=pipeline, sampled_at=at, total_lag=i, partitions=b"", committed=pack([i, i, i])))
        wm.append(WatermarkSample(cluster=pipeline.store.cluster, topic="orders", sampled_at=at, partitions=b"",
                                  lows=pack([0, 0, 0]), highs=pack([i, i + 1, i + 2])))
        at += timedelta(seconds=rng.choice([1, 7, 10, 10, 13, 45, 130]))
        i += 1
    copy_insert(LagSample, lag)
    copy_insert(WatermarkSample, wm)


def kept_samples():
    return (list(LagSample.objects.order_by("sampled_at").values_list("sampled_at", "total_lag")),
            list(WatermarkSample.objects.order_by("sampled_at").values_list("sampled_at", "highs")))


@partitioned
def test_partitioned_prune_keeps_what_the_row_deletes_kept(pipeline):
    """The same samples, thinned once by the old row DELETEs and once by swapping day partitions:
    the same rows are left. Days: 2 and 3 days old (per minute), 10 and 11 (hourly), 40 (expired)."""
    day0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
    starts = [(day0 - timedelta(days=d), d) for d in (3, 11, 40)]
    days = {(s + timedelta(days=k)).date() for s, _ in starts for k in (0, 1)}

    for start, d in starts:  # in the default partition: thinned by DELETEs
        jittered_samples(pipeline, start, 2, seed=d)
    by_rows = pruning._rows_prune(NOW - timedelta(days=1), NOW - timedelta(days=7), NOW - timedelta(days=30))
    expected = kept_samples()
    LagSample.objects.all().delete()
    WatermarkSample.objects.all().delete()

    assert sample_partitions.partitions_ensure(days)  # now the days have their partitions
    for start, d in starts:
        jittered_samples(pipeline, start, 2, seed=d)
    assert partition_of(LagSample, pipeline_id=pipeline.pk) == {
        f"dashboard_lagsample_p{day:%Y%m%d}" for day in days}
    counts = history_prune(now=NOW)

    assert kept_samples() == expected
    assert len(expected[0]) < 4 * 24 + 2 * 24 * 60  # it did thin
    for name in ("LagSample", "WatermarkSample"):
        for what in ("expired", "to hourly", "to per-minute"):
            assert counts[f"{name} {what}"] == by_rows[f"{name} {what}"] > 0, (name, what)
        assert counts[f"{name} partitions dropped"] == 2 and counts[f"{name} partitions thinned"] == 4
    levels = {day: level for _, day, level in sample_partitions.partitions_list("dashboard_lagsample")}
    assert levels[(day0 - timedelta(days=3)).date()] == "minute"
    assert levels[(day0 - timedelta(days=11)).date()] == "hour"
    assert (day0 - timedelta(days=40)).date() not in levels
    # Idempotent: the days are at their resolution, nothing more to do.
    again = history_prune(now=NOW)
    assert again["LagSample partitions thinned"] == 0 and again["LagSample to per-minute"] == 0
    assert kept_samples() == expected


@partitioned
def test_a_write_at_a_day_boundary_finds_its_partition(pipeline):
    midnight = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=5)
    cluster = pipeline.store.cluster
    for at in (midnight - timedelta(microseconds=1), midnight):
        watermarks_record(cluster=cluster, sampled_at=at,
                          result=WatermarkResult(by_topic={"orders": {0: Watermarks(0, 5, 10)}}))
    before, after = (midnight - timedelta(days=1)).date(), midnight.date()
    assert partition_of(WatermarkSample, topic="orders") == {
        f"dashboard_watermarksample_p{before:%Y%m%d}", f"dashboard_watermarksample_p{after:%Y%m%d}"}
    assert partition_of(LagSample, pipeline_id=pipeline.pk) == {
        f"dashboard_lagsample_p{before:%Y%m%d}", f"dashboard_lagsample_p{after:%Y%m%d}"}
    assert [s.watermarks() for s in WatermarkSample.objects.order_by("sampled_at")] == [{0: (5, 10)}] * 2


@partitioned
def test_prune_creates_the_next_days_partitions(pipeline):
    tomorrow = (NOW + timedelta(days=1)).date()
    history_prune(now=NOW)
    names = {name for name, _, _ in sample_partitions.partitions_list("dashboard_watermarksample")}
    assert f"dashboard_watermarksample_p{tomorrow:%Y%m%d}" in names


@partitioned
@pytest.mark.django_db(transaction=True)
def test_a_reader_sees_every_sample_once_during_the_swap(pipeline):
    old_day = (NOW - timedelta(days=3)).replace(hour=0, minute=0)
    sample_partitions.partitions_ensure({old_day.date()})
    jittered_samples(pipeline, old_day, 1, seed=1)
    total = LagSample.objects.count()
    counts, seen = prune_while_counting(lambda: LagSample.objects.count())
    thinned = total - counts["LagSample to per-minute"]
    assert counts["LagSample partitions thinned"] == 1 and thinned < total
    assert LagSample.objects.count() == thinned
    assert seen and set(seen) <= {total, thinned}
    for model in (LagSample, WatermarkSample):
        model.objects.all().delete()
    sample_partitions.partition_drop("dashboard_lagsample", sample_partitions.partition_name(
        "dashboard_lagsample", old_day.date()))


def prune_while_counting(count) -> tuple[dict, list[int]]:
    """Run the prune while another connection (a thread: a reader) counts rows again and again.
    Returns the prune's counts and every count the reader saw."""
    seen, stop = [], threading.Event()

    def read():
        from django.db import connections
        try:
            while not stop.is_set():
                seen.append(count())
        finally:
            connections.close_all()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        counts = history_prune(now=NOW)
    finally:
        stop.set()
        reader.join()
    return counts, seen


def index_bytes(name: str) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_indexes_size(%s::regclass)", [name])
        return cur.fetchone()[0]


@partitioned
@pytest.mark.django_db(transaction=True)  # outside a transaction: the concurrent rebuild
def test_the_prune_rebuilds_a_finished_days_index_once_and_readers_see_every_row(pipeline):
    """Written a cycle at a time, a day's primary-key index splits its pages half empty; once the
    day is over the prune rebuilds it (REINDEX CONCURRENTLY), once, while readers go on."""
    yesterday = (NOW - timedelta(days=1)).replace(hour=0, minute=0)
    sample_partitions.partitions_ensure({yesterday.date()})
    cluster = pipeline.store.cluster
    rows = [WatermarkSample(cluster=cluster, topic=f"topic-{t:03d}", sampled_at=yesterday + timedelta(seconds=10 * c),
                            partitions=b"", lows=pack([c]), highs=pack([c + t]))
            for c in range(600) for t in range(40)]  # cycle by cycle, as the collectors write
    copy_insert(WatermarkSample, rows)
    name = sample_partitions.partition_name("dashboard_watermarksample", yesterday.date())
    before_bytes, expected = index_bytes(name), kept_samples()
    counts, seen = prune_while_counting(lambda: WatermarkSample.objects.filter(sampled_at__lt=NOW).count())
    assert counts["WatermarkSample partitions reindexed"] == 1 and counts["WatermarkSample partitions thinned"] == 0
    assert seen and set(seen) == {len(rows)}
    assert kept_samples() == expected
    assert index_bytes(name) < 0.75 * before_bytes, (index_bytes(name), before_bytes)
    assert name in sample_partitions.partitions_rebuilt("dashboard_watermarksample")
    levels = {n: level for n, _, level in sample_partitions.partitions_list("dashboard_watermarksample")}
    assert levels[name] == "raw"  # still a raw day: thinned the day after, like any other
    today = sample_partitions.partition_name("dashboard_watermarksample", NOW.date())
    assert today in levels and today not in sample_partitions.partitions_rebuilt("dashboard_watermarksample")
    with connection.cursor() as cur:  # no index left half built beside it
        cur.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND NOT indisvalid", [name])
        assert cur.fetchone()[0] == 0
    assert history_prune(now=NOW)["WatermarkSample partitions reindexed"] == 0  # once
    # A day later it is thinned as before.
    assert history_prune(now=NOW + timedelta(days=1))["WatermarkSample partitions thinned"] >= 1
    assert name not in sample_partitions.partitions_rebuilt("dashboard_watermarksample")
    for model in (LagSample, WatermarkSample):
        model.objects.all().delete()
    for table in sample_partitions.SAMPLE_TABLES:
        for partition, day, _ in sample_partitions.partitions_list(table):
            if day is not None:
                sample_partitions.partition_drop(table, partition)


@partitioned
@pytest.mark.django_db(transaction=True)
def test_a_rebuild_cut_short_is_tried_again(pipeline):
    """A concurrent index build that failed leaves an INVALID index on the table: the next
    rebuild drops it rather than keeping it beside the valid one."""
    yesterday = (NOW - timedelta(days=1)).replace(hour=0, minute=0)
    sample_partitions.partitions_ensure({yesterday.date()})
    jittered_samples(pipeline, yesterday, 1, seed=3)
    name = sample_partitions.partition_name("dashboard_lagsample", yesterday.date())
    with connection.cursor() as cur:
        with pytest.raises(IntegrityError):  # every row's partitions are b"": the unique build fails
            cur.execute(f'CREATE UNIQUE INDEX CONCURRENTLY "{name}_broken" ON "{name}" (partitions)')
        cur.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND NOT indisvalid", [name])
        assert cur.fetchone()[0] == 1
    total = LagSample.objects.count()
    assert history_prune(now=NOW)["LagSample partitions reindexed"] == 1
    with connection.cursor() as cur:
        cur.execute("SELECT indexrelid::regclass::text, indisvalid FROM pg_index WHERE indrelid = %s::regclass", [name])
        assert [valid for _, valid in cur.fetchall()] == [True]  # the primary key alone
    assert LagSample.objects.count() == total
    for model in (LagSample, WatermarkSample):
        model.objects.all().delete()
    for table in sample_partitions.SAMPLE_TABLES:
        for partition, day, _ in sample_partitions.partitions_list(table):
            if day is not None:
                sample_partitions.partition_drop(table, partition)


@partitioned
def test_inside_a_transaction_the_rebuild_is_a_plain_reindex(pipeline):
    yesterday = (NOW - timedelta(days=1)).replace(hour=0, minute=0)
    sample_partitions.partitions_ensure({yesterday.date()})
    jittered_samples(pipeline, yesterday, 1, seed=4)
    expected = kept_samples()
    counts = history_prune(now=NOW)  # the test's transaction: REINDEX CONCURRENTLY would fail here
    assert counts["LagSample partitions reindexed"] == counts["WatermarkSample partitions reindexed"] == 1
    assert kept_samples() == expected
    assert sample_partitions.partition_name("dashboard_lagsample", yesterday.date()) in (
        sample_partitions.partitions_rebuilt("dashboard_lagsample"))
