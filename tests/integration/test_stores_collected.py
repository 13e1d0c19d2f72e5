"""Every store kind, end to end through the dashboard: written by the job library, discovered and
read by a collector cycle, lag computed against the broker, shown on the pipeline page."""
from __future__ import annotations

import pytest
from django.urls import reverse

from collectors.cycle import collect_once
from dashboard.models import Pipeline, PipelineEvaluation
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from reference_job.producer import ensure_topic, produce
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets
from tests.factories import writable_store_url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("kind", ["hbase", "zookeeper", "kafka", "file"])
def test_each_writable_store_reaches_the_pipeline_page(client, stack, tmp_path, unique_name, kind, vera):
    topic, group = unique_name("orders"), unique_name("job")
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 20)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    url = writable_store_url(kind, stack, tmp_path, unique_name)
    store = store_get_or_create(name=unique_name("s"), kind=kind, url=url, cluster=cluster)
    with open_store(url) as writer:
        if hasattr(writer, "ensure_table"):
            writer.ensure_table()
        writer.save_batch(BatchOffsets(topic, group, 1_700_000_000_000, {0: 3, 1: 4}))
        assert collect_once().errors == []
        writer.save_batch(BatchOffsets(topic, group, 1_700_000_005_000, {0: 6, 1: 8}))
        assert collect_once().errors == []

    pipeline = Pipeline.objects.get(store=store, topic=topic, group=group)
    offsets = list(pipeline.batches.order_by("batch_time_ms").values_list("offsets", flat=True))
    assert offsets == [{"0": 3, "1": 4}, {"0": 6, "1": 8}]
    rows = PipelineEvaluation.objects.get(pipeline=pipeline).partitions
    assert {r["partition"]: r["lag"] for r in rows} == {0: 4, 1: 2}

    client.force_login(vera)
    html = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert '<td class="num">6</td>' in html and '<td class="num">8</td>' in html


def write_checkpoint_batch(root, batch_id: int, topic: str, offsets: dict[int, int], ts_ms: int, committed: bool):
    import json

    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": ts_ms, "conf": {}}
    source = {topic: {str(p): o for p, o in offsets.items()}}
    (root / "offsets" / str(batch_id)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(source)}")
    if committed:
        (root / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_a_checkpoint_shows_planned_batches_until_spark_commits_them(client, stack, tmp_path, unique_name, vera):
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    produce(stack.kafka_bootstrap, topic, 1, 10)
    root = tmp_path / "ckpt" / "orders-enricher"
    write_checkpoint_batch(root, 0, topic, {0: 4}, 1_700_000_000_000, committed=True)
    write_checkpoint_batch(root, 1, topic, {0: 7}, 1_700_000_001_000, committed=False)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(
        name=unique_name("s"), kind="checkpoint", url=f"checkpoint://{tmp_path / 'ckpt'}", cluster=cluster
    )
    assert collect_once().errors == []
    pipeline = Pipeline.objects.get(store=store, topic=topic, group="orders-enricher")
    assert list(pipeline.batches.order_by("batch_id").values_list("batch_id", "committed")) == [(0, True), (1, False)]
    client.force_login(vera)
    assert "planned, not committed" in client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()

    write_checkpoint_batch(root, 1, topic, {0: 7}, 1_700_000_001_000, committed=True)
    write_checkpoint_batch(root, 2, topic, {0: 9}, 1_700_000_002_000, committed=True)
    assert collect_once().errors == []
    assert list(pipeline.batches.order_by("batch_id").values_list("batch_id", "committed", "records")) == [
        (0, True, None), (1, True, 3), (2, True, 2)
    ]
    assert "planned, not committed" not in client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
