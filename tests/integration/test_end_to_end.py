"""The whole path: producer -> PySpark job -> HBase -> Celery worker -> database -> pipeline page."""
from __future__ import annotations

import re
import threading

import pytest
from celery.contrib.testing.worker import start_worker
from django.urls import reverse

from collectors import tasks
from dashboard.models import Batch, LagSample, Pipeline, PipelineEvaluation
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from offsetwatch.celery import app
from reference_job.job import JobConfig, ReferenceJob
from reference_job.producer import ensure_topic, produce_forever
from streamoffsets.kafka import KafkaWatermarkReader
from tests.integration.test_celery_tasks import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


def test_live_job_offsets_reach_the_pipeline_page(spark, stack, unique_name, tmp_path, client, vera):
    topic = unique_name("live")
    ensure_topic(stack.kafka_bootstrap, topic, 3)
    table = unique_name("offsets").replace("-", "_")
    url = f"hbase://{stack.hbase_host}:{stack.hbase_port}/{table}"
    cluster = cluster_get_or_create(name="e2e", bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name="e2e-hbase", kind="hbase", url=url, cluster=cluster)

    stop_producer = threading.Event()
    producer = threading.Thread(
        target=produce_forever, args=(stack.kafka_bootstrap, topic, 3, 50.0, stop_producer), daemon=True
    )
    producer.start()
    job = ReferenceJob(spark, JobConfig(stack.kafka_bootstrap, topic, "e2e-job", url, tmp_path / "out.sqlite3",
                                        trigger_seconds=0.5))
    job.start()
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            assert wait_for(lambda: len(job.run_state.batches_saved) >= 3, 90)
            tasks.collect_all.delay()
            assert wait_for(lambda: Batch.objects.filter(pipeline__store=store).count() >= 3, 60)
            stop_producer.set()
            producer.join(10)
            job.query.processAllAvailable()  # caught up with everything produced
            tasks.collect_all.delay()
            saved = job.run_state.batches_saved
            assert wait_for(lambda: Batch.objects.filter(pipeline__store=store).count() == len(saved), 60)
            pipeline = Pipeline.objects.get(store=store, topic=topic, group="e2e-job")
            marks = KafkaWatermarkReader(stack.kafka_bootstrap).topic_watermarks(topic)
            tasks.poll_cluster.delay(cluster.pk)
            assert wait_for(lambda: LagSample.objects.filter(pipeline=pipeline).exists(), 60)
    finally:
        stop_producer.set()
        job.stop()

    stored = list(pipeline.batches.order_by("batch_time_ms").values_list("offsets", flat=True))
    assert stored == [{str(p): o for p, o in b.offsets.items()} for b in saved]
    committed = saved[-1].offsets
    rows = PipelineEvaluation.objects.get(pipeline=pipeline).partitions
    assert {r["partition"]: r["lag"] for r in rows} == {p: marks[p].high - committed[p] for p in marks}

    client.force_login(vera)
    html = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    newest = saved[-1]
    first_row = re.search(r'<tr data-batch-ms="(\d+)">(.*?)</tr>', html, re.S)
    assert int(first_row.group(1)) == newest.batch_time_ms
    shown = re.findall(r'<td class="num">(\d+)</td>', first_row.group(2))
    assert [int(v) for v in shown[:3]] == [newest.offsets[p] for p in range(3)]
