"""The JSON API (/api/v1/): auth (session, API tokens), every endpoint, pagination,
downsampling, hostile input, and the OpenAPI document checked against the views. Over 400 lines
because the API is one contract: its cases share the fixtures and read as one list of endpoints."""
from __future__ import annotations

import base64
import io
import json
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.core.management import CommandError, call_command
from django.urls import Resolver404, URLPattern, resolve, reverse
from django.utils import timezone

from dashboard.accounts.tokens import api_token_issue, api_token_revoke, pipeline_token_issue, token_hash
from dashboard.api import urls as api_urls
from dashboard.api.views import OPENAPI_PATH
from dashboard.models import ApiToken, LagSample
from dashboard.monitoring.services import source_health_record
from offsetwatch.lib.packing import pack, pack_partitions
from tests.factories import offline_pipeline
from tests.schema_check import violations

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture
def billing(unique_name):
    """Two partitions: 0 is 6 behind, 1 is caught up; two batches."""
    return offline_pipeline(unique_name, group="billing", partitions={0: (0, 10), 1: (2, 9)},
                            batches=[(T0, {0: 1, 1: 5}), (T0 + 60_000, {0: 4, 1: 9})])


def get(client, name, *args, **params):
    return client.get(reverse(name, args=args), params)


# --- authentication ------------------------------------------------------------------------------

ENDPOINTS = [("api_pipelines", False), ("api_pipeline", True), ("api_pipeline_partitions", True),
             ("api_pipeline_batches", True), ("api_pipeline_lag", True), ("api_collectors", False),
             ("api_openapi", False)]


