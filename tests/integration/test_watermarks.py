"""Low/high watermarks against the real broker (Tansu)."""
from __future__ import annotations

import pytest

from devstack.components import free_port
from reference_job.producer import ensure_topic, produce
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


@pytest.mark.parametrize("config", [
    {"security.protocol": "ssl"},  # a TLS client against a plaintext broker
    {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
     "sasl.password": "p"},  # SASL the broker does not offer
])
def test_record_timestamps_are_read_with_the_clusters_client_config(stack, unique_name, config):
    """Issue #13: the record-timestamp consumer was built without the cluster's configuration, so
    on a SASL/TLS cluster it could not connect while the watermarks could (and here, against a
    plaintext Tansu, it read what the configured clients cannot)."""
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    produce(stack.kafka_bootstrap, topic, 1, 5)
    plain = KafkaWatermarkReader(stack.kafka_bootstrap, timeout_s=2, config={"client.id": "offset-watch-test"})
    assert set(plain.record_timestamps({(topic, 0): 1})) == {(topic, 0)}  # a harmless config still reads

    configured = KafkaWatermarkReader(stack.kafka_bootstrap, timeout_s=2, config=config)
    with pytest.raises(StoreUnreachable, match="metadata"):
        configured.watermarks([topic])
    with pytest.raises(StoreUnreachable, match="cannot read records for their timestamps"):
        configured.record_timestamps({(topic, 0): 1})


def test_compacted_topics_are_named_from_their_cleanup_policy(stack, unique_name):
    """Issue #13 (conformance corpus): a compacted topic's lag counts offsets with gaps, an upper
    bound; the policy is read with DescribeConfigs, a topic it cannot read is left out."""
    from confluent_kafka.admin import AdminClient, NewTopic

    names = {policy: unique_name("cp") for policy in ("compact", "delete", "compact,delete")}
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1, config={"cleanup.policy": p})
                                   for p, t in names.items()])
    for future in futures.values():
        future.result(10)
    reader = KafkaWatermarkReader(stack.kafka_bootstrap)
    got = reader.compacted_topics([*names.values(), unique_name("absent")])
    assert {t: got.get(t) for t in names.values()} == {
        names["compact"]: True, names["delete"]: False, names["compact,delete"]: True}
    assert reader.compacted_topics([]) == {}


def test_topic_policies_are_read_once_per_max_age(monkeypatch):
    """One DescribeConfigs per topic per TOPIC_POLICY_MAX_AGE_S, not one per cycle (a fake reader
    at the seam counts the asks)."""
    from streamoffsets.stores import reading as readers

    asked = []

    class Reader:
        def compacted_topics(self, topics):
            asked.append(sorted(topics))
            return {"profiles": True}  # "gone" unreadable: left out

    clock = [1000.0]
    monkeypatch.setattr(readers, "_topic_policies", {})
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    assert readers.compacted_topics(Reader(), "b:9092", ["profiles", "orders"], max_age_s=60) == {"profiles"}
    clock[0] += 30
    assert readers.compacted_topics(Reader(), "b:9092", ["profiles", "orders", "gone"], max_age_s=60) == {"profiles"}
    clock[0] += 31  # profiles and orders are 61 s old, gone 31 s
    assert readers.compacted_topics(Reader(), "b:9092", ["profiles", "orders", "gone"], max_age_s=60) == {"profiles"}
    assert asked == [["orders", "profiles"], ["gone"], ["orders", "profiles"]]
