"""Names and numbers of any size in a store: what the database can hold is collected, each row it
cannot hold is a named problem, and the rest of the store is collected (issue #12, observation 2).

On PostgreSQL (DATABASE_URL), which refuses a value too long for its column for the whole
transaction: before dashboard.monitoring.storable, one 10,000-character group id stopped every pipeline of
its store. Rows are written by hand into the real HBase stand-in and ZooKeeper, as anyone with
access to the offsets table could.
"""
from __future__ import annotations

import random
import time

import happybase
import pytest
from django.db import connection
from kazoo.client import KazooClient

from collectors.cycle import collect_once
from dashboard.models import Pipeline, SourceHealth, StoreProblem
from dashboard.monitoring import storable
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create, store_reading_record
from streamoffsets.stores.reading import StoreReading
from streamoffsets.types import BatchOffsets, PipelineKey
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db


def now_ms() -> int:
    return int(time.time() * 1000)


def problems_of(store) -> list[tuple[str, str]]:
    return sorted(StoreProblem.objects.filter(store=store).values_list("key", "problem"))


def test_the_tests_run_on_postgresql():
    """SQLite ignores a CharField's length: these tests prove nothing there."""
    assert connection.vendor == "postgresql"


def test_long_names_and_huge_numbers_in_hbase_cost_their_row_only(stack, unique_name, settings):
    settings.STORE_DISCOVERY_INTERVAL_S = 0  # every poll lists the table (and finds the bad rows again)
    setup = hbase_store_setup(stack, unique_name, partitions=1, records=30)
    t = now_ms()
    save(setup, "etl", t - 30_000, {0: 5})
    table = happybase.Connection(stack.hbase_host, stack.hbase_port).table(setup.hbase.table_name)

    def put(topic: str, group: str, ms, offset="7", partition="0"):
        table.put(f"{topic}:{group}:{ms}".encode(), {f"offsets:{partition}".encode(): str(offset).encode()})

    huge_group = "g" * 10_000
    long_topic = "t" * 300
    kafka_longest_topic = "k" * 249
    # 1000 characters of 3 bytes each, hardly compressible: more than a btree entry holds, so
    # only the unique constraint on digests (migration 0017) lets this pipeline be a row.
    rng = random.Random(12)
    wide_group = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(1000))
    put(setup.topic, huge_group, f"{t - 20_000:013d}")
    put(long_topic, "etl", f"{t - 20_000:013d}")
    put(kafka_longest_topic, "etl", f"{t - 20_000:013d}")
    put(setup.topic, wide_group, f"{t - 20_000:013d}")
    put(setup.topic, "nul\x00group", f"{t - 20_000:013d}")
    put(setup.topic, "etl-big-offset", f"{t - 20_000:013d}", offset=10**30)
    put(setup.topic, "etl-big-time", 10**20)
    put(setup.topic, "etl-huge-time", "9" * 5000)  # past Python's 4300-digit int() limit
    put(setup.topic, "etl-huge-time", f"{t - 25_000:013d}", offset=3)

    assert collect_once().errors == []
    save(setup, "etl", t - 10_000, {0: 9})
    assert collect_once().errors == []  # and again, with every bad row still there

    health = SourceHealth.objects.get(source=f"store:{setup.store.pk}")
    assert (health.consecutive_failures, health.last_error) == (0, "")
    # The ordinary rows, and the longest names the database holds, are collected.
    etl = Pipeline.objects.get(store=setup.store, topic=setup.topic, group="etl")
    assert list(etl.batches.order_by("batch_time_ms").values_list("offsets", flat=True)) == [{"0": 5}, {"0": 9}]
    assert Pipeline.objects.get(store=setup.store, topic=kafka_longest_topic, group="etl").batches.count() == 1
    assert Pipeline.objects.get(store=setup.store, topic=setup.topic, group=wide_group).batches.count() == 1
    assert list(Pipeline.objects.get(store=setup.store, group="etl-huge-time").batches.values_list(
        "offsets", flat=True)) == [{"0": 3}]
    # Nothing too long became a row; each bad row is a named problem, counted at each poll.
    groups = set(Pipeline.objects.filter(store=setup.store).values_list("group", flat=True))
    assert huge_group not in groups and "nul\x00group" not in groups
    assert not Pipeline.objects.filter(store=setup.store, topic=long_topic).exists()
    problems = problems_of(setup.store)
    texts = [p for _, p in problems]
    assert "group id of 10000 characters (limit 1000): not collected" in texts
    assert "topic of 300 characters (limit 249): not collected" in texts
    assert "group id contains a NUL character, which PostgreSQL cannot store: not collected" in texts
    assert any(k.endswith(f":etl-big-offset:{t - 20_000:013d}") and "out of Kafka's range" in p for k, p in problems)
    assert any(k.endswith(f":etl-big-time:{10**20}") and "not epoch milliseconds" in p for k, p in problems)
    assert any(":etl-huge-time:999" in k and "not epoch milliseconds" in p for k, p in problems)
    long_key = next(k for k, p in problems if p.startswith("group id of 10000"))
    assert long_key.startswith(f"{setup.topic} / {'g' * 100}… (10000 characters, md5 ") and len(long_key) < 500
    assert StoreProblem.objects.get(store=setup.store, problem__startswith="topic of 300").occurrences == 2


