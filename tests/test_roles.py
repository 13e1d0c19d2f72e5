"""Roles (viewer, operator, approver), login everywhere but /healthz, create_user, CSRF."""
from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.http import HttpRequest, JsonResponse
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from dashboard import services
from dashboard.api import api_view
from dashboard.roles import APPROVER, OPERATOR, ROLES, VIEWER, role_required, user_has_role
from tests.factories import offline_pipeline, person

pytestmark = pytest.mark.django_db


def body(response) -> dict:
    return json.loads(response.content)


@pytest.fixture
def actors():
    """alice reads, bob may request rewinds, carol may approve, dave has an account and no role."""
    root = User.objects.create_superuser("root", password=None)
    return {
        "alice_viewer": person("alice_viewer", VIEWER),
        "bob_operator": person("bob_operator", OPERATOR),
        "carol_approver": person("carol_approver", APPROVER),
        "dave_norole": person("dave_norole"),
        "root": root,
    }


def test_the_migration_created_one_group_per_role():
    assert set(Group.objects.filter(name__in=ROLES).values_list("name", flat=True)) == set(ROLES)


@pytest.mark.parametrize("who,viewer,operator,approver", [
    ("alice_viewer", True, False, False),
    ("bob_operator", True, True, False),     # operator implies viewer
    ("carol_approver", True, False, True),   # approver implies viewer, not operator
    ("dave_norole", False, False, False),
    ("root", True, True, True),              # superusers have every role
])
def test_roles_and_what_they_imply(actors, who, viewer, operator, approver):
    user = User.objects.get(username=who)  # fresh object: nothing cached
    assert (user_has_role(user, VIEWER), user_has_role(user, OPERATOR), user_has_role(user, APPROVER)) == (
        viewer, operator, approver)


def test_inactive_users_and_unknown_roles(actors):
    carol = actors["carol_approver"]
    carol.is_active = False
    carol.save()
    assert not user_has_role(User.objects.get(pk=carol.pk), VIEWER)
    with pytest.raises(ValueError, match="unknown role 'admin'"):
        user_has_role(carol, "admin")
    with pytest.raises(ValueError, match="unknown role 'admin'"):
        role_required("admin")


# --- every page needs login ---------------------------------------------------------------------

# Reachable without logging in, on purpose: liveness, the login flow, a static asset, the JSON
# 404 for unknown API paths, and the start-report endpoint (the job's pipeline token instead).
PUBLIC = {"healthz", "login", "logout", "plotly_js", "api_not_found", "api_start_report"}


def _routes(resolver=None, prefix=""):
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            if getattr(entry, "namespace", None) == "admin":
                yield prefix + str(entry.pattern), "admin"
                continue
            yield from _routes(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.name


EXAMPLE_IDS = {"<int:pipeline_id>": "1", "<int:job_id>": "1", "<int:rewind_id>": "1"}


def _example(route: str) -> str:
    for param, value in EXAMPLE_IDS.items():
        route = route.replace(param, value)
    return "/" + route


def test_every_route_is_either_public_on_purpose_or_needs_login(client):
    routes = list(_routes())
    assert len(routes) >= 15
    for route, name in routes:
        if name in PUBLIC:
            continue
        assert "<" not in _example(route), f"{route}: add an example value for its parameter to EXAMPLE_IDS"
        response = client.get(_example(route))
        if route.startswith("api/") or route == "metrics":
            assert response.status_code == 401, route
        else:
            assert response.status_code == 302 and "/login/" in response["Location"], route


def test_a_user_with_no_role_is_told_so_on_every_data_page(client, actors, unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 4})])
    client.force_login(actors["dave_norole"])
    for url in (reverse("overview"), reverse("overview_live"), reverse("collectors"),
                reverse("pipeline", args=[pipeline.pk]), reverse("pipeline_live", args=[pipeline.pk]),
                reverse("pipeline_status", args=[pipeline.pk]), reverse("pipeline_lag_chart", args=[pipeline.pk])):
        response = client.get(url)
        assert response.status_code == 403, url
        html = response.content.decode()
        assert "no role assigned to &#x27;dave_norole&#x27;: ask an admin for the viewer role" in html
        assert pipeline.topic not in html  # nothing of the data leaks into the refusal
    response = client.get(reverse("api_pipelines"))
    assert response.status_code == 403 and response.json() == {
        "error": "no role assigned to 'dave_norole': ask an admin for the viewer role"}


@pytest.mark.parametrize("who", ["alice_viewer", "bob_operator", "carol_approver", "root"])
def test_every_role_reads_the_pages(client, actors, who, unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 4})])
    client.force_login(actors[who])
    assert pipeline.topic in client.get(reverse("overview")).content.decode()
    assert client.get(reverse("pipeline", args=[pipeline.pk])).status_code == 200


def test_a_role_the_user_lacks_is_named(actors):
    @role_required(APPROVER)
    def approve(request):
        return JsonResponse({"approved": True})

    rf = RequestFactory()
    request = rf.get("/api/v1/approve")
    request.user = actors["bob_operator"]
    response = approve(request)
    assert response.status_code == 403
    assert body(response)["error"] == "this needs the approver role; 'bob_operator' has: operator, viewer"
    request = rf.get("/api/v1/approve")
    request.user = actors["carol_approver"]
    assert approve(request).status_code == 200


# --- CSRF ----------------------------------------------------------------------------------------


def test_csrf_is_still_enforced_for_session_users(actors):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(actors["alice_viewer"])
    assert browser.post(reverse("logout")).status_code == 403  # a forged logout is refused
    assert browser.get(reverse("overview")).status_code == 200  # still logged in


