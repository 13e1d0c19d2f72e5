"""Kafka consumer-group offsets as a store, against the real broker (Tansu)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from devstack.components import free_port
from reference_job.producer import ensure_topic, produce
from streamoffsets.errors import StoreUnreachable
from streamoffsets.stores.kafka_groups import KafkaGroupOffsetStore
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets, PipelineKey


@pytest.fixture
def store(stack):
    s = open_store(f"kafka://{stack.kafka_bootstrap}")
    yield s
    s.close()


def test_open_store_by_url(store):
    assert isinstance(store, KafkaGroupOffsetStore) and store.writable and not store.keeps_history


def test_save_commits_and_load_reads_back(store, stack, unique_name):
    topic, group = unique_name("orders"), unique_name("billing")
    ensure_topic(stack.kafka_bootstrap, topic, 3)
    produce(stack.kafka_bootstrap, topic, 3, 30)
    store.save_batch(BatchOffsets(topic, group, 1_700_000_000_000, {0: 4, 1: 5, 2: 6}))
    store.save_batch(BatchOffsets(topic, group, 1_700_000_005_000, {0: 7, 1: 8, 2: 9}))
    before = int(time.time() * 1000) - 1
    latest = store.load_latest(topic, group)
    assert latest.offsets == {0: 7, 1: 8, 2: 9}
    # The commit's metadata carries the batch time where the broker keeps it (real Kafka);
    # Tansu drops it, so the observation time stands in.
    assert latest.batch_time_ms == 1_700_000_005_000 or latest.batch_time_ms >= before
    assert store.load_latest(topic, unique_name("nobody")) is None


def test_offsets_are_visible_to_a_plain_kafka_consumer_of_the_group(store, stack, unique_name):
    topic, group = unique_name("orders"), unique_name("billing")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    produce(stack.kafka_bootstrap, topic, 1, 5)
    store.save_batch(BatchOffsets(topic, group, 1, {0: 3}))
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": group})
    try:
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    finally:
        consumer.close()


def test_list_pipelines_finds_every_committed_topic_of_every_group(store, stack, unique_name):
    t1, t2, g1, g2 = unique_name("a"), unique_name("b"), unique_name("g"), unique_name("g")
    for t in (t1, t2):
        ensure_topic(stack.kafka_bootstrap, t, 1)
    store.save_batch(BatchOffsets(t1, g1, 1, {0: 0}))
    store.save_batch(BatchOffsets(t2, g1, 1, {0: 0}))
    store.save_batch(BatchOffsets(t1, g2, 1, {0: 0}))
    pipelines, problems = store.list_pipelines()
    assert {PipelineKey(t1, g1), PipelineKey(t2, g1), PipelineKey(t1, g2)} <= set(pipelines)
    assert problems == []


def test_history_is_the_current_state_in_range(store, stack, unique_name):
    topic, group = unique_name("orders"), unique_name("g")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    store.save_batch(BatchOffsets(topic, group, 1, {0: 0}))
    assert [b.offsets for b in store.history(topic, group).batches] == [{0: 0}]
    assert store.history(topic, group, start_ms=int(time.time() * 1000) + 3_600_000).batches == []


def test_unreachable_cluster_is_a_typed_error():
    dead = KafkaGroupOffsetStore(f"127.0.0.1:{free_port()}", timeout_s=1.0)
    with pytest.raises(StoreUnreachable, match="kafka://127.0.0.1"):
        dead.load_latest("orders", "billing")


def test_a_down_broker_is_a_failing_read_not_a_store_without_groups():
    """Issue #11, observation 4: ListConsumerGroups reports an unreachable broker in `errors`
    and no exception; the snapshot a collector takes was then a success with zero groups."""
    dead = KafkaGroupOffsetStore(f"127.0.0.1:{free_port()}", timeout_s=1.0)
    with pytest.raises(StoreUnreachable, match="cannot list consumer groups"):
        dead.snapshot()
    with pytest.raises(StoreUnreachable, match="kafka://127.0.0.1"):
        dead.list_pipelines()


def test_the_ping_lists_the_groups_once_for_the_read_that_follows(store, stack, unique_name, monkeypatch):
    """#16: the ping is the consumer-group listing the read starts with (no metadata of every
    topic's partitions): the snapshot after a ping lists nothing again, and finds what it finds
    without one."""
    topic, group = unique_name("ping"), unique_name("ping-job")
    ensure_topic(stack.kafka_bootstrap, topic, partitions=1)
    store.save_batch(BatchOffsets(topic, group, 0, {0: 0}))
    fresh = KafkaGroupOffsetStore(stack.kafka_bootstrap)
    without_ping, _ = fresh.snapshot()
    store.ping(5.0)
    listings = []
    real = store._list_groups
    monkeypatch.setattr(store, "_list_groups", lambda *args: listings.append(args) or real(*args))
    after_ping, _ = store.snapshot()
    assert listings == []  # the ping's listing was used
    assert PipelineKey(topic, group) in after_ping
    assert set(after_ping) == set(without_ping)
    store.snapshot()  # the next read lists again: a ping's listing is used once
    assert len(listings) == 1
    fresh.close()


def test_a_ping_of_a_down_broker_fails_within_its_timeout():
    dead = KafkaGroupOffsetStore(f"127.0.0.1:{free_port()}", timeout_s=10.0)
    t0 = time.monotonic()
    with pytest.raises(StoreUnreachable, match="no answer from the brokers within 1 s"):
        dead.ping(1.0)
    assert time.monotonic() - t0 < 5.0  # the ping's timeout, not the reads' 10 s
