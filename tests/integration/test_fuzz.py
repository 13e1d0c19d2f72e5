"""A fuzz of every parameter of every GET route and of the jobs' payloads: a few thousand hostile
values (deterministic: the same ones every run, so a failure reproduces), never a 500, and every
answer under /api/ is JSON.

Each GET route lists its parameters in PARAMS (a route missing from it fails the test, as in
tests/integration/test_security.py); each parameter is tried alone with every hostile value of its kind and
of the generic kind, then every route gets random combinations (seeded) with repeated parameters.
Chart images are not rendered here (render_image stubbed: the parameters are the subject,
not Chromium).
"""
from __future__ import annotations

import json
import random
from urllib.parse import quote

import pytest
from django.urls import resolve, reverse

from dashboard.web import chart_views
from tests.factories import security_world
from tests.integration.test_security import MATRIX, example_path, site_routes

pytestmark = pytest.mark.django_db

# --- hostile values -------------------------------------------------------------------------------

GENERIC = [
    "", " ", "\x00", "a\x00b", "x" * 5000, "<script>alert(1)</script>", "' OR 1=1 --", "%", "%00", "\u202egnp.exe",
    "\u200b", "null", "[]", "{}", "true", "-", "..", "/etc/passwd", "é" * 300, "\ufeff1",
    "RAW:%ff%fe", "RAW:%c0%80", "RAW:%ed%a0%80",  # invalid UTF-8 in the query string itself
]
NUMBERS = [
    "0", "-1", "1", "-0", "+1", " 1", "1 ", "1.5", "1e20", "1E3", "NaN", "inf", "-inf", "0x10", "1_000", "٣", "１２", "²",
    "9" * 19, "9" * 20, "9" * 5000, str(2**63 - 1), str(2**63), str(-(2**63) - 1), str(2**31), "00000000000000000001",
]
TIMES = [
    "0001-01-01T00:00+14:00", "0001-01-01T00:00-14:00", "0001-01-01", "0001-01-01T00:00:00.000001Z",
    "9999-12-31T23:59-14:00", "9999-12-31T23:59:59.999999+14:00", "9999-12-31", "0000-01-01", "10000-01-01",
    "2026-11-22T13:00+99:99", "2026-11-22T13:00-99:99", "2026-11-22T13:00+23:59:59.999999", "2026-02-30",
    "2026-11-22T24:00", "2026-11-22T13:00 14:00", "2026-W01", "20261122T1300", "1970-01-01T00:00Z",
    "253402300799999", "253402300800000", "-1", "2026-11-22T13:00:00.123456789", "now", "today",
]
CHOICES = ["all", "total", "partitions", "seconds", "messages", "15m", "30d", "1y", "OK,ERR", "ok", ",", "OK,,OK",
           "minmax", "lttb", "rewind", "rewind.requested", "batch", "latest", "problems"]

KINDS = {"number": NUMBERS, "time": TIMES, "choice": CHOICES, "text": []}

_CHART = {"range": "choice", "from": "time", "to": "time", "kind": "choice", "unit": "choice"}
_AUDIT = {"pipeline": "number", "actor": "text", "action": "choice", "q": "text", "since": "time", "until": "time",
          "before": "number"}
_OVERVIEW = {"status": "choice", "store": "text", "cluster": "text", "q": "text", "archived": "choice", "sort": "choice",
             "page": "number"}
# The pipeline page: its chart, its batch page, its partition table's rows (how many, which).
_PIPELINE = {**_CHART, "page": "number", "shown": "number", "only": "choice", "partition": "number"}

