"""Statuses, incidents and out-of-range warnings computed by the collectors and shown on the pages."""
from __future__ import annotations

import json
import time

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from collectors.cycle import collect_once
from dashboard.models import Incident, LagSample, Pipeline, PipelineEvaluation
from dashboard.monitoring.services import store_get_or_create, store_reading_record, watermarks_record
from streamoffsets.evaluation import Status
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import Watermarks
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db


def now_ms() -> int:
    return int(time.time() * 1000)


def test_a_stopped_pipeline_with_waiting_messages_opens_an_incident_that_recovery_closes(vera_client, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=10)
    save(s, "etl", now_ms() - 600_000, {0: 2})  # the last batch ran ten minutes ago
    save(s, "etl", now_ms() - 599_000, {0: 4})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    evaluation = PipelineEvaluation.objects.get(pipeline=pipeline)
    assert evaluation.status == Status.ERR
    assert any("stopped with 6 messages waiting" in r for r in evaluation.reasons)
    incident = Incident.objects.get(pipeline=pipeline, closed_at=None)
    assert incident.worst_status == Status.ERR
    overview = vera_client.get(reverse("overview")).content.decode()
    assert 'id="open-incidents"' in overview and s.topic in overview
    api = {p["id"]: p for p in vera_client.get(reverse("api_pipelines")).json()["pipelines"]}
    assert api[pipeline.pk]["status"] == "ERR" and api[pipeline.pk]["total_lag"] == 6

    save(s, "etl", now_ms(), {0: 10})  # the job is back and caught up
    collect_once()
    evaluation = PipelineEvaluation.objects.get(pipeline=pipeline)  # replaced every cycle
    incident.refresh_from_db()
    assert evaluation.status == Status.OK and evaluation.total_lag == 0
    # Held open until OK for OFFSETWATCH_RESOLVE_AFTER_SAMPLES (3) evaluations in a row: no flapping.
    assert incident.closed_at is None and incident.ok_samples == 1
    collect_once()
    collect_once()
    incident.refresh_from_db()
    assert incident.closed_at is not None
    assert "caught up" in vera_client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()


def test_low_out_of_range_is_explained_in_words(vera_client, stack, unique_name):
    """Tansu cannot move a low watermark, so the watermarks enter at the service seam."""
    s = hbase_store_setup(stack, unique_name, partitions=2)
    save(s, "etl", now_ms(), {0: 1_000, 1: 50})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    result = WatermarkResult(by_topic={s.topic: {0: Watermarks(0, 2_234, 5_000), 1: Watermarks(1, 0, 50)}})
    watermarks_record(cluster=s.cluster, result=result, sampled_at=timezone.now())

    evaluation = PipelineEvaluation.objects.get(pipeline=pipeline)
    assert evaluation.status == Status.ERR
    assert evaluation.reasons[0].startswith("partition 0: 1,234 messages were deleted by retention before being processed")
    html = vera_client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert "low out-of-range: 1,234 messages deleted before being processed" in html


def test_offsets_of_one_job_in_two_stores_are_compared_and_drift_flagged(vera_client, stack, unique_name):
    """The job keeps HBase rows and also commits to its Kafka group; the commit fell behind."""
    from streamoffsets.stores.registry import open_store
    from streamoffsets.types import BatchOffsets

    s = hbase_store_setup(stack, unique_name, partitions=2, records=20)
    groups = store_get_or_create(name=unique_name("groups"), kind="kafka",
                                          url=f"kafka://{stack.kafka_bootstrap}", cluster=s.cluster)
    group = unique_name("etl")
    save(s, group, now_ms(), {0: 10, 1: 10})
    with open_store(groups.url) as kafka:
        kafka.save_batch(BatchOffsets(s.topic, group, now_ms(), {0: 10, 1: 6}))
    collect_once()
    evaluation = PipelineEvaluation.objects.get(pipeline__store=s.store, pipeline__group=group)
    assert evaluation.status == Status.WARN
    assert f"offsets differ between store {s.store.name} and store {groups.name}: partition 1: 10 vs 6" in evaluation.reasons
    pipeline = Pipeline.objects.get(store=s.store, group=group)
    assert "offsets differ between" in vera_client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()


def test_lag_in_seconds_comes_from_the_timestamp_of_the_record_at_the_committed_offset(vera_client, stack, unique_name):
    """The broker returns each record's timestamp: the next unprocessed record (offset 3 of
    partition 0) was written an hour ago, so the job is an hour behind, whatever the sampling."""
    from confluent_kafka import Producer

    s = hbase_store_setup(stack, unique_name, partitions=2)
    hour_ago = now_ms() - 3_600_000
    # One record per request: Tansu miscounts the high watermark of multi-record batches.
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(6):
        producer.produce(s.topic, value=b"r%d" % i, partition=0, timestamp=hour_ago + i * 60_000)
        producer.flush(5)
    producer.produce(s.topic, value=b"x", partition=1, timestamp=now_ms())
    producer.flush(5)
    save(s, "etl", now_ms(), {0: 3, 1: 1})  # partition 0: 3 waiting since hour_ago + 3 min; partition 1 caught up

    collect_once()
    e = PipelineEvaluation.objects.get(pipeline__store=s.store)
    rows = {row["partition"]: row for row in e.partitions}
    assert rows[0]["lag_method"] == "record timestamp"
    expected = time.time() - (hour_ago + 3 * 60_000) / 1000
    assert abs(rows[0]["lag_seconds"] - expected) < 15
    assert rows[1]["lag_seconds"] == 0 and rows[1]["lag_method"] == "caught up"
    assert e.lag_seconds == rows[0]["lag_seconds"] and e.lag_seconds_method == "record timestamp"
    page = vera_client.get(reverse("pipeline", args=[e.pipeline_id])).content.decode()
    assert "record timestamp" in page


