"""Every route family takes times from year 1 to 9999 and answers a bad parameter or job payload
with a 400 naming it (JSON under /api/). The parsers and payload checks alone:
tests/unit/test_validation.py."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.accounts.tokens import pipeline_token_issue
from dashboard.models import StartReport
from tests.factories import offline_pipeline

# --- through the routes ---------------------------------------------------------------------------

YEAR_1 = "0001-01-01T00:00+14:00"
YEAR_9999 = "9999-12-31T23:59-14:00"
T0 = 1_700_000_000_000


@pytest.fixture
def world(db, client, unique_name, vera):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10), 1: (0, 10)},
                                batches=[(T0, {0: 4, 1: 4}), (T0 + 10_000, {0: 9, 1: 8})])
    client.force_login(vera)
    return pipeline


# Spans under 30 days at both ends of time (a chart's span may be limited; the ends are the subject).
EARLY = {"from": YEAR_1, "to": "0001-01-20T00:00"}
LATE = {"from": "9999-12-20T00:00", "to": YEAR_9999}
EXTREMES = [EARLY, {**EARLY, "unit": "seconds"}, {**EARLY, "unit": "seconds", "kind": "partitions"}, LATE,
            {**LATE, "unit": "seconds", "kind": "partitions"}, {"from": "0001-01-01T00:00", "to": "0001-01-01T00:01"},
            {"from": "9999-12-31T23:58", "to": YEAR_9999}]


@pytest.mark.django_db
@pytest.mark.parametrize("query", EXTREMES)
@pytest.mark.parametrize("name", ["pipeline", "pipeline_live", "pipeline_lag_chart", "pipeline_chart_csv",
                                  "pipeline_chart_json", "pipeline_batches_csv"])
def test_pages_charts_and_exports_take_times_from_year_1_to_9999(client, world, name, query):
    response = client.get(reverse(name, args=[world.pk]), query)
    if query["to"] == "0001-01-01T00:01" or query["from"] == "9999-12-31T23:58":
        # Both ends clamp to the same instant: an empty range, said as such.
        assert response.status_code == 400 and "must be before" in response.content.decode()
        return
    assert response.status_code == 200, response.content[:500]
    content = b"".join(response.streaming_content) if response.streaming else response.content
    if name in ("pipeline_batches_csv", "pipeline_chart_csv"):
        assert (b"# from," + (b"0001-01-02T00:00:00+00:00" if query["from"] == YEAR_1 else b"9999-12-20T00:00:00+00:00")
                in content)
    if name == "pipeline_chart_json":
        assert json.loads(content)["range"]["from"].startswith(("0001-01-02", "9999-12-20"))


def test_a_page_answers_an_html_400_naming_the_parameter(client, world):
    response = client.get(reverse("pipeline", args=[world.pk]), {"from": "soon"})
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert 'data-param="from"' in html and "parameter &#x27;from&#x27;: &#x27;soon&#x27; is not a date-time: ISO 8601" in html
    response = client.get(reverse("pipeline", args=[world.pk]), {"page": "٣"})
    assert response.status_code == 400 and 'data-param="page"' in response.content.decode()
    # Files keep a plain-text 400 a script can print.
    response = client.get(reverse("pipeline_chart_csv", args=[world.pk]), {"to": "soon", "from": "soon"})
    assert response.status_code == 400 and response["Content-Type"].startswith("text/plain")


def test_a_background_export_takes_a_year_1_range(client, world):
    response = client.post(reverse("export_job_new", args=[world.pk]), {"export": "batches_csv", **EARLY})
    assert response.status_code == 302
    response = client.post(reverse("export_job_new", args=[world.pk]), {"export": "batches_csv", "from": "x"})
    assert response.status_code == 400 and 'data-param="from"' in response.content.decode()


@pytest.mark.parametrize("query", [{"since": YEAR_1}, {"until": YEAR_9999}, {"since": YEAR_1, "until": YEAR_9999}])
def test_the_audit_page_and_exports_take_times_from_year_1_to_9999(client, world, query):
    for name in ("audit", "audit_export_csv", "audit_export_json"):
        response = client.get(reverse(name), query)
        assert response.status_code == 200, (name, response.content[:300])


def test_the_audit_filters_refuse_what_the_shared_parsers_refuse(client, world):
    response = client.get(reverse("audit_export_csv"), {"pipeline": "٣", "since": "soon", "before": str(2**63)})
    assert response.status_code == 400
    text = response.content.decode()
    assert "parameter 'pipeline': '٣' is not a whole number from 1 to 9223372036854775807" in text
    assert "parameter 'since': 'soon' is not a date-time" in text and "parameter 'before'" in text


@pytest.mark.parametrize("path,query", [
    ("lag", EARLY), ("lag", {"to": YEAR_1}), ("lag", LATE), ("lag", {"to": "0"}), ("lag", {"to": "253402300799999"}),
    ("batches", {"from": YEAR_1}), ("batches", {"from": YEAR_1, "to": YEAR_9999}), ("batches", {"to": YEAR_9999}),
])
def test_the_api_takes_times_from_year_1_to_9999(client, world, path, query):
    response = client.get(f"/api/v1/pipelines/{world.pk}/{path}", query)
    assert response.status_code == 200, response.content[:300]
    if path == "batches" and "from" in query:
        assert len(response.json()["batches"]) == 2


@pytest.mark.parametrize("query,name", [({"from": "soon"}, "from"), ({"limit": "٣"}, "limit"),
                                        ({"to": "1e5"}, "to")])
def test_the_api_names_a_bad_parameter(client, world, query, name):
    response = client.get(f"/api/v1/pipelines/{world.pk}/batches", query)
    assert response.status_code == 400 and response.json()["error"].startswith(f"invalid parameter {name!r}")
    response = client.get(f"/api/v1/pipelines/{world.pk}/batches?limit=1&limit=2")
    assert response.status_code == 400 and "is given 2 times" in response.json()["error"]


@pytest.mark.parametrize("method,path,status", [
    ("get", "/api/", 404), ("get", "/api/v2/pipelines", 404), ("get", "/api/v1/nothing/here", 404),
    ("get", "/api/v1/pipelines/99999999999999999999999", 404), ("delete", "/api/v1/pipelines", 405),
    ("post", "/api/v1/start-reports", 401),
])
def test_every_api_error_is_json(client, world, method, path, status):
    response = getattr(client, method)(path)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json" and response.json()["error"]


def test_an_anonymous_api_error_outside_v1_is_json_too(db):
    response = Client().get("/api/whatever")
    assert response.status_code == 404 and response.json()["error"].startswith("no such API endpoint")


# --- job payloads through the API -------------------------------------------------------------------


@pytest.fixture
def job(world):
    token = pipeline_token_issue(pipeline=world, name="job")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def _report(world, **change) -> dict:
    return {"topic": world.topic, "group": world.group, "offsets": {"0": 9, "1": 8}, "clamps": [], **change}


@pytest.mark.parametrize("change,path", [
    ({"offsets": {"0": 10**30}}, "offsets.0"), ({"offsets": {"٣": 1}}, "offsets.٣"),
    ({"clamps": [{"messages_lost": 1e20}]}, "clamps.0.messages_lost"),
    ({"clamps": [{"messages_lost": -1}]}, "clamps.0.messages_lost"),
    ({"decisions": ["\x00"]}, "decisions.0"),
])
def test_a_hostile_start_report_is_a_json_400_naming_the_field(job, world, change, path):
    response = job.post(reverse("api_start_report"), _report(world, **change), content_type="application/json")
    assert response.status_code == 400 and response.json()["error"].startswith(f"invalid body: {path}: ")
    assert not StartReport.objects.exists()


def test_a_start_report_with_floats_nan_and_deep_nesting_as_raw_json_is_refused(job, world):
    for raw in ('{"topic": "t", "offsets": {"0": 1e20}}', '{"x": NaN}', '{"x": Infinity}', "[" * 100_000 + "]" * 100_000):
        response = job.post(reverse("api_start_report"), raw, content_type="application/json")
        assert response.status_code == 400 and response["Content-Type"] == "application/json", raw[:40]
    assert not StartReport.objects.exists()
    assert job.post(reverse("api_start_report"), _report(world), content_type="application/json").status_code == 201


def test_a_body_too_large_is_a_json_413(job, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = job.post(reverse("api_start_report"), {"x": "y" * 2000}, content_type="application/json")
    assert response.status_code == 413 and "larger than 1000 bytes" in response.json()["error"]


def test_rewind_bodies_through_the_api_name_the_field(job, world):
    for path, body, field in [("claim", {"instance": 5}, "instance"),
                              ("applied", {"instance": "a", "offsets": {"0": 1e20}}, "offsets.0"),
                              ("applied", {"instance": "a", "offsets": {"0": 1}, "marker_batch_ms": 1.5}, "marker_batch_ms"),
                              ("failed", {"instance": "a", "error": ["x"]}, "error")]:
        response = job.post(f"/api/v1/rewinds/1/{path}", body, content_type="application/json")
        assert response.status_code == 400 and response.json()["error"].startswith(f"invalid body: {field}: "), path


def test_lag_in_seconds_from_year_1_with_a_long_lookback_does_not_overflow(client, world, settings):
    settings.LAG_SECONDS_LOOKBACK_S = 7 * 86400.0  # more than the day EARLIEST keeps from Python's limit
    for name in ("pipeline_lag_chart", "pipeline_chart_json"):
        response = client.get(reverse(name, args=[world.pk]), {**EARLY, "unit": "seconds", "kind": "partitions"})
        assert response.status_code == 200, name