# GET route -> {parameter: kind}. Every GET route is here, parameters or not.
PARAMS = {
    "overview": _OVERVIEW, "overview_live": _OVERVIEW,
    "pipeline": _PIPELINE, "pipeline_live": _PIPELINE,
    "pipeline_status": {},
    "pipeline_lag_chart": _CHART,
    "pipeline_chart_png": {**_CHART, "width": "number", "height": "number"},
    "pipeline_chart_svg": {**_CHART, "width": "number", "height": "number"},
    "pipeline_chart_csv": {**_CHART, "max_points": "number"},
    "pipeline_chart_json": {**_CHART, "max_points": "number"},
    "pipeline_batches_csv": {"range": "choice", "from": "time", "to": "time"},
    "export_jobs": {}, "export_jobs_live": {}, "export_job_download": {}, "collectors": {},
    "rewind_new": {"kind": "choice", "batch_time_ms": "number"},
    "rewinds": {}, "rewind": {}, "silences": {},
    "audit": _AUDIT, "audit_export_csv": _AUDIT, "audit_export_json": _AUDIT,
    "plotly_js": {}, "healthz": {}, "metrics": {},
    "login": {"next": "text"},
    "api_pipelines": {"status": "choice", "store": "text", "cluster": "text", "q": "text"},
    "api_pipeline": {}, "api_pipeline_partitions": {},
    "api_pipeline_batches": {"from": "time", "to": "time", "limit": "number", "cursor": "text"},
    "api_pipeline_lag": {"from": "time", "to": "time", "points": "number", "method": "choice"},
    "api_collectors": {}, "api_openapi": {}, "api_rewind_pending": {}, "api_not_found": {},
}
# Routes whose every parameter gets only the generic values (their answer does not depend on them).
_QUIET = {"plotly_js", "healthz", "metrics", "api_openapi", "api_not_found"}
# Routes that parse their parameters with the same code as their twin: random combinations only
# (keeps the whole file within ~40 s on a small machine).
_TWINS = {"overview_live": "overview", "pipeline_live": "pipeline", "pipeline_chart_svg": "pipeline_chart_png",
          "audit_export_json": "audit_export_csv"}


def _query(pairs) -> str:
    return "&".join(f"{quote(name)}={value[4:] if value.startswith('RAW:') else quote(value, safe='')}"
                    for name, value in pairs)


def single_value_cases(name: str) -> list[list[tuple[str, str]]]:
    """Every parameter of the route alone with every value of its kind and the generic ones, then
    an unknown parameter, then each parameter given twice."""
    cases = []
    for param, kind in PARAMS[name].items():
        cases += [[(param, v)] for v in KINDS[kind] + GENERIC]
        cases.append([(param, "1"), (param, "2")])
    cases += [[("unknown", v)] for v in GENERIC[:4]]
    return cases


def combination_cases(name: str, count: int, rng: random.Random) -> list[list[tuple[str, str]]]:
    params = list(PARAMS[name].items())
    if not params:
        return []
    pool = {kind: KINDS[kind] + GENERIC for kind in KINDS}
    cases = []
    for _ in range(count):
        chosen = rng.sample(params, k=min(len(params), rng.randint(2, 4)))
        cases.append([(p, rng.choice(pool[kind])) for p, kind in chosen])
    return cases


def test_every_get_route_lists_its_parameters():
    gets = {name for name, methods in MATRIX.items() if "GET" in methods}
    assert sorted(gets - set(PARAMS)) == [], "GET routes missing from PARAMS: list their parameters"
    assert sorted(set(PARAMS) - gets) == []
    # The API's parameters are documented: PARAMS lists each of them, no fewer.
    from dashboard.api.views import OPENAPI_PATH

    spec = json.loads(OPENAPI_PATH.read_text())
    for path, operations in spec["paths"].items():
        if "get" not in operations:
            continue
        documented = {p["name"] for p in operations["get"].get("parameters", []) if p["in"] == "query"}
        name = resolve(path.replace("{pipeline_id}", "1").replace("{rewind_id}", "1")).url_name
        assert documented <= set(PARAMS[name]), (path, documented - set(PARAMS[name]))


