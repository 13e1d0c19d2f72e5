"""The security suite: who may do what on every route (an authorization matrix walking every URL
pattern for every actor and every method the route accepts), and CSRF on every unsafe route.
Over 400 lines because the matrix (route -> who may) is one table, read whole.

The table below is the one place that says what each actor gets from each route: a route added
to the URLs without a row here fails test_every_route_has_a_row. Admin routes follow rules by
kind (changelist, add, change, ...) from the staff actor's permissions, so a new model admin is
covered as soon as it is registered, and an admin view of an unknown kind fails the test.
Actors and their world: tests/factories.py (ACTORS, security_world).
"""
from __future__ import annotations

import copy
import json
import re
from urllib.parse import urlencode

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.http import JsonResponse
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from dashboard.accounts.roles import OPERATOR
from dashboard.accounts.tokens import api_token_issue, pipeline_token_issue
from dashboard.admin import ReadOnlyAuditedAdmin
from dashboard.api.views import api_view
from tests.factories import ACTORS, STAFF_PERMISSIONS, offline_pipeline, security_world

pytestmark = pytest.mark.django_db

L = "login"  # 302 to /login/?next=... (a person not logged in is sent to log in)
AL = "admin_login"  # 302 to /admin/login/?next=...
OK = "ok"  # let in: any answer below 400 that is not a login redirect (admin forms and actions)
IMAGE = frozenset({200, 429, 503})  # rendered; or per-user limit reached; or no Chromium on the machine
HEAVY = frozenset({200, 429})  # heavy reads may be refused with 429 by the per-user limit
HEALTH = frozenset({200, 503})  # whether beat and the workers are seen running is no concern here


def row(*outcomes) -> dict:
    """One outcome per actor, in the order of ACTORS:
    anonymous, norole, viewer, operator, approver, staff, superuser, api_token, pipeline_token,
    other_pipeline_token."""
    assert len(outcomes) == len(ACTORS)
    return dict(zip(ACTORS, outcomes))


def heavy(outcomes: dict, allowed=HEAVY) -> dict:
    return {actor: (allowed if outcome == 200 else outcome) for actor, outcome in outcomes.items()}


#                anon  norole viewer oper appr  staff super api   own  other
VIEW = row(L, 403, 200, 200, 200, 403, 200, L, L, L)
API_READ = row(401, 403, 200, 200, 200, 403, 200, 200, 401, 401)
JOB_ONLY = (401,) * 8  # the jobs' endpoints know only pipeline tokens (no session, no API token)

