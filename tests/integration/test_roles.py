"""Roles (viewer, operator, approver) and what they imply, refusals that name the role, create_user.
Who may reach each route, and CSRF on every unsafe route: tests/integration/test_security.py."""
from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.http import HttpRequest, JsonResponse
from django.test import RequestFactory
from django.urls import reverse

from dashboard.accounts.roles import APPROVER, OPERATOR, ROLES, VIEWER, role_required, user_has_role
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db


def body(response) -> dict:
    return json.loads(response.content)


@pytest.fixture
def everyone(vera, olga, amir, dave):
    """vera reads, olga may request rewinds, amir may approve, dave has an account and no role, root
    is a superuser; by user name."""
    root = User.objects.create_superuser("root", password=None)
    return {user.username: user for user in (vera, olga, amir, dave, root)}


def test_the_migration_created_one_group_per_role():
    assert set(Group.objects.filter(name__in=ROLES).values_list("name", flat=True)) == set(ROLES)


@pytest.mark.parametrize("who,viewer,operator,approver", [
    ("vera", True, False, False),
    ("olga", True, True, False),     # operator implies viewer
    ("amir", True, False, True),     # approver implies viewer, not operator
    ("dave", False, False, False),
    ("root", True, True, True),      # superusers have every role
])
def test_roles_and_what_they_imply(everyone, who, viewer, operator, approver):
    user = User.objects.get(username=who)  # fresh object: nothing cached
    assert (user_has_role(user, VIEWER), user_has_role(user, OPERATOR), user_has_role(user, APPROVER)) == (
        viewer, operator, approver)


def test_inactive_users_and_unknown_roles(amir):
    amir.is_active = False
    amir.save()
    assert not user_has_role(User.objects.get(pk=amir.pk), VIEWER)
    with pytest.raises(ValueError, match="unknown role 'admin'"):
        user_has_role(amir, "admin")
    with pytest.raises(ValueError, match="unknown role 'admin'"):
        role_required("admin")


# --- refusals (who may reach which route: the matrix in tests/integration/test_security.py) ---------------


def test_a_user_with_no_role_is_told_so_on_every_data_page(client, dave, unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 4})])
    client.force_login(dave)
    for url in (reverse("overview"), reverse("overview_live"), reverse("collectors"),
                reverse("pipeline", args=[pipeline.pk]), reverse("pipeline_live", args=[pipeline.pk]),
                reverse("pipeline_status", args=[pipeline.pk]), reverse("pipeline_lag_chart", args=[pipeline.pk])):
        response = client.get(url)
        assert response.status_code == 403, url
        html = response.content.decode()
        assert "no role assigned to &#x27;dave&#x27;: ask an admin for the viewer role" in html
        assert pipeline.topic not in html  # nothing of the data leaks into the refusal
    response = client.get(reverse("api_pipelines"))
    assert response.status_code == 403 and response.json() == {
        "error": "no role assigned to 'dave': ask an admin for the viewer role"}


@pytest.mark.parametrize("who", ["vera", "olga", "amir", "root"])
def test_every_role_reads_the_pages(client, everyone, who, unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 4})])
    client.force_login(everyone[who])
    assert pipeline.topic in client.get(reverse("overview")).content.decode()
    assert client.get(reverse("pipeline", args=[pipeline.pk])).status_code == 200


def test_a_role_the_user_lacks_is_named(olga, amir):
    @role_required(APPROVER)
    def approve(request):
        return JsonResponse({"approved": True})

    rf = RequestFactory()
    request = rf.get("/api/v1/approve")
    request.user = olga
    response = approve(request)
    assert response.status_code == 403
    assert body(response)["error"] == "this needs the approver role; 'olga' has: operator, viewer"
    request = rf.get("/api/v1/approve")
    request.user = amir
    assert approve(request).status_code == 200


# (CSRF: the walker over every unsafe route is in tests/integration/test_security.py.)


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