@pytest.fixture
def world(unique_name, tmp_path, monkeypatch):
    monkeypatch.setattr(chart_views, "render_image", lambda fig, *, fmt, width, height: b"<svg/>")
    return security_world(unique_name, tmp_path)


def _check(response, path: str, query: str, problems: list) -> None:
    where = f"GET {path}?{query[:200]}"
    if response.status_code >= 500:
        problems.append(f"{where}: {response.status_code} {response.content[:200]!r}")
    elif path.startswith("/api/") and response["Content-Type"] != "application/json":
        problems.append(f"{where}: {response.status_code} not JSON ({response['Content-Type']})")


def test_no_parameter_value_is_a_server_error(world):
    root = world.actors["superuser"].client()
    job = world.actors["pipeline_token"].client()
    root.raise_request_exception = job.raise_request_exception = False  # every failure listed, not only the first
    rng = random.Random(12)  # fixed: a failure reproduces
    problems, sent = [], 0
    for name, pattern in site_routes():
        if "GET" not in MATRIX[name]:
            continue
        path = example_path(pattern, world)
        client = job if name == "api_rewind_pending" else root
        if name in _TWINS:
            assert PARAMS[name] == PARAMS[_TWINS[name]], name
            cases = []
        elif name in _QUIET:
            cases = [[(p, v)] for p in PARAMS[name] for v in GENERIC]
        else:
            cases = single_value_cases(name)
        for pairs in cases + combination_cases(name, 20, rng):
            query = _query(pairs)
            _check(client.get(f"{path}?{query}"), path, query, problems)
            sent += 1
    assert not problems, f"{len(problems)} of {sent} requests failed:\n" + "\n".join(problems[:50])
    assert sent > 2500


@pytest.mark.parametrize("value", ["0", "9" * 19, str(2**63), "9" * 30])
def test_hostile_ids_in_paths_are_404s_not_500s(world, value):
    root = world.actors["superuser"].client()
    for name, pattern in site_routes():
        if "<int:" not in pattern or "GET" not in MATRIX[name]:
            continue
        path = "/" + pattern.replace("<int:pipeline_id>", value).replace("<int:rewind_id>", value).replace(
            "<int:job_id>", value)
        response = root.get(path)
        assert response.status_code == 404, (path, response.status_code)
        if path.startswith("/api/"):
            assert response["Content-Type"] == "application/json"
    job = world.actors["pipeline_token"].client()
    for action in ("claim", "applied", "failed"):
        response = job.post(f"/api/v1/rewinds/{value}/{action}", {"instance": "a", "offsets": {"0": 1}},
                            content_type="application/json")
        assert response.status_code == 404 and response.json()["error"], action


# --- job payloads ------------------------------------------------------------------------------------

JSON_VALUES = [None, True, False, 0, -1, 1.5, 1e20, 10**30, -(10**30), 2**63, 2**63 - 1, "", "5", "٣", "x" * 400,
               "a\x00b", [], [1], {}, {"0": 1}, {"٣": 1}, {"+1": 1}, {" 1": 1}, {"0": -1}, {"0": 10**30}, {"0": 1e20},
               {"0": True}, {"0": "1"}, {"0": None}, [[[[[[[[[[[]]]]]]]]]]]]
RAW_BODIES = ['{"offsets": {"0": NaN}}', '{"offsets": {"0": Infinity}}', '{"x": -Infinity}', "", "null", "[]", "1", '"x"',
              "{", '{"a": 1}}', "\x00", '{"instance": "\\u0000"}', '{"instance": "\\ud800"}', "[" * 5000 + "]" * 5000,
              '{"offsets": {"0": 1' + "0" * 5000 + "}}"]


def _report(world) -> dict:
    return {"topic": world.pipeline.topic, "group": world.pipeline.group, "offsets": {"0": 9, "1": 8},
            "first_start": False, "decisions": ["resumed"], "stored": {"0": 9, "1": 8}, "rewind": None,
            "clamps": [{"partition": 0, "stored": 1, "low": 4, "high": 10, "started_at": 4, "kind": "low",
                        "messages_lost": 3}]}