def test_without_record_timestamps_lag_in_seconds_is_unknown_until_there_are_samples_never_zero(
    settings, vera_client, stack, unique_name
):
    settings.RECORD_TIMESTAMP_PARTITIONS = 0  # the bound: no record read at all
    s = hbase_store_setup(stack, unique_name, partitions=1, records=5)
    save(s, "etl", now_ms(), {0: 1})
    collect_once()
    evaluation = PipelineEvaluation.objects.get(pipeline__store=s.store)
    assert evaluation.total_lag == 4
    # One watermark sample only: the interpolation honestly says it does not know yet.
    assert evaluation.lag_seconds is None and evaluation.lag_seconds_method.startswith("unknown")
    assert evaluation.partitions[0]["lag_method"].startswith("unknown")


def test_a_store_poll_between_a_cluster_poll_s_reads_is_not_a_stall(unique_name):
    """The demo's race: a cluster poll reads the committed offsets, the store poll then records
    newer batches, and the cluster poll stores its sample. The sample keeps the batch time read
    with its offsets, so "batches came but offsets stood still" is not concluded from it."""
    from datetime import timedelta

    from dashboard.models import LagSample
    from dashboard.monitoring.selectors import committed_offsets
    from tests.factories import offline_pipeline

    now = timezone.now()
    ms = int(now.timestamp() * 1000)
    p = offline_pipeline(unique_name, partitions={0: (0, 100)}, sampled_at=now - timedelta(seconds=10),
                         batches=[(ms - 25_000, {0: 10}), (ms - 20_000, {0: 20}), (ms - 15_000, {0: 30})])
    marks = WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 0, 110)}})
    read_first = committed_offsets(pipeline_ids=[p.pk])  # the cluster poll's read...
    store_reading_record(store=p.store, reading=_reading(p, [(ms - 10_000, {0: 40}), (ms - 5_000, {0: 50})]))
    watermarks_record(cluster=p.store.cluster, result=marks, sampled_at=now, committed=read_first)
    sample = LagSample.objects.filter(pipeline=p).latest("sampled_at")
    assert sample.last_batch_ms == ms - 15_000  # the batch its offsets came from, not the newer one
    assert PipelineEvaluation.objects.get(pipeline=p).status != Status.STALLED


def _reading(pipeline, batches):
    from streamoffsets.stores.reading import StoreReading
    from streamoffsets.types import BatchOffsets, PipelineKey

    key = PipelineKey(pipeline.topic, pipeline.group)
    return StoreReading(pipelines=[key], batches={key: [BatchOffsets(pipeline.topic, pipeline.group, t, o) for t, o in batches]})


def test_each_sample_stores_whether_it_went_back_and_the_window_reads_it(stack, unique_name):
    """Rule 2 (offsets went backwards) over the window: each new lag sample is compared with the
    one before it once, when collected, and the result is stored with it (LagSample.went_back);
    later cycles read it instead of comparing the pair again."""
    s = hbase_store_setup(stack, unique_name, partitions=2)
    pipeline = None
    for offsets in ({0: 1_000, 1: 50}, {0: 400, 1: 50}, {0: 450, 1: 60}):  # a rewind, then forward
        save(s, "etl", now_ms(), offsets)
        collect_once()
        pipeline = pipeline or Pipeline.objects.get(store=s.store)
        time.sleep(0.01)
    samples = list(LagSample.objects.filter(pipeline=pipeline).order_by("sampled_at"))
    assert [x.went_back for x in samples] == [None, True, False]
    reasons = PipelineEvaluation.objects.get(pipeline=pipeline).reasons
    assert "offsets went backwards: partition 0 1,000 -> 400" in reasons  # from the stored True

    # The stored answer is what the window reads: told the rewind's pair did not go back, the
    # next cycle no longer names it (the pair is not compared again).
    LagSample.objects.filter(pipeline=pipeline, sampled_at=samples[1].sampled_at).update(went_back=False)
    collect_once()
    reasons = PipelineEvaluation.objects.get(pipeline=pipeline).reasons
    assert not any("went backwards" in r for r in reasons), reasons


def test_an_evaluation_s_partition_rows_are_stored_with_their_keys_once_and_read_back_whole(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=3)
    save(s, "etl", now_ms(), {0: 0, 1: 0, 2: 0})
    collect_once()
    evaluation = PipelineEvaluation.objects.get(pipeline__store=s.store)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT partitions FROM {PipelineEvaluation._meta.db_table} WHERE id = %s", [evaluation.pk])
        stored = json.loads(cursor.fetchone()[0])
    assert stored["columns"][:2] == ["partition", "committed"] and [r[0] for r in stored["rows"]] == [0, 1, 2]
    assert [r["partition"] for r in evaluation.partitions] == [0, 1, 2]
    assert evaluation.partitions[0]["state"] == "ok" and set(evaluation.partitions[0]) == set(stored["columns"])
    # Every reader goes through the field: values queries too.
    assert PipelineEvaluation.objects.filter(pk=evaluation.pk).values_list("partitions", flat=True)[0] == evaluation.partitions
