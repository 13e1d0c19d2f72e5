"""`restart()` against real servers: a store, and the broker's watermarks.

Tansu cannot move the low watermark (delete_records crashes it) nor add partitions, so the
out-of-range and growth cases run here only against a full Kafka given by KAFKA_BOOTSTRAP
(e.g. `KAFKA_BOOTSTRAP=broker:9092 scripts/test.sh tests/integration/test_restart_kafka.py`); on Tansu they
are covered at the watermark seam in tests/unit/test_restart.py.
"""
from __future__ import annotations

import os

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from reference_job.producer import ensure_topic, produce
from streamoffsets.kafka import KafkaWatermarkReader
from streamoffsets.restart import StartRefused, restart
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets

FULL_KAFKA = os.environ.get("KAFKA_BOOTSTRAP", "")
needs_full_kafka = pytest.mark.skipif(
    not FULL_KAFKA, reason="needs a full Kafka broker in KAFKA_BOOTSTRAP: Tansu cannot delete records or add partitions"
)


@pytest.fixture
def file_store(tmp_path):
    return open_store(f"file://{tmp_path}")


def test_first_start_then_resume_against_tansu(stack, unique_name, file_store):
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 10)
    reader = KafkaWatermarkReader(stack.kafka_bootstrap)

    first = restart(file_store, topic, "g", reader.topic_watermarks)
    assert first.first_start and first.offsets == {0: 0, 1: 0}
    assert restart(file_store, topic, "g", reader.topic_watermarks, on_missing="latest").offsets == {0: 5, 1: 5}
    with pytest.raises(StartRefused):
        restart(file_store, topic, "g", reader.topic_watermarks, on_missing="fail")

    file_store.save_batch(BatchOffsets(topic, "g", 1_700_000_000_000, {0: 3, 1: 4}))
    again = restart(file_store, topic, "g", reader.topic_watermarks, out_of_range="fail")
    assert not again.first_start and again.offsets == {0: 3, 1: 4}


def test_high_out_of_range_against_tansu(stack, unique_name, file_store):
    """A store that remembers more than the (re-created) topic holds."""
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    produce(stack.kafka_bootstrap, topic, 1, 3)
    file_store.save_batch(BatchOffsets(topic, "g", 1, {0: 40}))
    reader = KafkaWatermarkReader(stack.kafka_bootstrap)
    plan = restart(file_store, topic, "g", reader.topic_watermarks)
    assert plan.offsets == {0: 3} and plan.clamps[0].kind == "high"
    with pytest.raises(StartRefused, match="partition 0: stored offset 40 is above the high watermark 3"):
        restart(file_store, topic, "g", reader.topic_watermarks, out_of_range="fail")


@needs_full_kafka
def test_low_out_of_range_and_partition_growth_on_full_kafka(unique_name, file_store):
    topic = unique_name("orders")
    ensure_topic(FULL_KAFKA, topic, 1)
    produce(FULL_KAFKA, topic, 1, 20)
    admin = AdminClient({"bootstrap.servers": FULL_KAFKA})
    admin.delete_records([TopicPartition(topic, 0, 12)])[TopicPartition(topic, 0, 12)].result(timeout=30)
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
    file_store.save_batch(BatchOffsets(topic, "g", 1, {0: 5}))
    plan = restart(file_store, topic, "g", KafkaWatermarkReader(FULL_KAFKA).topic_watermarks)
    assert plan.offsets == {0: 12, 1: 0}
    assert plan.new_partitions == [1]
    assert plan.clamps[0].messages_lost == 7


@pytest.mark.skipif(not FULL_KAFKA, reason="needs a full Kafka broker in KAFKA_BOOTSTRAP: Tansu ignores the timestamp "
                                            "of a ListOffsets-by-time request (always answers 0)")
def test_offsets_for_a_point_in_time_on_full_kafka(unique_name):
    """The broker's timestamp index: the first record at or after the time; none after: the end."""
    from confluent_kafka import Producer

    topic = unique_name("orders")
    ensure_topic(FULL_KAFKA, topic, 1)
    producer = Producer({"bootstrap.servers": FULL_KAFKA, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=b"x", partition=0, timestamp=1_700_000_000_000 + i * 1_000)
    producer.flush(10)
    reader = KafkaWatermarkReader(FULL_KAFKA)
    assert reader.offsets_for_time(topic, 1_700_000_004_500) == {0: 5}
    assert reader.offsets_for_time(topic, 1_800_000_000_000) == {0: 10}