def _mutations(body: dict):
    """The body with each field (and each field of a nested object or list item) replaced by every
    hostile JSON value, and dropped."""
    for key in list(body):
        for value in JSON_VALUES:
            yield {**body, key: value}
        yield {k: v for k, v in body.items() if k != key}
        inner = body[key]
        if isinstance(inner, list) and inner and isinstance(inner[0], dict):
            for sub in list(inner[0]):
                for value in JSON_VALUES:
                    yield {**body, key: [{**inner[0], sub: value}]}


def test_no_job_payload_is_a_server_error(world):
    job = world.actors["pipeline_token"].client()
    job.raise_request_exception = False
    rewind = world.rewind.pk
    bodies = {
        reverse("api_start_report"): _report(world),
        f"/api/v1/rewinds/{rewind}/claim": {"instance": "job-1"},
        f"/api/v1/rewinds/{rewind}/applied": {"instance": "job-1", "offsets": {"0": 4, "1": 4}, "marker_batch_ms": 1},
        f"/api/v1/rewinds/{rewind}/failed": {"instance": "job-1", "error": "boom"},
    }
    problems, sent = [], 0
    for path, body in bodies.items():
        raws = [json.dumps(b) for b in _mutations(body)] + RAW_BODIES
        for raw in raws:
            response = job.post(path, raw, content_type="application/json")
            sent += 1
            if response.status_code >= 500 or response["Content-Type"] != "application/json":
                problems.append(f"POST {path} {raw[:150]}: {response.status_code} {response.content[:200]!r}")
    assert not problems, f"{len(problems)} of {sent} bodies failed:\n" + "\n".join(problems[:50])
    assert sent > 500


# --- forms people post ---------------------------------------------------------------------------------

OFFSET_PAIRS = ["0:" + "9" * 30, "٣:1", "0:-1", "0:1,0:2", "0:1," * 3000, ":", "0:1e3"]
# route -> {field: (a valid value, the kind of hostile values it gets)}
FORMS = {
    "rewind_new": {"kind": ("time", "choice"), "time": ("2026-11-22T13:00", "time"),
                   "time_source": ("history", "choice"), "batch_time_ms": ("1", "number"),
                   "offsets": ("0:1", "offsets"), "shift": ("-5", "number"), "reason": ("replay", "text"),
                   "ticket_url": ("", "text"), "mode": ("job", "choice"), "action": ("preview", "choice")},
    "export_job_new": {"export": ("chart_csv", "choice"), "range": ("", "choice"), "from": ("2026-11-01T00:00", "time"),
                       "to": ("", "time"), "kind": ("total", "choice"), "unit": ("messages", "choice")},
    "rewind_decide": {"decision": ("reject", "choice"), "comment": ("no", "text")},
}


def test_no_form_value_is_a_server_error(world):
    """Every field of every form a person posts, with every hostile value (rolled back each time)."""
    from tests.integration.test_security import run_isolated

    root = world.actors["superuser"].client()
    root.raise_request_exception = False  # every failure listed, not only the first
    problems, sent = [], 0
    patterns = dict(site_routes())
    for name, fields in FORMS.items():
        path = example_path(patterns[name], world)
        valid = {field: value for field, (value, _) in fields.items()}
        for field, (_, kind) in fields.items():
            for value in {**KINDS, "offsets": OFFSET_PAIRS}[kind] + GENERIC[:12]:
                response = run_isolated(root, "POST", path, {**valid, field: value})
                sent += 1
                if response.status_code >= 500:
                    problems.append(f"POST {path} {field}={value[:60]!r}: {response.status_code}")
    assert not problems, f"{len(problems)} of {sent} posts failed:\n" + "\n".join(problems[:50])
