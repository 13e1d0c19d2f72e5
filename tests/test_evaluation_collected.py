"""Statuses, incidents and out-of-range warnings computed by the collectors and shown on the pages."""
from __future__ import annotations

import time

import pytest
from django.urls import reverse
from django.utils import timezone

from collectors.cycle import collect_once
from dashboard import services
from dashboard.models import Incident, Pipeline, PipelineEvaluation
from dashboard.roles import VIEWER
from streamoffsets.evaluation import Status
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import Watermarks
from tests.factories import hbase_store_setup, person, save

pytestmark = pytest.mark.django_db


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def oncall(client):
    client.force_login(person("dana", VIEWER))
    return client


def test_a_stopped_pipeline_with_waiting_messages_opens_an_incident_that_recovery_closes(oncall, stack, unique_name):
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
    overview = oncall.get(reverse("overview")).content.decode()
    assert 'id="open-incidents"' in overview and s.topic in overview
    api = {p["id"]: p for p in oncall.get(reverse("api_pipelines")).json()["pipelines"]}
    assert api[pipeline.pk]["status"] == "ERR" and api[pipeline.pk]["total_lag"] == 6

    save(s, "etl", now_ms(), {0: 10})  # the job is back and caught up
    collect_once()
    evaluation = PipelineEvaluation.objects.get(pipeline=pipeline)  # replaced every cycle
    incident.refresh_from_db()
    assert evaluation.status == Status.OK and evaluation.total_lag == 0
    assert incident.closed_at is not None
    assert "caught up" in oncall.get(reverse("pipeline", args=[pipeline.pk])).content.decode()


def test_low_out_of_range_is_explained_in_words(oncall, stack, unique_name):
    """Tansu cannot move a low watermark, so the watermarks enter at the service seam."""
    s = hbase_store_setup(stack, unique_name, partitions=2)
    save(s, "etl", now_ms(), {0: 1_000, 1: 50})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    result = WatermarkResult(by_topic={s.topic: {0: Watermarks(0, 2_234, 5_000), 1: Watermarks(1, 0, 50)}})
    services.watermarks_record(cluster=s.cluster, result=result, sampled_at=timezone.now())

    evaluation = PipelineEvaluation.objects.get(pipeline=pipeline)
    assert evaluation.status == Status.ERR
    assert evaluation.reasons[0].startswith("partition 0: 1,234 messages were deleted by retention before being processed")
    html = oncall.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert "low out-of-range: 1,234 messages deleted before being processed" in html


def test_lag_in_seconds_is_unknown_until_there_are_samples_never_zero(oncall, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=5)
    save(s, "etl", now_ms(), {0: 1})
    collect_once()
    evaluation = PipelineEvaluation.objects.get(pipeline__store=s.store)
    assert evaluation.total_lag == 4
    assert evaluation.lag_seconds is None and evaluation.lag_seconds_method.startswith("unknown")


def test_offsets_of_one_job_in_two_stores_are_compared_and_drift_flagged(oncall, stack, unique_name):
    """The job keeps HBase rows and also commits to its Kafka group; the commit fell behind."""
    from streamoffsets.store import open_store
    from streamoffsets.types import BatchOffsets

    s = hbase_store_setup(stack, unique_name, partitions=2, records=20)
    groups = services.store_get_or_create(name=unique_name("groups"), kind="kafka",
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
    assert "offsets differ between" in oncall.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
