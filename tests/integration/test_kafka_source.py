"""The Kafka streaming source (reference_job/kafka_source.py) against a real Tansu broker.

The broker tests call the reader directly; the `spark` tests run real streaming queries into
foreachBatch. Option parsing and limit splitting: tests/unit/test_kafka_source_options.py.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from reference_job.kafka_source import KafkaDataSource, KafkaInputPartition
from tests.unit.test_kafka_source_options import options, reader

QUERY_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kafka_bootstrap(stack):
    return stack.kafka_bootstrap


# --- helpers ----------------------------------------------------------------------------------


def make_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=10, request_timeout=10
    )
    futures[topic].result(timeout=10)


def produce(bootstrap: str, topic: str, counts: dict[int, int], tag: str = "v", first: int = 0) -> None:
    """`counts[p]` records to partition p, values f"{tag}-{p}-{i}" for i from `first`.
    One record per produce request: Tansu's high watermark is wrong for multi-record batches."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for p, n in counts.items():
        for i in range(first, first + n):
            producer.produce(topic, key=f"k{i}".encode(), value=f"{tag}-{p}-{i}".encode(), partition=p)
            producer.poll(0)
    assert producer.flush(10) == 0, "records still unsent after 10 s"


def run_query(spark, tmp_path, opts: dict[str, str], trigger: dict, steps=()) -> list[tuple[int, list]]:
    """Run a query into foreachBatch; returns [(batch_id, rows)] for the non-empty batches.
    With a processingTime trigger, each of `steps` runs after processAllAvailable()."""
    spark.dataSource.register(KafkaDataSource)
    batches: list[tuple[int, list]] = []

    def collect(df, batch_id):
        rows = [tuple(r) for r in df.collect()]
        if rows:
            batches.append((batch_id, rows))

    df = spark.readStream.format("offsetwatch_kafka").options(**opts).load()
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(**trigger)
        .start()
    )
    try:
        if "availableNow" in trigger:
            assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
        else:
            query.processAllAvailable()
            for step in steps:
                step(batches)
                query.processAllAvailable()
        if query.exception():
            raise AssertionError(f"query failed: {query.exception()}")
    finally:
        query.stop()
    return batches


def keyed(batches) -> list[tuple[int, int, str]]:
    return sorted((r[1], r[2], r[5].decode()) for _, rows in batches for r in rows)


def expected(counts: dict[int, range], tag: str = "v") -> list[tuple[int, int, str]]:
    return sorted((p, i, f"{tag}-{p}-{i}") for p, offsets in counts.items() for i in offsets)


# --- the reader against the broker (no Spark) --------------------------------------------


def test_offsets_against_broker(kafka_bootstrap, unique_name):
    topic = unique_name("ks")
    make_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, {0: 6, 1: 6, 2: 6})
    r = reader(options(kafka_bootstrap, topic, startingOffsets=f'{{"{topic}": {{"0": 4, "2": -1}}}}',
                       maxOffsetsPerPartition="3"))
    try:
        start = r.initialOffset()
        assert start == {topic: {"0": 4, "1": 0, "2": 6}}  # topic-keyed, like Spark's Kafka source
        assert r.latestOffset(start, r.getDefaultReadLimit()) == {topic: {"0": 6, "1": 3, "2": 6}}
        assert r.latestOffset(start, ReadMaxRows(2)) == {topic: {"0": 5, "1": 1, "2": 6}}
        assert r.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 6, "1": 6, "2": 6}}  # Trigger.Once
        assert r.reportLatestOffset() == {topic: {"0": 6, "1": 6, "2": 6}}
        parts = r.partitions(start, {topic: {"0": 6, "1": 3, "2": 6}})
        assert sorted((p.partition, p.start, p.end) for p in parts) == [(0, 4, 6), (1, 0, 3)]
        # A checkpoint written by earlier versions holds the flat form; a restart still reads it.
        assert r.latestOffset({"0": 6, "1": 3, "2": 6}, ReadAllAvailable()) == {topic: {"0": 6, "1": 6, "2": 6}}
        r.prepareForTriggerAvailableNow()
        produce(kafka_bootstrap, topic, {1: 2}, first=6)
        done = {topic: {"0": 6, "1": 6, "2": 6}}
        assert r.latestOffset(done, ReadAllAvailable()) == done
    finally:
        r.stop()


