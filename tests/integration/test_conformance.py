"""The conformance corpus (issue #13; over 400 lines: one case per store kind and situation, over
one running stack): named real-world situations, each written through the
public clients into the running stack (Tansu, ZooKeeper, the HBase Thrift stand-in, files,
checkpoint directories), collected by the real collection code and read back through the API.

THE TABLE IS THE SPEC: one row = a name, the store kinds it runs on, how it is written and every
number the API must report per partition and per pipeline (committed, lag, state, lag in seconds
and its method, why a lag is absent, total lag, status and its reasons). Writers and checks are in
tests/corpus.py. A row that Tansu cannot produce enters at the watermark seam and says why
(`seam`).

Lag in seconds is read from the record at every group's position from the first cycle (rows 1
and 2: every lagging partition "record timestamp"); partition-level rules flag a stuck partition
while its neighbours move (the last row). Reasons holding a measured duration are patterns.
"""
from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from django.urls import reverse

from collectors.cycle import collect_once
from dashboard.models import Pipeline, StoreProblem
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create, watermarks_record
from reference_job.producer import ensure_topic, produce
from tests.corpus import KINDS, STORE_KIND, Expect, Part, Row, World, check_pipeline, spark_batch

pytestmark = pytest.mark.django_db

OK, LAGGING, HIGH_OOR, MISSING = "ok", "lagging", "high out-of-range", "missing in store"
CAUGHT_UP, RECORD = "caught up", "record timestamp"
NO_SAMPLES = "unknown: not enough watermark samples yet"
NORMAL = ["consuming normally"]


def _topic(w: World, prefix: str, partitions: int, records: int) -> str:
    topic = w.unique_name(prefix)
    ensure_topic(w.bootstrap, topic, partitions)
    if records:
        produce(w.bootstrap, topic, partitions, records)  # round-robin: records / partitions each
    return topic


# --- 1. many groups on one topic at different positions ------------------------------------------


def many_groups(w: World) -> dict[str, Expect]:
    topic = _topic(w, "orders", 2, 40)  # 20 per partition
    g = {name: w.unique_name(name) for name in ("done", "near", "middle", "start")}
    w.commit(topic, g["done"], {0: 20, 1: 20})
    w.commit(topic, g["near"], {0: 19, 1: 20})
    w.commit(topic, g["middle"], {0: 10, 1: 5})
    w.commit(topic, g["start"], {0: 0, 1: 0})
    collect_once_clean()
    return {
        g["done"]: Expect({0: Part(20, 0, OK, CAUGHT_UP), 1: Part(20, 0, OK, CAUGHT_UP)}, 0, "OK", ["caught up"],
                          lag_seconds_method=CAUGHT_UP),
        # Every group's position is read (issue #13 observation 3): each lagging partition's lag in
        # seconds comes from its own record, from the first cycle.
        g["near"]: Expect({0: Part(19, 1, LAGGING, RECORD), 1: Part(20, 0, OK, CAUGHT_UP)}, 1, "OK", NORMAL,
                          lag_seconds_method=RECORD),
        g["middle"]: Expect({0: Part(10, 10, LAGGING, RECORD), 1: Part(5, 15, LAGGING, RECORD)}, 25, "OK", NORMAL,
                            lag_seconds_method=RECORD),
        g["start"]: Expect({0: Part(0, 20, LAGGING, RECORD), 1: Part(0, 20, LAGGING, RECORD)}, 40, "OK", NORMAL,
                           lag_seconds_method=RECORD),
    }


# --- 2. an idle topic: records produced, then nothing ----------------------------------------------


def idle_topic(w: World) -> dict[str, Expect]:
    topic = _topic(w, "audit", 2, 8)  # 4 per partition, then the topic receives nothing
    g = {name: w.unique_name(name) for name in ("done", "behind", "further")}
    w.commit(topic, g["done"], {0: 4, 1: 4})
    w.commit(topic, g["behind"], {0: 3, 1: 4})
    w.commit(topic, g["further"], {0: 1, 1: 2})
    for _ in range(2):  # the high watermark stays flat over several cycles
        collect_once_clean()
        time.sleep(0.5)
    collect_once_clean()
    return {
        g["done"]: Expect({0: Part(4, 0, OK, CAUGHT_UP), 1: Part(4, 0, OK, CAUGHT_UP)}, 0, "OK", ["caught up"],
                          lag_seconds_method=CAUGHT_UP),
        # "behind" is not the most lagging group and the high watermark is flat: its own record
        # still gives its lag in seconds (issue #13 observation 3).
        g["behind"]: Expect({0: Part(3, 1, LAGGING, RECORD), 1: Part(4, 0, OK, CAUGHT_UP)}, 1, "OK", NORMAL,
                            lag_seconds_method=RECORD),
        g["further"]: Expect({0: Part(1, 3, LAGGING, RECORD), 1: Part(2, 2, LAGGING, RECORD)}, 5, "OK", NORMAL,
                             lag_seconds_method=RECORD),
    }