# route name -> {method: {actor: expected}}; every method a route accepts is listed, every other
# method is a 405 (test_methods_not_listed_are_refused).
MATRIX = {
    "overview": {"GET": VIEW},
    "overview_live": {"GET": VIEW},
    "pipeline": {"GET": VIEW},
    "pipeline_live": {"GET": VIEW},
    "pipeline_status": {"GET": VIEW},
    "pipeline_lag_chart": {"GET": heavy(VIEW)},
    "pipeline_chart_png": {"GET": heavy(VIEW, IMAGE)},
    "pipeline_chart_svg": {"GET": heavy(VIEW, IMAGE)},
    "pipeline_chart_csv": {"GET": heavy(VIEW)},
    "pipeline_chart_json": {"GET": heavy(VIEW)},
    "pipeline_batches_csv": {"GET": heavy(VIEW)},
    "export_job_new": {"POST": row(L, 403, 302, 302, 302, 403, 302, L, L, L)},
    "export_jobs": {"GET": VIEW},
    "export_jobs_live": {"GET": VIEW},
    # Someone else's export is a 404, as if it did not exist.
    "export_job_download": {"GET": row(L, 403, 200, 404, 404, 403, 404, L, L, L)},
    "collectors": {"GET": VIEW},
    "rewind_new": {"GET": row(L, 403, 403, 200, 403, 403, 200, L, L, L),
                   "POST": row(L, 403, 403, 200, 403, 403, 200, L, L, L)},  # a preview
    "rewinds": {"GET": VIEW},
    "rewind": {"GET": VIEW},
    # olga requested the rewind: an approver (not olga) approves it; nobody else may.
    "rewind_decide": {"POST": row(L, 403, 403, 403, 302, 403, 302, L, L, L)},
    # Cancelling: the requester or an approver; a viewer or operator who did not request it: 409.
    "rewind_cancel": {"POST": row(L, 403, 409, 409, 302, 403, 302, L, L, L)},
    # Writing into the store: operators only; it is not approved yet, so they get a 409.
    "rewind_write": {"POST": row(L, 403, 403, 409, 403, 403, 409, L, L, L)},
    # On call (operator or approver): the incident is closed (409); the silence is active (302).
    "incident_acknowledge": {"POST": row(L, 403, 403, 409, 409, 403, 409, L, L, L)},
    "pipeline_silence": {"POST": row(L, 403, 403, 302, 302, 403, 302, L, L, L)},
    "silences": {"GET": VIEW},
    "silence_new": {"POST": row(L, 403, 403, 302, 302, 403, 302, L, L, L)},
    "silence_cancel": {"POST": row(L, 403, 403, 302, 302, 403, 302, L, L, L)},
    "audit": {"GET": VIEW},
    "audit_verify": {"POST": row(L, 403, 403, 403, 302, 403, 302, L, L, L)},
    "audit_export_csv": {"GET": VIEW},
    "audit_export_json": {"GET": VIEW},
    "plotly_js": {"GET": row(*(200,) * 10)},
    "healthz": {"GET": row(*(HEALTH,) * 10)},
    "metrics": {"GET": row(401, 403, 200, 200, 200, 403, 200, 200, 401, 401)},
    "login": {"GET": row(*(200,) * 10), "POST": row(*(200,) * 10), "PUT": row(*(200,) * 10)},  # wrong password: the form again
    "logout": {"POST": row(*(302,) * 10)},
    "api_pipelines": {"GET": API_READ},
    "api_pipeline": {"GET": API_READ},
    "api_pipeline_partitions": {"GET": API_READ},
    "api_pipeline_batches": {"GET": API_READ},
    "api_pipeline_lag": {"GET": API_READ},
    "api_collectors": {"GET": API_READ},
    "api_openapi": {"GET": API_READ},
    # The token decides the pipeline: another pipeline's token cannot report for this one (400) nor
    # touch its rewinds (404); the own token gets 409 as the rewind is not approved.
    "api_start_report": {"POST": row(*JOB_ONLY, 201, 400)},
    "api_rewind_pending": {"GET": row(*JOB_ONLY, 200, 200)},
    "api_rewind_claim": {"POST": row(*JOB_ONLY, 409, 404)},
    "api_rewind_applied": {"POST": row(*JOB_ONLY, 409, 404)},
    "api_rewind_failed": {"POST": row(*JOB_ONLY, 409, 404)},
    "api_not_found": {method: row(*(404,) * 10) for method in ("GET", "POST", "PUT", "PATCH", "DELETE")},
}


# --- the routes -------------------------------------------------------------------------------------


def url_patterns(resolver=None, prefix: str = "", namespace: str = ""):
    """(pattern, name) of every URL pattern, nested ones included; admin names as "admin:<name>"."""
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            ns = f"{entry.namespace}:" if entry.namespace else namespace
            yield from url_patterns(entry, prefix + str(entry.pattern), ns)
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), (namespace + entry.name) if entry.name else None


def example_path(pattern: str, world) -> str:
    """A path of `pattern` about the world's objects."""
    values = {"<int:pipeline_id>": world.pipeline.pk, "<int:rewind_id>": world.rewind.pk,
              "<int:job_id>": world.export_job.pk, "<int:incident_id>": world.incident.pk,
              "<int:silence_id>": world.silence.pk}
    path = pattern
    for token, value in values.items():
        path = path.replace(token, str(value))
    path = path.replace("^(?P<rest>.*)$", "no/such/endpoint")
    assert "<" not in path and "(" not in path, f"{pattern}: give its parameters a value in example_path"
    return "/" + path


