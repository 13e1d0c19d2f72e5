"""The reference PySpark job against Tansu and the HBase Thrift server, in the session's SparkSession."""
from __future__ import annotations

import pytest

from reference_job.job import JobConfig, ReferenceJob
from reference_job.output import OutputSink
from reference_job.producer import ensure_topic, produce
from streamoffsets.stores.hbase import HBaseOffsetStore

pytestmark = pytest.mark.spark


@pytest.fixture
def job_setup(stack, unique_name, tmp_path):
    topic = unique_name("events")
    ensure_topic(stack.kafka_bootstrap, topic, 3)
    table = unique_name("offsets").replace("-", "_")
    url = f"hbase://{stack.hbase_host}:{stack.hbase_port}/{table}"
    config = JobConfig(
        bootstrap=stack.kafka_bootstrap, topic=topic, group="reference-job", store_url=url,
        output_path=tmp_path / "out.sqlite3", trigger_seconds=0.5, max_offsets_per_partition=4,
    )
    store = HBaseOffsetStore.from_url(url)
    yield config, store
    store.close()


def run_until_caught_up(spark, config) -> ReferenceJob:
    job = ReferenceJob(spark, config)
    job.start()
    try:
        job.query.processAllAvailable()
    finally:
        job.stop()
    return job


def test_job_saves_one_hbase_row_per_batch_equal_to_what_it_processed(spark, job_setup, stack):
    config, store = job_setup
    produce(stack.kafka_bootstrap, config.topic, 3, 30)  # 10 records per partition

    job = run_until_caught_up(spark, config)

    assert job.run_state.plan.first_start is True
    saved = job.run_state.batches_saved
    rows = store.history(config.topic, config.group).batches
    assert [r.offsets for r in rows] == [b.offsets for b in saved]
    assert rows[-1].offsets == {0: 10, 1: 10, 2: 10}
    assert len(rows) >= 3  # maxOffsetsPerPartition=4 splits 10 records per partition into 3 batches
    previous = {0: 0, 1: 0, 2: 0}
    for row in rows:  # each row advances by at most the per-partition limit
        assert all(0 <= row.offsets[p] - previous[p] <= 4 for p in previous)
        previous = row.offsets
    output = OutputSink(config.output_path).offsets(config.topic)
    assert output == [(p, o) for p in range(3) for o in range(10)]


def test_job_resumes_from_the_newest_hbase_row_without_loss_or_duplicates(spark, job_setup, stack):
    config, store = job_setup
    produce(stack.kafka_bootstrap, config.topic, 3, 12)
    run_until_caught_up(spark, config)
    produce(stack.kafka_bootstrap, config.topic, 3, 9, start=12)

    second = run_until_caught_up(spark, config)

    assert second.run_state.plan.first_start is False
    assert second.run_state.plan.offsets == {0: 4, 1: 4, 2: 4}
    assert second.run_state.records_written == 9  # only what arrived since the first run
    assert store.load_latest(config.topic, config.group).offsets == {0: 7, 1: 7, 2: 7}
    sink = OutputSink(config.output_path, idempotent=False)  # plain reads: every row written
    assert sink.offsets(config.topic) == [(p, o) for p in range(3) for o in range(7)]
