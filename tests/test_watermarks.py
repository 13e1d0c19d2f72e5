"""Low/high watermarks against the real broker (Tansu)."""
from __future__ import annotations

import pytest

from localstack.components import free_port
from pipeline.producer import ensure_topic, produce
from streamoffsets.errors import StoreUnreachable
from streamoffsets.kafka import KafkaWatermarkReader, MissingTopic
from streamoffsets.types import Watermarks


def test_watermarks_of_every_partition(stack, unique_name):
    topic = unique_name("wm")
    assert ensure_topic(stack.kafka_bootstrap, topic, partitions=3) is True
    produce(stack.kafka_bootstrap, topic, partitions=3, count=10)  # 4, 3, 3 records
    reader = KafkaWatermarkReader(stack.kafka_bootstrap)
    assert reader.topic_watermarks(topic) == {0: Watermarks(0, 0, 4), 1: Watermarks(1, 0, 3), 2: Watermarks(2, 0, 3)}


def test_missing_topic_is_reported_and_others_still_read(stack, unique_name):
    topic = unique_name("wm")
    ensure_topic(stack.kafka_bootstrap, topic, partitions=1)
    result = KafkaWatermarkReader(stack.kafka_bootstrap).watermarks([topic, "no-such-topic-here"])
    assert result.by_topic[topic] == {0: Watermarks(0, 0, 0)}
    assert "no-such-topic-here" in result.missing
    with pytest.raises(MissingTopic):
        KafkaWatermarkReader(stack.kafka_bootstrap).topic_watermarks("no-such-topic-here")


def test_unreachable_cluster_is_a_typed_error():
    reader = KafkaWatermarkReader(f"127.0.0.1:{free_port()}", timeout_s=1.0)
    with pytest.raises(StoreUnreachable) as err:
        reader.watermarks(["orders"])
    assert "kafka://127.0.0.1" in str(err.value)


def test_chunked_requests_return_every_partition(stack, unique_name):
    topics = [unique_name("wm") for _ in range(3)]
    for t in topics:
        ensure_topic(stack.kafka_bootstrap, t, partitions=4)
    produce(stack.kafka_bootstrap, topics[1], partitions=4, count=8)
    result = KafkaWatermarkReader(stack.kafka_bootstrap, chunk_size=5).watermarks(topics)  # 12 partitions, 3 chunks
    assert sum(len(parts) for parts in result.by_topic.values()) == 12
    assert result.by_topic[topics[1]] == {p: Watermarks(p, 0, 2) for p in range(4)}
    assert result.by_topic[topics[0]][3] == Watermarks(3, 0, 0)