def site_routes():
    """The non-admin routes: (name, path pattern)."""
    return [(name, pattern) for pattern, name in url_patterns() if not pattern.startswith("admin/")]


def test_every_route_has_a_row():
    names = [name for name, _ in site_routes()]
    assert None not in names, "every non-admin route needs a name (the matrix is keyed by it)"
    missing = sorted(set(names) - set(MATRIX))
    assert not missing, f"routes without a row in MATRIX (say who may do what): {missing}"
    assert not sorted(set(MATRIX) - set(names)), "rows for routes that no longer exist"
    assert len(names) >= 40


# --- admin rules ------------------------------------------------------------------------------------

_MODEL_KINDS = ("changelist", "add", "change", "delete", "history", "password_change", "object")


def admin_cases(world):
    """(label, path, kind, model or None) of every admin URL pattern; kind names the rule."""
    models = {f"{m._meta.app_label}/{m._meta.model_name}": m for m in admin.site._registry}
    pipeline_ct = ContentType.objects.get_for_model(type(world.pipeline))
    for pattern, name in url_patterns():
        if not pattern.startswith("admin/"):
            continue
        m = re.match(r"admin/(\w+/\w+)/(.*)$", pattern)
        model = models.get(m.group(1)) if m else None
        if model is not None:
            rest = m.group(2)
            obj = model._default_manager.order_by("pk").first()
            assert obj is not None, f"{model.__name__}: security_world must make one (its admin pages need it)"
            kind = (name.rsplit("_", 1)[-1] if name else "object")
            if name and name.endswith("_password_change"):
                kind = "password_change"
            assert kind in _MODEL_KINDS, f"{pattern} ({name}): an admin view of an unknown kind: add its rule"
            path = f"/admin/{m.group(1)}/" + rest.replace("<path:object_id>", str(obj.pk)).replace("<id>", str(obj.pk))
            yield f"{name or pattern}", path, kind, model
            continue
        kind = (name or "").removeprefix("admin:") or ("catch_all" if "(?P<url>" in pattern else "?")
        path = {"app_list": "/admin/dashboard/", "catch_all": "/admin/nothing-here/",
                "view_on_site": f"/admin/r/{pipeline_ct.pk}/{world.pipeline.pk}/"}.get(kind, "/" + pattern)
        assert kind in _SITE_KINDS, f"{pattern} ({name}): an admin view of an unknown kind: add its rule"
        yield name or pattern, path, kind, None


OUTSIDERS = [a for a in ACTORS if a not in ("staff", "superuser")]  # no admin access at all
_SITE_KINDS = {
    # kind: {method: (outsiders, staff, superuser)}
    "index": {"GET": (AL, 200, 200)},
    "login": {"GET": (200, 302, 302), "POST": (200, 200, 200)},  # logged-in staff are sent to the index
    "logout": {"POST": (OK, OK, OK)},
    "password_change": {"GET": (AL, 200, 200), "POST": (AL, 200, 200)},
    "password_change_done": {"GET": (AL, 200, 200)},
    "jsi18n": {"GET": (AL, 200, 200)},
    "app_list": {"GET": (AL, 200, 200)},
    "autocomplete": {"GET": (AL, 403, 403)},  # no field asked: refused to everyone
    "view_on_site": {"GET": (AL, 404, 404)},  # no model has a public URL
    "catch_all": {"GET": (AL, 404, 404)},
}


def _staff_may(model, action: str) -> bool:
    return f"{action}_{model._meta.model_name}" in STAFF_PERMISSIONS