def test_numbers_beyond_bigint_from_any_store_are_named_problems(unique_name):
    """Stores check their numbers as they read; the service checks them again before writing,
    whatever store (or future store) gave them."""
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers="127.0.0.1:1")
    store = store_get_or_create(name=unique_name("s"), kind="zookeeper", url="zk://127.0.0.1:1",
                                         cluster=cluster)
    t = now_ms()
    good, bad_offset, bad_time, bad_id, bad_name = (PipelineKey("orders", g) for g in (
        "etl", "big-offset", "big-time", "big-id", "x" * 1001))
    reading = StoreReading(
        pipelines=[good, bad_offset, bad_time, bad_id, bad_name], keeps_history=True,
        batches={
            good: [BatchOffsets("orders", "etl", t - 2000, {0: 0, 1: 0}),
                   BatchOffsets("orders", "etl", t - 1000, {0: 2**63 - 1, 1: 2**63 - 1})],
            bad_offset: [BatchOffsets("orders", "big-offset", t - 1000, {0: 10**30})],
            bad_time: [BatchOffsets("orders", "big-time", 10**20, {0: 1}),
                       BatchOffsets("orders", "big-time", t - 1000, {0: 4})],
            bad_id: [BatchOffsets("orders", "big-id", t - 1000, {0: 1}, batch_id=2**64)],
            bad_name: [BatchOffsets("orders", "x" * 1001, t - 1000, {0: 1})],
        },
        more={bad_name},
    )
    assert store_reading_record(store=store, reading=reading, now_ms=t) == 3

    etl = Pipeline.objects.get(store=store, group="etl")
    # The second batch's record count (2 * (2^63 - 1)) is past bigint: unknown, not an error.
    assert list(etl.batches.order_by("batch_time_ms").values_list("records", flat=True)) == [None, None]
    assert list(Pipeline.objects.get(store=store, group="big-time").batches.values_list("offsets", flat=True)) == [
        {"0": 4}]
    assert not Pipeline.objects.get(store=store, group="big-offset").batches.exists()
    assert not Pipeline.objects.get(store=store, group="big-id").batches.exists()
    assert not Pipeline.objects.filter(store=store, group="x" * 1001).exists()
    assert problems_of(store) == sorted([
        ("orders / big-id @ " + str(t - 1000), "batch id 18446744073709551616 is outside 0..2^63-1: not collected"),
        ("orders / big-offset @ " + str(t - 1000),
         f"partition 0: offset {10**30} is outside 0..2^63-1: not collected"),
        (f"orders / big-time @ {10**20}", f"batch time {10**20} ms is outside 0..2^63-1: not collected"),
        (f"orders / {storable.shown('x' * 1001)}", "group id of 1001 characters (limit 1000): not collected"),
    ])


def test_a_huge_group_name_in_zookeeper_costs_its_pipeline_only(stack, unique_name):
    root = f"/{unique_name('ow')}"
    raw = KazooClient(hosts=stack.zookeeper_hosts, timeout=5)
    raw.start(timeout=5)
    try:
        raw.create(f"{root}/consumers/etl/offsets/orders/0", b"5", makepath=True)
        raw.create(f"{root}/consumers/{'g' * 10_000}/offsets/orders/0", b"6", makepath=True)
        cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
        store = store_get_or_create(name=unique_name("s"), kind="zookeeper",
                                             url=f"zk://{stack.zookeeper_hosts}{root}", cluster=cluster)
        assert collect_once().errors == []
    finally:
        raw.delete(root, recursive=True)
        raw.stop()
        raw.close()
    assert list(Pipeline.objects.filter(store=store).values_list("topic", "group")) == [("orders", "etl")]
    assert Pipeline.objects.get(store=store).batches.count() == 1
    assert [p for _, p in problems_of(store)] == ["group id of 10000 characters (limit 1000): not collected"]