def test_start_reports_need_no_csrf_token_with_a_pipeline_token(unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 4})])
    _, plain = services.pipeline_token_issue(pipeline=pipeline, name="job")
    job = Client(enforce_csrf_checks=True)
    report = {"topic": pipeline.topic, "group": pipeline.group, "offsets": {"0": 4}}
    response = job.post(reverse("api_start_report"), report, content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert response.status_code == 201 and response.json()["pipeline"] == pipeline.pk


@pytest.fixture
def request_rewind():
    """A mutating API endpoint for operators, as the rewind feature will declare it."""
    @api_view(methods=("POST",), role=OPERATOR)
    def view(request):
        return JsonResponse({"requested_by": request.user.username}, status=201)
    return view


def test_api_posts_by_session_need_the_csrf_token(actors, request_rewind):
    rf = RequestFactory()
    forged = rf.post("/api/v1/rewinds", {}, content_type="application/json")
    forged.user = actors["bob_operator"]
    response = request_rewind(forged)
    assert response.status_code == 403 and body(response)["error"].startswith("CSRF check failed")

    secret = "k" * 32  # the cookie's secret, echoed in the header as a same-origin page does
    genuine = rf.post("/api/v1/rewinds", {}, content_type="application/json", HTTP_X_CSRFTOKEN=secret)
    genuine.COOKIES["csrftoken"] = secret
    genuine.user = actors["bob_operator"]
    assert request_rewind(genuine).status_code == 201


def test_api_posts_by_token_need_no_csrf_token_but_the_role(actors, request_rewind):
    rf = RequestFactory()
    _, bob_token = services.api_token_issue(user=actors["bob_operator"], name="automation")
    _, alice_token = services.api_token_issue(user=actors["alice_viewer"], name="grafana")
    request = rf.post("/api/v1/rewinds", {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {bob_token}")
    request.user = actors["dave_norole"]  # whatever the session says, the token decides
    response = request_rewind(request)
    assert response.status_code == 201 and body(response) == {"requested_by": "bob_operator"}
    request = rf.post("/api/v1/rewinds", {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {alice_token}")
    request.user = actors["dave_norole"]
    response = request_rewind(request)
    assert response.status_code == 403 and "needs the operator role" in body(response)["error"]
    request = rf.get("/api/v1/rewinds", HTTP_AUTHORIZATION=f"Bearer {bob_token}")
    assert request_rewind(request).status_code == 405


# --- manage.py create_user -------------------------------------------------------------------------


def run(*args, stdin=None) -> str:
    out = io.StringIO()
    call_command("create_user", *args, stdout=out, stderr=io.StringIO(), **({"stdin": stdin} if stdin else {}))
    return out.getvalue()


def test_create_user_with_a_password_file_then_change_its_roles(client, tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("erin's long passphrase\n")
    assert run("erin", "--role", "viewer", "--password-file", str(secret), "--email", "erin@example.com") == (
        "created user 'erin' with role(s) viewer\n")
    assert client.login(request=HttpRequest(), username="erin", password="erin's long passphrase")
    erin = User.objects.get(username="erin")
    assert erin.email == "erin@example.com" and user_has_role(erin, VIEWER) and not user_has_role(erin, APPROVER)

    erin.groups.add(Group.objects.create(name="book-club"))  # not a role: kept
    assert run("erin", "--role", "approver", "--role", "operator").startswith("updated user 'erin' with role(s) approver, operator")
    erin = User.objects.get(username="erin")
    assert set(erin.groups.values_list("name", flat=True)) == {"approver", "operator", "book-club"}
    assert client.login(request=HttpRequest(), username="erin", password="erin's long passphrase")  # the password was kept


def test_create_user_reads_the_password_from_stdin_and_without_one_makes_a_token_only_user(client):
    assert run("frank", "--role", "operator", "--password-stdin", stdin=io.StringIO("frank's passphrase\n"))
    assert client.login(request=HttpRequest(), username="frank", password="frank's passphrase")
    assert "no password: API tokens only" in run("prometheus", "--role", "viewer")
    assert not User.objects.get(username="prometheus").has_usable_password()


@pytest.mark.parametrize("args,stdin,message", [
    (["gina", "--role", "admin"], None, "unknown role(s) 'admin': use viewer, operator, approver"),
    (["gina bad!", "--role", "viewer"], None, "user name 'gina bad!': Enter a valid username"),
    (["g" * 151, "--role", "viewer"], None, "at most 150 characters"),
    (["gina", "--role", "viewer", "--password-file", "/nonexistent/pw"], None,
     "cannot read --password-file /nonexistent/pw: No such file or directory"),
    (["gina", "--role", "viewer", "--password-stdin"], "\n", "the password is empty (stdin)"),
    (["gina", "--role", "viewer", "--password-stdin"], "short\n", "password refused: This password is too short"),
    (["gina", "--role", "viewer", "--email", "not-an-address"], None, "email 'not-an-address' is not a valid address"),
    (["gina"], None, "the following arguments are required: --role"),
    (["gina", "--role", "viewer", "--password-stdin", "--password-file", "x"], None, "not allowed with argument"),
])
def test_create_user_errors_name_what_is_wrong(args, stdin, message):
    with pytest.raises(CommandError) as err:
        run(*args, stdin=io.StringIO(stdin) if stdin else None)
    assert message in str(err.value)
    assert not User.objects.filter(username__startswith="gina").exists()  # nothing half-made