def admin_expected(kind: str, model, method: str) -> dict | None:
    """{actor: outcome} of an admin case; None where the kind does not take the method."""
    if model is None:
        outcome = _SITE_KINDS[kind].get(method)
        if outcome is None:
            return None
        return {**{a: outcome[0] for a in OUTSIDERS}, "staff": outcome[1], "superuser": outcome[2]}
    model_admin = admin.site._registry[model]
    methods = {"changelist": ("GET", "POST"), "add": ("GET", "POST"), "change": ("GET", "POST"),
               "delete": ("GET", "POST"), "history": ("GET",), "password_change": ("GET", "POST"),
               "object": ("GET",)}[kind]
    if method not in methods:
        return None
    viewable = _staff_may(model, "view") or _staff_may(model, "change")
    staff = {
        "changelist": 200 if viewable else 403,
        "add": 403,  # no add permission
        "change": (200 if viewable else 403) if method == "GET" else (OK if _staff_may(model, "change") else 403),
        "delete": 403,
        "history": 200 if viewable else 403,
        "password_change": 403,
        "object": 302,  # the old /<id>/ address redirects to /<id>/change/ whoever asks
    }[kind]
    if kind == "changelist" and method == "POST":
        staff = OK if viewable else 403
    addable = type(model_admin).has_add_permission is admin.ModelAdmin.has_add_permission
    # Rows the collectors, jobs and login throttling write are shown, never edited (dashboard/admin.py).
    read_only = isinstance(model_admin, ReadOnlyAuditedAdmin)
    if read_only and kind == "change" and method == "POST":
        staff = 403
    superuser = {"add": (200 if method == "GET" else OK) if addable else 403, "object": 302,
                 "change": 403 if read_only and method == "POST" else (200 if method == "GET" else OK)}.get(
        kind, 200 if method == "GET" else OK)
    return {**{a: AL for a in OUTSIDERS}, "staff": staff, "superuser": superuser}


# --- the walk ---------------------------------------------------------------------------------------


def post_body(name: str, world) -> tuple[object, str | None]:
    """(data, content type) of a route's POST: what the page's form or the job would send."""
    report = {"topic": world.pipeline.topic, "group": world.pipeline.group, "offsets": {"0": 9, "1": 8}}
    job = {"instance": "job-1", "offsets": {"0": 4, "1": 4}, "marker_batch_ms": 1, "error": "boom"}
    bodies = {
        "export_job_new": {"export": "batches_csv"},
        "rewind_new": {"kind": "latest", "reason": "replay", "mode": "job", "action": "preview"},
        "rewind_decide": {"decision": "approve", "comment": "ok"},
        "incident_acknowledge": {"note": "on it"},
        "pipeline_silence": {"duration": "3600", "reason": "maintenance"},
        "silence_new": {"topic_pattern": "orders-*", "duration": "3600", "reason": "maintenance"},
        "login": {"username": "nobody", "password": "wrong"},
        "api_start_report": (report, "application/json"),
        "api_rewind_claim": (job, "application/json"),
        "api_rewind_applied": (job, "application/json"),
        "api_rewind_failed": (job, "application/json"),
    }
    body = bodies.get(name, {})
    return body if isinstance(body, tuple) else (body, None)


def send(client, method: str, path: str, data=None, content_type=None):
    """One request: GET with no body; other methods with `data` as JSON (given a content type) or
    as a form, encoded by hand for PUT/PATCH/DELETE (the test client encodes only POST's forms)."""
    call = getattr(client, method.lower())
    if method in ("GET", "HEAD", "OPTIONS"):
        return call(path)
    if content_type:
        return call(path, json.dumps(data), content_type=content_type)
    if method == "POST":
        return call(path, data or {})
    return call(path, urlencode(data or {}, doseq=True), content_type="application/x-www-form-urlencoded")


def outcome_matches(expected, response) -> bool:
    status, location = response.status_code, response.get("Location", "")
    if expected == L:
        return status == 302 and location.startswith("/login/?next=")
    if expected == AL:
        return status == 302 and location.startswith("/admin/login/?next=")
    if expected == OK:
        return status < 400 and "login/?next=" not in location
    if isinstance(expected, frozenset):
        return status in expected
    return status == expected


