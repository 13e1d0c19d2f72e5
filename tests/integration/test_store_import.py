"""Importing a store's history: no single row can poison a pipeline's read position, rows that
arrive late are imported, and bad rows cost little (issue #11, observations 1 and 8).

Against the real HBase stand-in, Tansu and PostgreSQL. Batch times are taken from the real
clock, since the future horizon is the collector's clock plus FUTURE_BATCH_TOLERANCE_S.
"""
from __future__ import annotations

import time

import happybase
import pytest

from collectors.cycle import collect_once, poll_store
from dashboard.models import Batch, Pipeline, PipelineEvaluation, StoreProblem
from streamoffsets.evaluation import Status
from streamoffsets.stores.hbase import HBaseOffsetStore
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db

YEAR_2100_MS = 4_102_444_800_000


def now_ms() -> int:
    return int(time.time() * 1000)


def imported(setup, group: str) -> list[tuple[int, dict]]:
    pipeline = Pipeline.objects.get(store=setup.store, topic=setup.topic, group=group)
    return list(pipeline.batches.order_by("batch_time_ms").values_list("batch_time_ms", "offsets"))


def test_a_future_dated_row_is_a_named_problem_and_never_the_read_position(stack, unique_name):
    setup = hbase_store_setup(stack, unique_name, partitions=1, records=40)
    t = now_ms()
    save(setup, "etl", t - 30_000, {0: 5})
    save(setup, "etl", YEAR_2100_MS, {0: 6})  # a writer with a broken clock
    assert collect_once().errors == []
    save(setup, "etl", t - 20_000, {0: 10})
    save(setup, "etl", t - 10_000, {0: 15})
    assert collect_once().errors == []

    assert imported(setup, "etl") == [(t - 30_000, {"0": 5}), (t - 20_000, {"0": 10}), (t - 10_000, {"0": 15})]
    pipeline = Pipeline.objects.get(store=setup.store, topic=setup.topic, group="etl")
    assert pipeline.last_batch_ms == t - 10_000
    problem = StoreProblem.objects.get(store=setup.store, key=f"{setup.topic}:etl:{YEAR_2100_MS}")
    assert "ahead of the collector's clock" in problem.problem and "2100-01-01" in problem.problem
    assert problem.occurrences == 2  # one row with a count, not a row per poll
    assert PipelineEvaluation.objects.get(pipeline=pipeline).status != Status.REWOUND

    # Deleting the bad row changes nothing for the rows around it; the job's next rows come in.
    happybase.Connection(stack.hbase_host, stack.hbase_port).table(setup.hbase.table_name).delete(
        f"{setup.topic}:etl:{YEAR_2100_MS}".encode())
    save(setup, "etl", t, {0: 20})
    assert collect_once().errors == []
    assert imported(setup, "etl")[-1] == (t, {"0": 20})
    assert Batch.objects.filter(pipeline=pipeline, batch_time_ms__gt=t).count() == 0


def test_a_row_near_the_clock_is_imported(stack, unique_name, settings):
    """Within the tolerance a batch time ahead of the collector's clock (skew) is an ordinary row."""
    settings.FUTURE_BATCH_TOLERANCE_S = 3600
    setup = hbase_store_setup(stack, unique_name, partitions=1)
    ahead = now_ms() + 600_000
    save(setup, "etl", ahead, {0: 3})
    assert collect_once().errors == []
    assert imported(setup, "etl") == [(ahead, {"0": 3})]
    assert not StoreProblem.objects.filter(store=setup.store).exists()


def test_rows_that_arrive_late_are_imported_and_never_duplicated(stack, unique_name):
    setup = hbase_store_setup(stack, unique_name, partitions=1, records=60)
    t = now_ms()
    for i, offset in ((60, 10), (40, 20), (20, 30)):
        save(setup, "etl", t - i * 1000, {0: offset})
    assert collect_once().errors == []
    # A slow writer's row and a stepped clock's row, both older than the newest imported.
    save(setup, "etl", t - 50_000, {0: 15})
    save(setup, "etl", t - 30_000, {0: 25})
    assert collect_once().errors == []
    save(setup, "etl", t - 10_000, {0: 40})
    assert collect_once().errors == []
    assert collect_once().errors == []  # the window is read again: nothing twice

    rows = imported(setup, "etl")
    assert [ms for ms, _ in rows] == [t - 60_000, t - 50_000, t - 40_000, t - 30_000, t - 20_000, t - 10_000]
    pipeline = Pipeline.objects.get(store=setup.store, topic=setup.topic, group="etl")
    assert pipeline.last_batch_ms == t - 10_000
    assert pipeline.recent_batch_ms[-6:] == [ms for ms, _ in rows]
    records = dict(pipeline.batches.values_list("batch_time_ms", "records"))
    assert records[t - 50_000] is None  # a late row's start is not known
    assert records[t - 10_000] == 10