def test_broker_errors_name_topic_partition_and_broker(kafka_bootstrap, unique_name):
    topic = unique_name("ks")
    make_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, {0: 3})
    r = reader(options(kafka_bootstrap, topic, startingOffsets=f'{{"{topic}": {{"0": 9}}}}'))
    with pytest.raises(ValueError, match=rf"outside the available range \[0, 3\].*'{topic}' partition 0 on broker"):
        r.initialOffset()
    r.stop()
    missing = reader(options(kafka_bootstrap, unique_name("missing"), **{"kafka.request.timeout.ms": "3000"}))
    with pytest.raises(RuntimeError, match=f"on broker {kafka_bootstrap}: topic not found"):
        missing.initialOffset()
    missing.stop()
    bad = reader(options(kafka_bootstrap, topic, **{"kafka.security.protocol": "bogus"}))  # passed through
    with pytest.raises(RuntimeError, match=f"'{topic}' on broker {kafka_bootstrap}: cannot create a Kafka consumer"):
        bad.initialOffset()

    # read() must fail, not hang, when the broker never reaches the planned end offset.
    slow = reader(options(kafka_bootstrap, topic, **{"kafkaConsumer.pollTimeoutMs": "1000"}))
    rows = []
    with pytest.raises(RuntimeError, match=rf"'{topic}' partition 0 on broker .*\[1, 10\).*stuck at offset 3"):
        for row in slow.read(KafkaInputPartition(topic, 0, 1, 10)):
            rows.append(row)
    assert [r[2] for r in rows] == [1, 2]


# --- streaming queries ----------------------------------------------------------------------


@pytest.mark.spark
def test_available_now_reads_every_record_once(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("ks")
    make_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, {0: 20, 1: 20, 2: 20})
    batches = run_query(spark, tmp_path, options(kafka_bootstrap, topic, startingOffsets="earliest"),
                        {"availableNow": True})
    assert keyed(batches) == expected({p: range(20) for p in range(3)})
    row = batches[0][1][0]
    assert row[0] == topic and row[3] is not None and row[4].startswith(b"k")


@pytest.mark.spark
def test_starting_offsets_json_starts_exactly_there(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("ks")
    make_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, {0: 10, 1: 10, 2: 10})
    starting = f'{{"{topic}": {{"0": 7, "2": -1}}}}'  # partition 1 unnamed: earliest
    batches = run_query(spark, tmp_path, options(kafka_bootstrap, topic, startingOffsets=starting),
                        {"availableNow": True})
    assert keyed(batches) == expected({0: range(7, 10), 1: range(10)})


@pytest.mark.spark
@pytest.mark.parametrize("option, value, batches_at_least", [
    ("maxOffsetsPerPartition", "4", 3),  # 10 per partition -> 4 + 4 + 2
    ("maxOffsetsPerTrigger", "7", 5),  # 30 in all -> 7 + 7 + 7 + 7 + 2
])
def test_limits_split_into_batches(spark, kafka_bootstrap, unique_name, tmp_path, option, value, batches_at_least):
    topic = unique_name("ks")
    make_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, {0: 10, 1: 10, 2: 10})
    opts = options(kafka_bootstrap, topic, startingOffsets="earliest", **{option: value})
    batches = run_query(spark, tmp_path, opts, {"availableNow": True})
    assert keyed(batches) == expected({p: range(10) for p in range(3)})
    assert len(batches) >= batches_at_least
    for _, rows in batches:
        if option == "maxOffsetsPerTrigger":
            assert len(rows) <= int(value)
        else:
            for p in range(3):
                assert sum(1 for r in rows if r[1] == p) <= int(value)


@pytest.mark.spark
def test_records_produced_later_arrive_in_later_batches(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("ks")
    make_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, {0: 3, 1: 3, 2: 3}, tag="old")  # before start: skipped ("latest")
    seen_after_a: list[int] = []

    def round_a(batches):
        produce(kafka_bootstrap, topic, {0: 4, 1: 4, 2: 4}, tag="a", first=3)

    def round_b(batches):
        seen_after_a.extend(batch_id for batch_id, _ in batches)
        produce(kafka_bootstrap, topic, {0: 2, 2: 5}, tag="b", first=7)

    t0 = time.monotonic()
    batches = run_query(spark, tmp_path, options(kafka_bootstrap, topic, startingOffsets="latest"),
                        {"processingTime": "200 milliseconds"}, steps=[round_a, round_b])
    assert time.monotonic() - t0 < QUERY_TIMEOUT_S
    got = keyed(batches)
    want_a = expected({p: range(3, 7) for p in range(3)}, tag="a")
    want_b = expected({0: range(7, 9), 2: range(7, 12)}, tag="b")
    assert got == sorted(want_a + want_b)
    assert seen_after_a, "round A was not read before round B was produced"
    b_batches = {bid for bid, rows in batches if any(r[5].startswith(b"b-") for r in rows)}
    assert min(b_batches) > max(seen_after_a)