def run_isolated(client, method, path, data=None, content_type=None):
    """One request whose changes are rolled back, the client's cookies too (a logout must not
    log the actor out for the next route): every actor meets the same world."""
    cookies = copy.deepcopy(client.cookies)
    with transaction.atomic():
        response = send(client, method, path, data, content_type)
        transaction.set_rollback(True)
    client.cookies = cookies
    return response


@pytest.fixture
def world(unique_name, tmp_path):
    return security_world(unique_name, tmp_path)


def _shown(response) -> str:
    return f"{response.status_code} {response.get('Location', '')} {response.content[:120]!r}"


def test_the_authorization_matrix(world):
    """Every route, every method it accepts, every actor: the outcome in MATRIX (admin: the rules)."""
    clients = {name: actor.client() for name, actor in world.actors.items()}
    secret = world.pipeline.topic.encode()  # no refusal may show any of the data
    wrong, checked = [], 0
    cases = [(name, example_path(pattern, world), MATRIX[name]) for name, pattern in site_routes()]
    for label, path, kind, model in admin_cases(world):
        methods = {m: admin_expected(kind, model, m) for m in ("GET", "POST")}
        cases.append((label, path, {m: e for m, e in methods.items() if e is not None}))
    for label, path, methods in cases:
        for method, expected in methods.items():
            data, content_type = post_body(label, world) if method != "GET" else (None, None)
            for actor in ACTORS:
                response = run_isolated(clients[actor], method, path, data, content_type)
                checked += 1
                if not outcome_matches(expected[actor], response):
                    wrong.append(f"{method} {path} ({label}) as {actor}: expected {expected[actor]}, got {_shown(response)}")
                elif expected[actor] in (401, 403, L, AL) and not response.streaming and secret in response.content:
                    wrong.append(f"{method} {path} ({label}) as {actor}: the refusal shows the pipeline's topic")
                if path.startswith("/api/"):
                    assert response["Content-Type"] == "application/json", (method, path, actor)
    assert not wrong, f"{len(wrong)} of {checked} outcomes differ:\n" + "\n".join(wrong)
    assert checked > 1000


# Django's class-based login and logout views answer OPTIONS with their Allow header (no data).
OPTIONS_ANSWERED = {"login", "logout"}


def test_methods_not_listed_are_refused(world):
    """What MATRIX does not list for a route is a 405 for someone allowed to use the route (HEAD
    goes with GET; api_not_found answers 404 to everything)."""
    root = world.actors["superuser"].client()
    job = world.actors["pipeline_token"].client()
    wrong = []
    for name, pattern in site_routes():
        path = example_path(pattern, world)
        for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            listed = MATRIX[name].get("GET" if method == "HEAD" else method)
            if listed or name == "api_not_found":
                continue
            client = job if name.startswith("api_rewind") or name == "api_start_report" else root
            response = run_isolated(client, method, path)
            expected = 200 if method == "OPTIONS" and name in OPTIONS_ANSWERED else 405
            if response.status_code != expected:
                wrong.append(f"{method} {path} ({name}): {_shown(response)}")
    assert not wrong, "\n".join(wrong)


def test_a_staff_user_cannot_give_himself_what_he_lacks(world):
    """The staff actor changes stores; the user admin (his own permissions included) stays shut."""
    staff = world.actors["staff"]
    client = staff.client()
    response = run_isolated(client, "POST", f"/admin/auth/user/{staff.user.pk}/change/",
                            {"username": staff.user.username, "is_superuser": "on", "is_staff": "on"})
    assert response.status_code == 403
    staff.user.refresh_from_db()
    assert not staff.user.is_superuser


# --- CSRF ---------------------------------------------------------------------------------------------

# Unsafe routes that take no session (the jobs' pipeline tokens: nothing to forge) or do nothing.
CSRF_NOT_NEEDED = {"api_start_report": 401, "api_rewind_claim": 401, "api_rewind_applied": 401,
                   "api_rewind_failed": 401, "api_not_found": 404}