def test_a_late_row_outside_the_window_is_not_looked_for(stack, unique_name, settings):
    """The window bounds the cost of each poll; OFFSETWATCH_LATE_BATCH_WINDOW widens it."""
    settings.LATE_BATCH_WINDOW_S = 5
    setup = hbase_store_setup(stack, unique_name, partitions=1)
    t = now_ms()
    save(setup, "etl", t - 1000, {0: 9})
    assert collect_once().errors == []
    save(setup, "etl", t - 3000, {0: 8})  # inside the 5 s window
    save(setup, "etl", t - 60_000, {0: 1})  # outside it
    assert collect_once().errors == []
    assert [ms for ms, _ in imported(setup, "etl")] == [t - 3000, t - 1000]


def test_snapshot_stores_keep_offsets_dated_in_the_future_or_the_past(stack, unique_name, tmp_path):
    """An offset file's batch time is the writer's clock (as is a Kafka group's commit metadata,
    which Tansu does not keep): a wrong clock there must neither lose offsets nor become the
    position of a store that holds only the current offsets."""
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
    from reference_job.producer import ensure_topic, produce
    from streamoffsets.stores.registry import open_store
    from streamoffsets.types import BatchOffsets

    topic, group = unique_name("orders"), unique_name("job")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    produce(stack.kafka_bootstrap, topic, 1, 30)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    url = f"file://{tmp_path}"
    store = store_get_or_create(name=unique_name("s"), kind="file", url=url, cluster=cluster)
    with open_store(url) as writer:
        writer.save_batch(BatchOffsets(topic, group, YEAR_2100_MS, {0: 5}))
        before = now_ms()
        assert collect_once().errors == []
        writer.save_batch(BatchOffsets(topic, group, now_ms(), {0: 10}))
        assert collect_once().errors == []
        writer.save_batch(BatchOffsets(topic, group, before - 3_600_000, {0: 12}))  # clock stepped back
        assert collect_once().errors == []

    pipeline = Pipeline.objects.get(store=store, topic=topic, group=group)
    rows = list(pipeline.batches.order_by("batch_time_ms").values_list("batch_time_ms", "offsets"))
    assert [o for _, o in rows] == [{"0": 5}, {"0": 10}, {"0": 12}]
    assert all(before <= ms <= now_ms() + 1000 for ms, _ in rows)
    problems = list(StoreProblem.objects.filter(store=store).values_list("problem", flat=True))
    assert any("ahead of the collector's clock" in p for p in problems)
    assert any("clock went back" in p for p in problems)


def test_bad_rows_are_recorded_in_bulk_and_not_scanned_at_every_poll(stack, unique_name, monkeypatch,
                                                                      django_assert_max_num_queries):
    setup = hbase_store_setup(stack, unique_name, partitions=1)
    table = happybase.Connection(stack.hbase_host, stack.hbase_port).table(setup.hbase.table_name)
    with table.batch(batch_size=500) as batch:
        for i in range(3000):  # keys that are not <topic>:<group>:<ms>, sorting before the pipeline
            batch.put(f"0000-junk-{i:05d}".encode(), {b"offsets:0": b"1"})
    save(setup, "etl", now_ms() - 1000, {0: 1})

    scans = []
    real_scan = HBaseOffsetStore._scan

    def counting_scan(self, **kwargs):
        scans.append(kwargs.get("row_start"))
        return real_scan(self, **kwargs)

    monkeypatch.setattr(HBaseOffsetStore, "_scan", counting_scan)
    with django_assert_max_num_queries(30):
        poll_store(setup.store.pk)
    assert StoreProblem.objects.filter(store=setup.store).count() == 3000
    assert len(imported(setup, "etl")) == 1
    assert len(scans) < 10, "a run of bad rows is read in one streaming scan, not one scan per row"

    scans.clear()
    save(setup, "etl", now_ms(), {0: 2})
    with django_assert_max_num_queries(30):
        poll_store(setup.store.pk)  # within the discovery interval: the known pipeline only
    assert len(imported(setup, "etl")) == 2
    assert all(not (s or b"").startswith(b"0000-junk") for s in scans) and len(scans) <= 3
    assert StoreProblem.objects.filter(store=setup.store, occurrences=1).count() == 3000


def test_new_pipelines_are_found_at_the_next_discovery(stack, unique_name, settings):
    setup = hbase_store_setup(stack, unique_name, partitions=1)
    save(setup, "first", now_ms() - 2000, {0: 1})
    assert collect_once().errors == []
    save(setup, "second", now_ms() - 1000, {0: 1})
    assert collect_once().errors == []
    assert not Pipeline.objects.filter(store=setup.store, group="second").exists()  # listed every 60 s
    settings.STORE_DISCOVERY_INTERVAL_S = 0
    assert collect_once().errors == []
    assert len(imported(setup, "second")) == 1