@pytest.mark.parametrize("name,takes_id", ENDPOINTS)
def test_without_credentials_every_endpoint_is_a_json_401(client, billing, name, takes_id):
    response = get(client, name, *([billing.pk] if takes_id else []))
    assert response.status_code == 401 and response["Content-Type"] == "application/json"
    assert "log in (session) or send 'Authorization: Bearer <API token>'" in response.json()["error"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_api_tokens_act_as_their_user_and_are_stored_hashed(client, olga, billing):
    out, err = io.StringIO(), io.StringIO()
    call_command("issue_api_token", user="olga", name="grafana", stdout=out, stderr=err)
    plain = out.getvalue().strip()
    assert plain.startswith("owu_") and "shown only once" in err.getvalue() and "operator, viewer" in err.getvalue()
    token = ApiToken.objects.get(user=olga)
    assert token.token_hash == token_hash(plain) and plain not in token.prefix + token.name
    assert token.last_used_at is None

    response = client.get(reverse("api_pipelines"), HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert response.status_code == 200 and billing.pk in [p["id"] for p in response.json()["pipelines"]]
    token.refresh_from_db()
    assert token.last_used_at is not None

    api_token_revoke(token=token)
    response = client.get(reverse("api_pipelines"), HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert response.status_code == 401 and response.json() == {"error": "unknown or revoked API token"}


def test_a_failing_bearer_token_is_a_401_even_with_a_session(client, vera_logged_in):
    response = client.get(reverse("api_pipelines"), HTTP_AUTHORIZATION="Bearer owu_" + "x" * 43)
    assert response.status_code == 401


def test_pipeline_tokens_are_not_api_tokens(client, billing):
    _, plain = pipeline_token_issue(pipeline=billing, name="job")
    response = client.get(reverse("api_pipelines"), HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert response.status_code == 401 and "owp_ pipeline tokens only report starts" in response.json()["error"]


def test_tokens_of_users_without_a_role_or_inactive_are_refused(client, dave, erin):
    _, dave_token = api_token_issue(user=dave, name="script")
    response = client.get(reverse("api_collectors"), HTTP_AUTHORIZATION=f"Bearer {dave_token}")
    assert response.status_code == 403 and "no role assigned to 'dave'" in response.json()["error"]
    _, erin_token = api_token_issue(user=erin, name="script")
    erin.is_active = False
    erin.save()
    assert client.get(reverse("api_collectors"), HTTP_AUTHORIZATION=f"Bearer {erin_token}").status_code == 401


@pytest.mark.parametrize("args,message", [
    ({"user": "nobody", "name": "x"}, "no user named 'nobody'"),
    ({"user": "dave", "name": "x"}, "user 'dave' has no role"),
    ({"user": "vera", "name": "  "}, "--name must not be empty"),
])
def test_issue_api_token_errors_name_what_is_wrong(args, message, dave, vera):
    with pytest.raises(CommandError, match=message):
        call_command("issue_api_token", stdout=io.StringIO(), stderr=io.StringIO(), **args)
    assert not ApiToken.objects.exists()


# --- endpoints -----------------------------------------------------------------------------------


def test_pipelines_list_status_lag_and_filters(client, vera_logged_in, billing, unique_name):
    other = offline_pipeline(unique_name, group="Ünïcode-grüppe", partitions={0: (0, 3)}, batches=[(T0, {0: 3})])
    rows = {p["id"]: p for p in get(client, "api_pipelines").json()["pipelines"]}
    row = rows[billing.pk]
    assert (row["topic"], row["group"], row["store"], row["cluster"], row["store_kind"]) == (
        billing.topic, "billing", billing.store.name, billing.store.cluster.name, "hbase")
    assert row["total_lag"] == 6 and row["last_batch_ms"] == T0 + 60_000
    assert row["last_batch_at"] == "2023-11-14T22:14:20.000+00:00"
    assert row["status"] in {"OK", "WARN", "STALLED", "STOPPED", "REWOUND", "ERR"} and row["reasons"]
    assert row["retention_margin"] == 4  # partition 0: committed 4 - low 0; partition 1: 9 - 2 = 7
    assert isinstance(row["lag_seconds_method"], str) and row["lag_seconds_method"]

    def ids(**params):
        return {p["id"] for p in get(client, "api_pipelines", **params).json()["pipelines"]}

    assert ids(store=billing.store.name) == {billing.pk}
    assert ids(cluster=other.store.cluster.name) == {other.pk}
    assert ids(q="BILL") == {billing.pk}  # case-insensitive, over the group
    assert ids(q=other.topic[-6:]) == {other.pk}  # over the topic
    assert ids(q="ÜNÏCODE") == {other.pk}
    assert ids(q="no such thing ☃") == set()
    assert ids(status=row["status"].lower()) >= {billing.pk}
    statuses = ",".join(s for s in ("OK", "WARN", "STALLED", "STOPPED", "REWOUND", "ERR") if s != row["status"])
    assert billing.pk not in ids(status=statuses)


def test_one_pipeline_with_partitions_and_freshness(client, vera_logged_in, billing):
    detail = get(client, "api_pipeline", billing.pk).json()
    assert detail["id"] == billing.pk and detail["total_lag"] == 6
    parts = {r["partition"]: r for r in detail["partitions"]}
    assert (parts[0]["committed"], parts[0]["low"], parts[0]["high"], parts[0]["lag"], parts[0]["state"]) == (4, 0, 10, 6, "lagging")
    assert (parts[1]["lag"], parts[1]["state"], parts[1]["retention_margin"]) == (0, "ok", 7)
    assert detail["freshness"]["stale"] is True  # nothing polled these sources: said, not hidden
    assert get(client, "api_pipeline_partitions", billing.pk).json()["partitions"] == detail["partitions"]


@pytest.mark.parametrize("name", ["api_pipeline", "api_pipeline_partitions", "api_pipeline_batches", "api_pipeline_lag"])
@pytest.mark.parametrize("pipeline_id", [999_999_999, 2**63 - 1, 2**63, 10**40])
def test_unknown_ids_are_json_404s(client, vera_logged_in, name, pipeline_id):
    response = get(client, name, pipeline_id)
    assert response.status_code == 404 and response.json() == {"error": f"no pipeline with id {pipeline_id}"}


def test_unknown_paths_and_methods_are_json_errors(client, vera_logged_in, billing):
    for path in ("/api/v1/nope", "/api/v1/pipelines/-1", "/api/v1/pipelines/abc/batches", "/api/v1/pipelines/1/"):
        response = client.get(path)
        assert response.status_code == 404 and "no API endpoint" in response.json()["error"], path
    response = client.post(reverse("api_pipeline", args=[billing.pk]))
    assert response.status_code == 405 and response["Allow"] == "GET" and "use GET" in response.json()["error"]
    token = pipeline_token_issue(pipeline=billing, name="job")[1]
    response = client.get(reverse("api_start_report"), headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405 and "use POST" in response.json()["error"]
    # A job endpoint asks who is calling first: without its token a wrong method is a 401.
    assert client.get(reverse("api_start_report")).status_code == 401


def _batches_pipeline(unique_name, count: int):
    return offline_pipeline(unique_name, partitions={0: (0, 10 * count)},
                            batches=[(T0 + i * 1000, {0: i}) for i in range(count)])


def test_batches_are_keyset_paginated_newest_first(client, vera_logged_in, unique_name):
    pipeline = _batches_pipeline(unique_name, 250)
    seen, cursor, pages = [], None, 0
    while True:
        page = get(client, "api_pipeline_batches", pipeline.pk, limit=100, **({"cursor": cursor} if cursor else {})).json()
        pages += 1
        seen += [b["batch_time_ms"] for b in page["batches"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and len(seen) == 250
    assert seen == sorted(seen, reverse=True) and seen[0] == T0 + 249_000 and seen[-1] == T0
    first = get(client, "api_pipeline_batches", pipeline.pk, limit=1).json()["batches"][0]
    assert first == {"batch_time_ms": T0 + 249_000, "batch_time": "2023-11-14T22:17:29.000+00:00", "batch_id": None,
                     "committed": True, "records": 1, "offsets": {"0": 249}}
    # Exactly a page's worth: no empty last page.
    page = get(client, "api_pipeline_batches", pipeline.pk, limit=250).json()
    assert len(page["batches"]) == 250 and page["next_cursor"] is None


def test_batches_in_a_time_range_iso_or_epoch_ms(client, vera_logged_in, unique_name):
    pipeline = _batches_pipeline(unique_name, 20)
    by_ms = get(client, "api_pipeline_batches", pipeline.pk, **{"from": T0 + 5000, "to": T0 + 10_000}).json()
    assert [b["batch_time_ms"] for b in by_ms["batches"]] == [T0 + i * 1000 for i in range(9, 4, -1)]  # from <= t < to
    by_iso = get(client, "api_pipeline_batches", pipeline.pk,
                 **{"from": "2023-11-14T22:13:25Z", "to": "2023-11-14T23:13:30+01:00"}).json()
    assert by_iso["batches"] == by_ms["batches"]
    assert by_iso["from"] == "2023-11-14T22:13:25.000+00:00"
    # A '+' sent unencoded in a URL arrives as a space: still understood.
    raw = client.get(f"/api/v1/pipelines/{pipeline.pk}/batches?from=2023-11-14T22:13:25+00:00").json()
    assert len(raw["batches"]) == 15
    # Paging inside a range.
    page1 = get(client, "api_pipeline_batches", pipeline.pk, limit=3, **{"from": T0 + 5000, "to": T0 + 10_000}).json()
    page2 = get(client, "api_pipeline_batches", pipeline.pk, limit=3, cursor=page1["next_cursor"],
                **{"from": T0 + 5000, "to": T0 + 10_000}).json()
    assert [b["batch_time_ms"] for b in page1["batches"] + page2["batches"]] == [b["batch_time_ms"] for b in by_ms["batches"]]
    assert page2["next_cursor"] is None


def _lag_history(pipeline, values: list[int], start: datetime, step_s: float = 10.0) -> None:
    empty = pack_partitions([])
    LagSample.objects.bulk_create([
        LagSample(pipeline=pipeline, sampled_at=start + timedelta(seconds=i * step_s), total_lag=v,
                  partitions=empty, committed=pack([]))
        for i, v in enumerate(values)
    ], batch_size=5000)


@pytest.mark.parametrize("method", ["minmax", "lttb"])
def test_lag_is_downsampled_on_the_server_and_keeps_the_spike(client, vera_logged_in, unique_name, method):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(T0, {0: 4})],
                                sampled_at=datetime(2020, 1, 1, tzinfo=dt_timezone.utc))
    start = datetime(2024, 1, 1, tzinfo=dt_timezone.utc)
    values = [100 + (i * 37) % 11 for i in range(20_000)]
    values[10_000] = 5_000_000
    _lag_history(pipeline, values, start)
    series = get(client, "api_pipeline_lag", pipeline.pk, points=200, method=method,
                 **{"from": "2024-01-01T00:00:00Z", "to": "2024-01-10T00:00:00Z"}).json()
    assert series["samples"] == 20_000 and series["max_points"] == 200 and series["method"] == method
    assert 150 <= len(series["points"]) <= 200
    spike_ms = int((start + timedelta(seconds=100_000)).timestamp() * 1000)
    assert [spike_ms, 5_000_000] in series["points"]
    xs = [x for x, _ in series["points"]]
    assert xs == sorted(xs) and xs[0] == int(start.timestamp() * 1000)


def test_lag_defaults_to_the_last_hour_and_short_series_are_untouched(client, vera_logged_in, unique_name):
    now = timezone.now()
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(T0, {0: 4})], sampled_at=now)
    _lag_history(pipeline, [1, 2, 3], now - timedelta(hours=3), step_s=600)  # 3 h and 2h50 ago: outside
    series = get(client, "api_pipeline_lag", pipeline.pk).json()
    assert series["points"] == [[int(now.timestamp() * 1000), 6]] and series["samples"] == 1
    series = get(client, "api_pipeline_lag", pipeline.pk, **{"from": int((now - timedelta(hours=4)).timestamp() * 1000)}).json()
    assert [y for _, y in series["points"]] == [1, 2, 3, 6]


HOSTILE = [
    ("api_pipeline_batches", "limit", "-1"),
    ("api_pipeline_batches", "limit", "0"),
    ("api_pipeline_batches", "limit", "1001"),
    ("api_pipeline_batches", "limit", "abc"),
    ("api_pipeline_batches", "limit", "9" * 40),
    ("api_pipeline_batches", "limit", "١٠"),  # Arabic-Indic digits: int() takes them, we don't
    ("api_pipeline_batches", "limit", "1e3"),
    ("api_pipeline_batches", "from", "yesterday"),
    ("api_pipeline_batches", "from", "2024-13-45T00:00:00Z"),
    ("api_pipeline_batches", "from", "9" * 30),
    ("api_pipeline_batches", "to", "-5"),
    ("api_pipeline_batches", "to", "２０２４-01-01"),
    ("api_pipeline_batches", "cursor", "garbage!!"),
    ("api_pipeline_batches", "cursor", base64.urlsafe_b64encode(b"v1:abc").decode()),
    ("api_pipeline_batches", "cursor", base64.urlsafe_b64encode("v1:١".encode()).decode()),
    ("api_pipeline_batches", "cursor", "x" * 5000),
    ("api_pipeline_lag", "points", "2"),
    ("api_pipeline_lag", "points", str(10**6)),
    ("api_pipeline_lag", "method", "average"),
    ("api_pipeline_lag", "from", "0000-00-00"),
    ("api_pipeline_lag", "to", "\x00"),
    ("api_pipelines", "status", "BROKEN"),
    ("api_pipelines", "status", ",,"),
    ("api_pipelines", "q", "a\x00b"),
    ("api_pipelines", "store", "s" * 5000),
]


@pytest.mark.parametrize("name,param,value", HOSTILE)
def test_bad_parameters_are_json_400s_naming_the_parameter_and_value(client, vera_logged_in, billing, name, param, value):
    args = [] if name == "api_pipelines" else [billing.pk]
    response = get(client, name, *args, **{param: value})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error.startswith(f"invalid parameter {param!r}: ")
    assert repr(value[:80])[:-1] in error  # the value as given (cut short when long)


def test_ranges_the_wrong_way_round_are_400s(client, vera_logged_in, billing):
    for name in ("api_pipeline_batches", "api_pipeline_lag"):
        response = get(client, name, billing.pk, **{"from": "2024-02-01", "to": "2024-01-01"})
        assert response.status_code == 400 and "is after 'to'" in response.json()["error"]


def test_extreme_but_valid_times_are_not_errors(client, vera_logged_in, billing):
    for name in ("api_pipeline_batches", "api_pipeline_lag"):
        for params in ({"from": "0001-01-01T00:00:00Z", "to": "9999-12-31T23:59:59Z"}, {"to": "0001-01-01"},
                       {"from": "0", "to": "253402300799999"}):
            response = get(client, name, billing.pk, **params)
            assert response.status_code == 200, (name, params, response.content)


def test_the_existing_collectors_and_pipelines_answers_keep_their_shape(client, vera_logged_in, billing):
    row = next(p for p in get(client, "api_pipelines").json()["pipelines"] if p["id"] == billing.pk)
    assert {"id", "topic", "group", "store", "cluster", "status", "reasons", "evaluated_at", "total_lag", "lag_seconds",
            "lag_seconds_method", "retention_seconds_left", "last_batch_ms"} <= set(row)
    source_health_record(source="store:1", label="store s", started_at=timezone.now(), duration_ms=3,
                                  error="boom")
    source = get(client, "api_collectors").json()["sources"][0]
    assert (source["source"], source["healthy"], source["consecutive_failures"], source["last_error"]) == (
        "store:1", False, 1, "boom")


# --- the OpenAPI document, checked against the views ------------------------------------------------


@pytest.fixture(scope="module")
def spec() -> dict:
    return json.loads(OPENAPI_PATH.read_text())


def _spec_path(route: str) -> str:
    """'pipelines/<int:pipeline_id>/lag' -> '/api/v1/pipelines/{pipeline_id}/lag'"""
    out = route
    while "<" in out:
        start, end = out.index("<"), out.index(">")
        out = out[:start] + "{" + out[start + 1:end].split(":")[-1] + "}" + out[end + 1:]
    return "/api/v1/" + out


def test_every_spec_path_resolves_to_an_api_view_and_every_route_is_in_the_spec(client, vera_logged_in, spec):
    assert spec["openapi"].startswith("3.")
    routes = {_spec_path(str(p.pattern)): p for p in api_urls.urlpatterns
              if isinstance(p, URLPattern) and p.name != "api_not_found"}  # the catch-all is not an endpoint
    assert set(spec["paths"]) == set(routes)
    for path, operations in spec["paths"].items():
        example = re.sub(r"\{\w+\}", "7", path)  # every path parameter is an integer id
        match = resolve(example)
        assert match.func.__module__ in {"dashboard.api.views", "dashboard.api.job_views"} and match.url_name == routes[path].name, path
        assert match.url_name != "api_not_found"
        for method, operation in operations.items():
            documented = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert documented == set(match.kwargs) - {"rest"}, path
            for status, response in operation["responses"].items():
                assert "application/json" in response.get("content", {}) or "$ref" in response, (path, status)
            # A method the spec does not list is a 405 JSON error.
            other = "post" if method == "get" else "get"
            if other not in operations:
                answer = getattr(client, other)(example)
                if {"pipelineToken": []} in operation.get("security", []):
                    # Jobs' endpoints authenticate before anything else: no token, 401 whatever the method.
                    assert answer.status_code == 401 and "error" in answer.json(), (path, other)
                else:
                    assert answer.status_code == 405 and "error" in answer.json(), (path, other)
    with pytest.raises(Resolver404):
        resolve("/api/v2/pipelines")


def test_every_get_endpoint_answers_what_the_spec_says(client, vera_logged_in, billing, spec):
    _lag_history(billing, [5, 6, 7], timezone.now() - timedelta(minutes=5))
    checked = 0
    for path, operations in spec["paths"].items():
        if "get" not in operations:
            continue
        url = path.replace("{pipeline_id}", str(billing.pk))
        params = {"limit": 1} if path.endswith("/batches") else {}
        headers = {}
        if {"pipelineToken": []} in operations["get"].get("security", []):  # a job's endpoint: its pipeline token
            headers["Authorization"] = f"Bearer {pipeline_token_issue(pipeline=billing, name='contract')[1]}"
        response = client.get(url, params, headers=headers)
        assert response.status_code == 200, path
        schema = operations["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        body = response.json()
        assert violations(spec, schema, body) == [], path
        checked += 1
        if path.endswith("/batches"):
            assert body["next_cursor"] is not None and len(body["batches"]) == 1  # the cursor is exercised too
    assert checked == len([p for p in spec["paths"].values() if "get" in p])


def test_error_answers_match_the_error_schema(client, vera, dave, spec, billing):
    error = spec["components"]["schemas"]["Error"]
    answers = [client.get(f"/api/v1/pipelines/{billing.pk}")]  # 401
    client.force_login(vera)
    answers += [client.get(f"/api/v1/pipelines/{billing.pk}/batches", {"limit": "x"}),  # 400
                client.get("/api/v1/pipelines/99999999"),  # 404
                client.delete("/api/v1/collectors")]  # 405
    client.force_login(dave)
    answers.append(client.get("/api/v1/collectors"))  # 403
    assert [a.status_code for a in answers] == [401, 400, 404, 405, 403]
    for answer in answers:
        assert violations(spec, error, answer.json()) == []


def test_every_documented_numeric_or_time_parameter_is_validated(client, vera_logged_in, billing, spec):
    """The spec says which parameters exist; each integer or time parameter refuses garbage by name."""
    tried = 0
    for path, operations in spec["paths"].items():
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter["in"] != "query":
                continue
            numeric = parameter["schema"].get("type") == "integer"
            timelike = parameter["name"] in ("from", "to")
            enum = "enum" in parameter["schema"]
            if not (numeric or timelike or enum):
                continue
            url = path.replace("{pipeline_id}", str(billing.pk))
            response = client.get(url, {parameter["name"]: "not-a-value"})
            assert response.status_code == 400, (path, parameter["name"])
            assert f"invalid parameter {parameter['name']!r}: 'not-a-value'" in response.json()["error"]
            tried += 1
    assert tried >= 6


def test_the_schema_checker_catches_what_it_must(spec):
    summary = spec["components"]["schemas"]["PipelineSummary"]
    assert any("required property 'topic'" in v for v in violations(spec, summary, {}))
    assert violations(spec, {"type": ["integer", "null"]}, None) == []
    assert violations(spec, {"type": "integer"}, True) != []  # a bool is not an integer
    assert violations(spec, {"type": "object", "additionalProperties": False, "properties": {}}, {"x": 1}) != []
    assert violations(spec, {"type": "string", "nullable": True}, None) == []
    with pytest.raises(ValueError, match="unsupported"):
        violations(spec, {"anyOf": []}, 1)
    either = {"oneOf": [{"type": "integer"}, {"type": "null"}]}
    assert violations(spec, either, None) == [] and violations(spec, either, 3) == []
    assert violations(spec, either, "x") != []  # no branch matches


def test_a_page_of_batches_costs_a_constant_number_of_queries(client, vera_logged_in, unique_name, django_assert_max_num_queries):
    pipeline = _batches_pipeline(unique_name, 120)
    with django_assert_max_num_queries(12):  # session, user, roles, pipeline, one page of batches
        body = client.get(f"/api/v1/pipelines/{pipeline.pk}/batches", {"limit": 100}).json()
    assert len(body["batches"]) == 100