def test_every_unsafe_route_refuses_a_session_request_without_the_csrf_token(world):
    """A forged cross-site request carries the session cookie but not the token: refused (403)
    everywhere, before any role or form is looked at; the jobs' endpoints ignore the session."""
    root = world.actors["superuser"].client(enforce_csrf_checks=True)
    walked, wrong = 0, []
    cases = [(name, example_path(pattern, world), [m for m in MATRIX[name] if m != "GET"]) for name, pattern in site_routes()]
    cases += [(label, path, [m for m in ("POST",) if admin_expected(kind, model, m) is not None])
              for label, path, kind, model in admin_cases(world)]
    for name, path, methods in cases:
        for method in methods:
            data, content_type = post_body(name, world)
            response = run_isolated(root, method, path, data, content_type)
            walked += 1
            expected = CSRF_NOT_NEEDED.get(name, 403)
            if response.status_code != expected or (expected == 403 and b"CSRF" not in response.content):
                wrong.append(f"{method} {path} ({name}): {_shown(response)}")
    assert not wrong, "\n".join(wrong)
    assert walked >= 40
    assert root.get(reverse("overview")).status_code == 200  # still logged in: the forged logout failed


def test_the_csrf_token_lets_the_same_request_through(world):
    """The walker's 403s are CSRF's: with the token, the same session request passes."""
    root = world.actors["superuser"].client(enforce_csrf_checks=True)
    token = root.get(reverse("login")).cookies["csrftoken"].value
    response = root.post(reverse("export_job_new", args=[world.pipeline.pk]), {"export": "batches_csv",
                                                                             "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == reverse("export_jobs")


def test_start_reports_need_no_csrf_token_with_a_pipeline_token(unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 4})])
    _, plain = pipeline_token_issue(pipeline=pipeline, name="job")
    job = Client(enforce_csrf_checks=True)
    report = {"topic": pipeline.topic, "group": pipeline.group, "offsets": {"0": 4}}
    response = job.post(reverse("api_start_report"), report, content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert response.status_code == 201 and response.json()["pipeline"] == pipeline.pk


@pytest.fixture
def request_rewind():
    """A mutating API endpoint for operators, as api_view declares one (none is a session POST yet)."""
    @api_view(methods=("POST",), role=OPERATOR)
    def view(request):
        return JsonResponse({"requested_by": request.user.username}, status=201)
    return view


def test_api_posts_by_session_need_the_csrf_token(request_rewind, olga):
    rf = RequestFactory()
    forged = rf.post("/api/v1/rewinds", {}, content_type="application/json")
    forged.user = olga
    response = request_rewind(forged)
    assert response.status_code == 403 and json.loads(response.content)["error"].startswith("CSRF check failed")

    secret = "k" * 32  # the cookie's secret, echoed in the header as a same-origin page does
    genuine = rf.post("/api/v1/rewinds", {}, content_type="application/json", HTTP_X_CSRFTOKEN=secret)
    genuine.COOKIES["csrftoken"] = secret
    genuine.user = olga
    assert request_rewind(genuine).status_code == 201


def test_api_posts_by_token_need_no_csrf_token_but_the_role(request_rewind, olga, vera, dave):
    rf = RequestFactory()
    _, olga_token = api_token_issue(user=olga, name="automation")
    _, vera_token = api_token_issue(user=vera, name="grafana")
    request = rf.post("/api/v1/rewinds", {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {olga_token}")
    request.user = dave  # whatever the session says, the token decides
    response = request_rewind(request)
    assert response.status_code == 201 and json.loads(response.content) == {"requested_by": "olga"}
    request = rf.post("/api/v1/rewinds", {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {vera_token}")
    request.user = dave
    response = request_rewind(request)
    assert response.status_code == 403 and "needs the operator role" in json.loads(response.content)["error"]
    request = rf.get("/api/v1/rewinds", HTTP_AUTHORIZATION=f"Bearer {olga_token}")
    assert request_rewind(request).status_code == 405