# --- 3. a transactional producer's topic -------------------------------------------------------


def transactional_topic(w: World) -> dict[str, Expect]:
    """Three transactions of 3 records each, two committed, one aborted: offsets 0-2 records, 3
    the commit marker, 4-6 records, 7 the marker, 8-10 aborted records, 11 the abort marker; the
    high watermark is 12. Tansu 0.6 writes the markers as Kafka does."""
    topic = _topic(w, "payments", 1, 0)
    producer = Producer({"bootstrap.servers": w.bootstrap, "transactional.id": w.unique_name("tx"),
                         "linger.ms": 0, "batch.num.messages": 1})
    producer.init_transactions(10)
    for outcome in ("commit", "commit", "abort"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=b'{"amount": %d}' % i, partition=0)
        if outcome == "commit":
            producer.commit_transaction(10)
        else:
            producer.flush(10)  # the records reach the log, then the abort marker follows them
            producer.abort_transaction(10)
    # A read_committed consumer reads everything (the 6 committed records) and commits its
    # position: the high watermark, past the last marker (not the last record's offset + 1).
    reader = w.unique_name("reader")
    consumer = Consumer({"bootstrap.servers": w.bootstrap, "group.id": reader, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read, deadline = 0, time.monotonic() + 15
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                break
            raise AssertionError(message.error())
        read += 1
    # 6 on Kafka; Tansu 0.6 hands the aborted records to a read_committed consumer too (its fetch
    # answer lists no aborted transactions). The position after the last marker is the same.
    assert read in (6, 9)
    consumer.commit(asynchronous=False)
    consumer.close()
    # A consumer that finished the first transaction: its position is past that marker.
    first = w.unique_name("first")
    w.commit(topic, first, {0: 4})
    collect_once_clean()
    return {
        reader: Expect({0: Part(12, 0, OK, CAUGHT_UP)}, 0, "OK", ["caught up"], lag_seconds_method=CAUGHT_UP),
        # Lag in offsets counts the markers and the aborted records: 8 behind, 3 records to read
        # (an upper bound, as on a compacted topic).
        first: Expect({0: Part(4, 8, LAGGING, RECORD)}, 8, "OK", NORMAL, lag_seconds_method=RECORD),
    }


# --- 4. a compacted topic --------------------------------------------------------------------------


def compacted_topic(w: World) -> dict[str, Expect]:
    """cleanup.policy=compact: the log cleaner removes older records of a key, so offsets have
    gaps and high - committed counts offsets, not messages: an upper bound the API must say.
    (Tansu never compacts; the policy alone is what the product must read.)"""
    topic = w.unique_name("profiles")
    admin = AdminClient({"bootstrap.servers": w.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"cleanup.policy": "compact"})])[topic].result(10)
    producer = Producer({"bootstrap.servers": w.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(6):
        producer.produce(topic, key=b"user-%d" % (i % 2), value=b"v%d" % i, partition=0)
    producer.flush(10)
    group = w.unique_name("profiles-sync")
    w.commit(topic, group, {0: 2})
    collect_once_clean()
    pipeline = Pipeline.objects.get(store=w.store, group=group)
    page = w.api.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    row = page.split('data-partition="0"', 1)[1].split("</tr>", 1)[0]
    assert 'title="at most: a compacted topic has offset gaps">≤ 4</td>' in row
    return {group: Expect({0: Part(2, 4, LAGGING, RECORD, upper_bound=True)}, 4, "OK", NORMAL,
                          lag_seconds_method=RECORD)}


# --- 5. a topic deleted and re-created ---------------------------------------------------------------


def topic_recreated(w: World) -> dict[str, Expect]:
    topic = _topic(w, "clicks", 1, 10)
    group = w.unique_name("sessionizer")
    w.commit(topic, group, {0: 10})
    collect_once_clean()
    admin = AdminClient({"bootstrap.servers": w.bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    ensure_topic(w.bootstrap, topic, 1)
    produce(w.bootstrap, topic, 1, 3)  # the new topic's high watermark is 3, the stored offset 10
    collect_once_clean()
    why = "out of range: committed 10 above the high watermark 3"
    return {group: Expect(
        {0: Part(10, None, HIGH_OOR, "", why, high=3)}, None, "ERR",
        ["partition 0: committed offset 10 is beyond the high watermark 3: the position does not exist "
         "(topic re-created or wrong cluster?)"],
        lag_seconds_method="none: partition 0 is out of range")}


# --- 6. partitions added to a topic ------------------------------------------------------------------


def partitions_added(w: World) -> dict[str, Expect]:
    """Two partitions grow to four; the group has no offset for the new ones yet: they are
    "missing in store", no lag and no lag in seconds, and the status does not name them."""
    from django.utils import timezone

    from streamoffsets.kafka import WatermarkResult
    from streamoffsets.types import Watermarks

    topic = _topic(w, "events", 2, 10)  # 5 per partition
    group = w.unique_name("enricher")
    w.commit(topic, group, {0: 5, 1: 3})
    collect_once_clean()
    # Tansu cannot add partitions (CreatePartitions unsupported): the grown topic's watermarks
    # enter at the seam the cluster poll writes through; new partitions 2 (4 records) and 3 (none).
    ABSENT = "no stored offset for this partition"
    grown = {0: Watermarks(0, 0, 5), 1: Watermarks(1, 0, 5), 2: Watermarks(2, 0, 4), 3: Watermarks(3, 0, 0)}
    watermarks_record(cluster=w.cluster, result=WatermarkResult(by_topic={topic: grown}),
                               sampled_at=timezone.now())
    # Partition 1's record is not read at the seam (no cluster poll reads records there); its
    # high watermark stood still over the two samples: a lower bound, said so.
    flat = "at least: high watermark flat since first sampled"
    return {group: Expect(
        {0: Part(5, 0, OK, CAUGHT_UP), 1: Part(3, 2, LAGGING, flat),
         2: Part(None, None, MISSING, "", ABSENT, high=4), 3: Part(None, None, MISSING, "", ABSENT, high=0)},
        2, "OK", NORMAL, lag_seconds_method=flat)}


# --- 7. a batch time far in the future and a batch arriving late (HBase) ----------------------------


def future_and_late_batches(w: World) -> dict[str, Expect]:
    topic = _topic(w, "metrics", 1, 30)
    group = w.unique_name("rollup")
    now_ms = int(time.time() * 1000)
    w.commit(topic, group, {0: 10}, batch_ms=now_ms - 60_000)
    w.commit(topic, group, {0: 20}, batch_ms=now_ms - 20_000)
    collect_once_clean()
    # A writer whose clock is a year ahead, and a batch from 40 s ago written only now.
    future_ms = now_ms + 365 * 24 * 3600 * 1000
    w.commit(topic, group, {0: 30}, batch_ms=future_ms)
    w.commit(topic, group, {0: 15}, batch_ms=now_ms - 40_000)
    collect_once_clean()
    pipeline = Pipeline.objects.get(store=w.store, group=group)
    batches = w.api.get(f"/api/v1/pipelines/{pipeline.pk}/batches").json()["batches"]
    # The late batch is kept in its place (its record count unknown); the future one is not imported.
    assert [(b["batch_time_ms"], b["offsets"], b["records"]) for b in batches] == [
        (now_ms - 20_000, {"0": 20}, 10), (now_ms - 40_000, {"0": 15}, None), (now_ms - 60_000, {"0": 10}, None)]
    [problem] = StoreProblem.objects.filter(store=w.store)
    assert problem.key == f"{topic}:{group}:{future_ms:013d}"
    assert problem.problem.endswith("s ahead of the collector's clock: not imported while it is in the future "
                                    "(check the writer's clock)")
    # The position is the newest batch not in the future: 20, never the future one's 30.
    return {group: Expect({0: Part(20, 10, LAGGING, RECORD)}, 10, "OK", NORMAL, lag_seconds_method=RECORD)}


# --- 8. names of the maximum length -------------------------------------------------------------------


def _long(w: World, prefix: str, length: int) -> str:
    name = w.unique_name(prefix)
    return name + "x" * (length - len(name))


def longest_names(w: World) -> dict[str, Expect]:
    """Kafka's longest topic name (249 characters) and a 1,000-character group id (Kafka sets no
    limit; the dashboard keeps 1,000): collected and reported in full."""
    topic = _long(w, "t", 249)
    ensure_topic(w.bootstrap, topic, 1)
    produce(w.bootstrap, topic, 1, 5)
    group = _long(w, "g", 1000)
    w.commit(topic, group, {0: 2})
    collect_once_clean()
    pipeline = Pipeline.objects.get(store=w.store, group=group)
    detail = w.api.get(f"/api/v1/pipelines/{pipeline.pk}").json()
    assert (detail["topic"], detail["group"]) == (topic, group)
    return {group: Expect({0: Part(2, 3, LAGGING, RECORD)}, 3, "OK", NORMAL, lag_seconds_method=RECORD)}


def names_too_long(w: World) -> dict[str, Expect]:
    """A 250-character topic (Kafka refuses it: no topic it could measure) and a 1,001-character
    group id in a store anyone can write: each is its row's named problem, the rest is collected."""
    topic = _topic(w, "orders", 1, 4)
    group = w.unique_name("ok")
    w.commit(topic, group, {0: 1})
    long_topic, long_group = _long(w, "t", 250), _long(w, "g", 1001)
    w.commit(long_topic, group, {0: 1})
    w.commit(topic, long_group, {0: 1})
    collect_once_clean()
    problems = sorted(StoreProblem.objects.filter(store=w.store).values_list("problem", flat=True))
    assert problems == ["group id of 1001 characters (limit 1000): not collected",
                        "topic of 250 characters (limit 249): not collected"]
    assert set(Pipeline.objects.filter(store=w.store).values_list("topic", "group")) == {(topic, group)}
    return {group: Expect({0: Part(1, 3, LAGGING, RECORD)}, 3, "OK", NORMAL, lag_seconds_method=RECORD)}


# --- 9. every partition count up to 1,000 in one pipeline ---------------------------------------------


def thousand_partitions(w: World) -> dict[str, Expect]:
    """One topic of 1,000 partitions, one record in each; the group read every partition but
    each tenth: 100 partitions 1 behind."""
    topic = _topic(w, "wide", 1000, 1000)
    group = w.unique_name("wide-reader")
    w.commit(topic, group, {p: 0 if p % 10 == 9 else 1 for p in range(1000)})
    collect_once_clean()
    return {group: Expect(
        {p: Part(0, 1, LAGGING, RECORD) if p % 10 == 9 else Part(1, 0, OK, CAUGHT_UP) for p in range(1000)},
        100, "OK", NORMAL, lag_seconds_method=RECORD)}


# --- more situations real platforms produce ---------------------------------------------------------


def checkpoint_mid_batch(w: World) -> dict[str, Expect]:
    """Spark wrote offsets/3 and is running batch 3 (no commits/3): the position is batch 2's."""
    topic = _topic(w, "orders", 2, 40)  # 20 per partition
    query = w.unique_name("enricher")
    now_ms = int(time.time() * 1000)
    for batch_id in range(3):  # committed: 4, 8, 12 per partition
        w.commit(topic, query, {0: 4 * batch_id + 4, 1: 4 * batch_id + 4}, batch_ms=now_ms - 3000 + batch_id * 1000)
    spark_batch(w.root / query, 3, topic, {0: 18, 1: 20}, now_ms, committed=False)
    collect_once_clean()
    pipeline = Pipeline.objects.get(store=w.store, group=query)
    batches = w.api.get(f"/api/v1/pipelines/{pipeline.pk}/batches").json()["batches"]
    assert [(b["batch_id"], b["committed"], b["offsets"]) for b in batches] == [
        (3, False, {"0": 18, "1": 20}), (2, True, {"0": 12, "1": 12}), (1, True, {"0": 8, "1": 8}),
        (0, True, {"0": 4, "1": 4})]
    return {query: Expect({0: Part(12, 8, LAGGING, RECORD), 1: Part(12, 8, LAGGING, RECORD)}, 16, "OK", NORMAL,
                          lag_seconds_method=RECORD)}


def some_partitions_never_committed(w: World) -> dict[str, Expect]:
    """Four partitions; the group's consumers committed only partitions 0 and 2 (the others'
    consumer never finished a batch): 1 and 3 are "missing in store", never "caught up"."""
    topic = _topic(w, "invoices", 4, 20)  # 5 per partition
    group = w.unique_name("biller")
    w.commit(topic, group, {0: 5, 2: 1})
    collect_once_clean()
    absent = "no stored offset for this partition"
    return {group: Expect(
        {0: Part(5, 0, OK, CAUGHT_UP), 1: Part(None, None, MISSING, "", absent, high=5),
         2: Part(1, 4, LAGGING, RECORD), 3: Part(None, None, MISSING, "", absent, high=5)},
        4, "OK", NORMAL, lag_seconds_method=RECORD)}


def one_partition_stuck(w: World) -> dict[str, Expect]:
    """Issue #13 observation 4: partitions 0-2 re-committed at the same offset while their
    messages wait (a consumer thread stuck on a poison message), partition 3 advancing."""
    topic = _topic(w, "trades", 4, 40)  # 10 per partition
    group = w.unique_name("settler")
    w.commit(topic, group, {0: 2, 1: 2, 2: 2, 3: 2})
    collect_once_clean()
    for step in range(1, 5):
        time.sleep(1.0)
        w.commit(topic, group, {0: 2, 1: 2, 2: 2, 3: 2 + step})
        collect_once_clean()
    # The pipeline's batches keep coming and partition 3 moves, but partitions 0-2 are STALLED,
    # each with its own reason (streamoffsets.partition_rules, rule 2); partition 3 never is. A
    # file store keeps no per-partition write time, and its reasons say what that means.
    note = r" \(this store does not record when each partition was written: a stopped partition reads as stalled\)"
    note = "" if w.kind == "zookeeper" else note

    def stalled(p: int) -> re.Pattern:
        return re.compile(rf"partition {p} stalled at offset 2 for \d+ s \(\d+ commit intervals\) with 8 messages "
                          rf"waiting while partition 3 advanced{note}")

    parts = {p: Part(2, 8, LAGGING, RECORD, status="STALLED", status_reason=stalled(p)) for p in (0, 1, 2)}
    return {group: Expect({**parts, 3: Part(6, 4, LAGGING, RECORD)}, 28, "STALLED",
                          [stalled(0), stalled(1), stalled(2)], lag_seconds_method=RECORD)}


def collect_once_clean() -> None:
    summary = collect_once()
    assert summary.errors == [], summary.errors


ROWS = [
    Row("many groups on one topic at different positions", KINDS, many_groups),
    Row("an idle topic with lagging and caught-up groups", KINDS, idle_topic),
    Row("a transactional producer's topic: markers take offsets", ("kafka-group",), transactional_topic),
    Row("a compacted topic: lag in messages is an upper bound", ("kafka-group", "zookeeper"), compacted_topic),
    # Not on a Kafka group: Kafka deletes a group's committed offsets with the topic.
    Row("a topic deleted and re-created", ("zookeeper", "file", "hbase", "checkpoint"), topic_recreated),
    Row("partitions added to a topic", ("zookeeper", "kafka-group"), partitions_added,
        seam="fed at the watermark seam: Tansu 0.6 does not support CreatePartitions"),
    Row("a batch time far in the future and a batch arriving late", ("hbase",), future_and_late_batches),
    Row("the longest topic name and a long group id", ("kafka-group", "zookeeper"), longest_names),
    Row("a 250-character topic and a 1,001-character group id are named problems", ("zookeeper",),
        names_too_long),
    Row("1,000 partitions in one pipeline", ("kafka-group",), thousand_partitions),
    Row("a checkpoint mid-batch: offsets/N written, commits/N not yet", ("checkpoint",), checkpoint_mid_batch),
    Row("a group that committed only some partitions", ("kafka-group", "zookeeper", "hbase", "file"),
        some_partitions_never_committed),
    Row("partitions 0-2 stuck (re-committed unchanged) while partition 3 advances", ("zookeeper", "file"),
        one_partition_stuck),
]


def _cases():
    for row in ROWS:
        for kind in row.kinds:
            yield pytest.param(row, kind, id=f"{row.name} [{kind}]")


@pytest.mark.parametrize("row,kind", list(_cases()))
def test_situation(row: Row, kind: str, client, vera_logged_in, stack, tmp_path, unique_name):
    world = World(kind, stack, tmp_path, unique_name)
    cluster = cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("store"), kind=STORE_KIND[kind], url=world.url,
                                         cluster=cluster)
    world.cluster, world.store, world.api = cluster, store, client
    try:
        expected = row.write(world)
        elapsed = world.elapsed_s()
        listed = {p["id"]: p for p in client.get("/api/v1/pipelines", {"store": store.name}).json()["pipelines"]}
        for group, expect in expected.items():
            pipeline = Pipeline.objects.get(store=store, group=group)
            detail = client.get(f"/api/v1/pipelines/{pipeline.pk}").json()
            partitions = client.get(f"/api/v1/pipelines/{pipeline.pk}/partitions").json()
            check_pipeline(detail, partitions, expect, elapsed)
            # The list answers the same numbers as the pipeline's own page of the API.
            assert listed[pipeline.pk] == {k: v for k, v in detail.items() if k not in ("partitions", "freshness")}
    finally:
        world.close()
