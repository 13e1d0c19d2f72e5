"""Jobs report where they started (clamps included) to the dashboard, with a per-pipeline token."""
from __future__ import annotations

import hashlib
import io
import logging

import pytest
from django.core.management import call_command
from django.urls import reverse

from dashboard.accounts.tokens import pipeline_token_revoke
from dashboard.models import Pipeline, PipelineToken, StartReport
from devstack.components import free_port
from reference_job.job import JobConfig, ReferenceJob
from streamoffsets.dashboard_client import DashboardClient, DashboardError, report_start_quietly
from streamoffsets.restart import resolve_start
from streamoffsets.types import BatchOffsets, Watermarks
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pipeline_with_token(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=2, records=10)
    out, err = io.StringIO(), io.StringIO()
    call_command("issue_pipeline_token", store=s.store.name, topic=s.topic, group="etl", stdout=out, stderr=err)
    plain = out.getvalue().strip()
    pipeline = Pipeline.objects.get(store=s.store, topic=s.topic, group="etl")
    return s, pipeline, plain


def test_tokens_are_shown_once_and_stored_hashed(pipeline_with_token):
    _, pipeline, plain = pipeline_with_token
    token = PipelineToken.objects.get(pipeline=pipeline)
    assert plain.startswith("owp_") and len(plain) > 40
    assert token.token_hash == hashlib.sha256(plain.encode()).hexdigest()
    assert not PipelineToken.objects.filter(token_hash=plain).exists() and plain not in token.prefix + token.name


def test_a_clamped_start_is_recorded_and_shown(live_server, client, pipeline_with_token, vera):
    s, pipeline, plain = pipeline_with_token
    plan = resolve_start(s.topic, BatchOffsets(s.topic, "etl", 1, {0: 2, 1: 3}),
                         {0: Watermarks(0, 4, 5), 1: Watermarks(1, 0, 5)}, group="etl")
    assert DashboardClient(live_server.url, plain).report_start(plan)["pipeline"] == pipeline.pk
    report = StartReport.objects.get(pipeline=pipeline)
    assert (report.clamped_partitions, report.messages_lost, report.first_start) == (1, 2, False)
    client.force_login(vera)
    html = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert "2 messages were deleted by retention before being processed; clamped to 4" in html


@pytest.mark.parametrize("case", ["unknown", "revoked", "missing"])
def test_bad_tokens_are_refused_with_a_json_message(live_server, pipeline_with_token, case):
    s, pipeline, plain = pipeline_with_token
    plan = resolve_start(s.topic, None, {0: Watermarks(0, 0, 5)}, group="etl")
    if case == "revoked":
        pipeline_token_revoke(token=PipelineToken.objects.get(pipeline=pipeline))
    token = {"unknown": "owp_" + "x" * 43, "revoked": plain, "missing": ""}[case]
    with pytest.raises(DashboardError) as err:
        DashboardClient(live_server.url, token).report_start(plan)
    assert "HTTP 401" in str(err.value)
    assert ("missing 'Authorization" if case == "missing" else "unknown or revoked pipeline token") in str(err.value)
    assert not StartReport.objects.exists()


def test_a_report_for_another_pipeline_or_malformed_is_a_400(client, pipeline_with_token):
    s, pipeline, plain = pipeline_with_token
    auth = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    other = resolve_start("someone-else", None, {0: Watermarks(0, 0, 5)}, group="etl").report()
    response = client.post(reverse("api_start_report"), other, content_type="application/json", **auth)
    assert response.status_code == 400 and "the token belongs to" in response.json()["error"]
    response = client.post(reverse("api_start_report"), "{not json", content_type="application/json", **auth)
    assert response.status_code == 400 and response.json()["error"].startswith("the body is not JSON")
    bad = {"topic": s.topic, "group": "etl", "offsets": {"0": -5}}
    response = client.post(reverse("api_start_report"), bad, content_type="application/json", **auth)
    assert response.status_code == 400 and "non-negative" in response.json()["error"]
    assert not StartReport.objects.exists()


def test_an_unreachable_dashboard_never_stops_a_job(caplog):
    plan = resolve_start("t", None, {0: Watermarks(0, 0, 5)}, group="g")
    with caplog.at_level(logging.WARNING, logger="offsetwatch.dashboard"):
        assert report_start_quietly(DashboardClient(f"http://127.0.0.1:{free_port()}", "owp_x", 1), plan) is False
    assert "the job starts anyway" in caplog.text and "unreachable" in caplog.text


def test_the_reference_job_reports_its_start(live_server, stack, tmp_path, pipeline_with_token):
    s, pipeline, plain = pipeline_with_token
    save(s, "etl", 1_700_000_000_000, {0: 3, 1: 4})
    job = ReferenceJob(None, JobConfig(
        stack.kafka_bootstrap, s.topic, "etl", s.store.url, tmp_path / "out.sqlite3",
        dashboard_url=live_server.url, dashboard_token=plain,
    ))
    plan = job.plan_start()  # resolving the start needs no Spark: store, broker, dashboard
    assert plan.offsets == {0: 3, 1: 4}
    report = StartReport.objects.get(pipeline=pipeline)
    assert report.report["offsets"] == {"0": 3, "1": 4} and report.clamped_partitions == 0
