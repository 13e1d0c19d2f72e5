"""The Structured Streaming checkpoint reader (streamoffsets/stores/checkpoint.py) against a checkpoint
Spark wrote: a real query with our Kafka source, the reader checked against what the query did
(which keeps the hand-built files of tests/unit/test_store_checkpoint.py honest about Spark's format).
"""
from __future__ import annotations

import json
import time

import pytest

from streamoffsets.stores.checkpoint import CheckpointStore
from streamoffsets.types import PipelineKey

QUERY_TIMEOUT_S = 60


@pytest.mark.spark
@pytest.mark.parametrize("named", [False, True], ids=["offsets-v1", "named-source-offsets-v2"])
def test_reads_a_real_checkpoint_written_by_spark(spark, stack, unique_name, tmp_path, named):
    from confluent_kafka import Consumer, TopicPartition

    from reference_job.kafka_source import KafkaDataSource
    from reference_job.producer import ensure_topic, produce

    topic = unique_name("ckpt")
    ensure_topic(stack.kafka_bootstrap, topic, 3)
    produce(stack.kafka_bootstrap, topic, 3, 30)  # 10 records per partition
    spark.dataSource.register(KafkaDataSource)
    seen: dict[int, dict[int, int]] = {}  # batch id -> highest offset + 1 per partition read in it

    def collect(df, batch_id):
        seen[batch_id] = {r.partition: r.next for r in df.groupBy("partition").agg({"offset": "max"})
                          .selectExpr("partition", "`max(offset)` + 1 AS next").collect()}

    evolution = "spark.sql.streaming.queryEvolution.enableSourceEvolution"
    if named:
        spark.conf.set(evolution, "true")
    try:
        reader = (spark.readStream.format("offsetwatch_kafka")
                  .option("kafka.bootstrap.servers", stack.kafka_bootstrap).option("subscribe", topic)
                  .option("startingOffsets", "earliest").option("maxOffsetsPerPartition", "4"))
        if named:
            reader = reader.name("events")
        query = (reader.load().writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "ckpt" / "my-query"))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
            assert query.exception() is None
            progress = {p.batchId: json.loads(p.sources[0].endOffset) for p in query.recentProgress}
        finally:
            query.stop()
    finally:
        if named:
            spark.conf.unset(evolution)

    first_line = (tmp_path / "ckpt" / "my-query" / "offsets" / "0").read_text().split("\n")[0]
    assert first_line == ("v2" if named else "v1")
    store = CheckpointStore.from_url(f"checkpoint://{tmp_path}/ckpt")  # the root holding my-query
    assert store.list_pipelines() == ([PipelineKey(topic, "my-query")], [])
    page = store.history(topic, "my-query")
    assert page.problems == []
    batches = page.batches
    assert [b.batch_id for b in batches] == list(range(len(batches))) and len(batches) >= 3  # 4 + 4 + 2
    assert all(b.committed for b in batches)
    times = [b.batch_time_ms for b in batches]
    assert times == sorted(times) and abs(times[-1] / 1000 - time.time()) < 300
    # The same end offsets as the engine reported for each batch as the query progressed...
    assert {b.batch_id: {topic: {str(p): o for p, o in b.offsets.items()}} for b in batches} == progress
    # ...and as the rows each batch actually read.
    previous = {0: 0, 1: 0, 2: 0}
    for b in batches:
        assert b.offsets == {**previous, **seen.get(b.batch_id, {})}
        previous = b.offsets
    # The last batch ends at the topic's high watermarks; a restart resumes there.
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": "ckpt-test"})
    try:
        highs = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)}
    finally:
        consumer.close()
    assert highs == {0: 10, 1: 10, 2: 10}
    assert batches[-1].offsets == highs
    assert store.load_latest(topic, "my-query") == batches[-1]
