"""Login throttling (django-axes, dashboard/accounts/lockout.py): issue #12 observation 5.

Failed logins are counted per (user name, address): LOGIN_FAILURE_LIMIT (5) failures lock that
pair out for LOGIN_COOLOFF seconds with a 429 page; the same user from another address and
another user from the same address still log in. Lockouts and unlocks are audited.
"""
from __future__ import annotations

import io
import time
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from dashboard.accounts.lockout import LOCKED_OUT, UNLOCKED
from dashboard.audit.services import audit_verify
from dashboard.models import AuditEvent
from tests.actors import actor, passphrase

pytestmark = pytest.mark.django_db

PASSWORD = passphrase("vera")
HERE, ELSEWHERE = "198.51.100.7", "203.0.113.9"


@pytest.fixture
def vera(db):
    """The viewer (tests/actors.py), with a password: these tests log in through the form."""
    return actor("vera", can_log_in=True)


def log_in(username: str, password: str, *, address: str = HERE, path: str = "/login/", **headers):
    client = Client(REMOTE_ADDR=address, **headers)
    response = client.post(path, {"username": username, "password": password})
    return client, response


def fail(times: int, username: str = "vera", *, address: str = HERE, path: str = "/login/"):
    statuses = [log_in(username, "wrong guess", address=address, path=path)[1].status_code for _ in range(times)]
    return statuses


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_observation_5_five_wrong_passwords_then_the_right_one_is_refused_with_429(vera):
    # Four failures answer the login form again (200); the fifth reaches the limit and is refused.
    assert fail(5) == [200, 200, 200, 200, 429]
    client, response = log_in("vera", PASSWORD)
    assert response.status_code == 429 and not logged_in(client)
    html = response.content.decode()
    assert "Too many failed logins (5)" in html and "refused for 15 minutes" in html
    assert "Ask an administrator to unlock it" in html
    assert response["Retry-After"] == "900"
    assert response["Cache-Control"] == "no-store"


def test_fewer_failures_than_the_limit_then_the_right_password_logs_in_and_forgets_them(vera):
    assert fail(4) == [200] * 4
    client, response = log_in("vera", PASSWORD)
    assert response.status_code == 302 and logged_in(client)
    assert not AccessAttempt.objects.filter(username="vera").exists()  # AXES_RESET_ON_SUCCESS
    assert fail(4) == [200] * 4  # counted from zero again: no lockout at the 5th overall


def test_the_same_user_from_another_address_and_another_user_from_the_same_address_still_log_in(vera):
    actor("otto", can_log_in=True)
    fail(5)
    client, response = log_in("vera", PASSWORD, address=ELSEWHERE)
    assert response.status_code == 302 and logged_in(client)  # an attacker elsewhere cannot lock vera out
    client, response = log_in("otto", passphrase("otto"), address=HERE)
    assert response.status_code == 302 and logged_in(client)  # one user's typos lock nobody else behind a NAT
    assert log_in("vera", PASSWORD, address=HERE)[1].status_code == 429  # the locked pair stays locked


def test_forged_x_forwarded_for_is_not_believed_without_proxies(vera):
    # OFFSETWATCH_PROXY_COUNT=0 (the default): a client cannot step out of its lockout by
    # claiming another address.
    fail(5)
    client = Client(REMOTE_ADDR=HERE, HTTP_X_FORWARDED_FOR=ELSEWHERE)
    response = client.post("/login/", {"username": "vera", "password": PASSWORD})
    assert response.status_code == 429


def test_behind_one_proxy_the_address_it_appended_is_counted(vera, settings):
    settings.LOGIN_PROXY_COUNT = 1
    proxy = "10.0.0.2"
    for _ in range(5):  # the client puts a fresh forged address first each time: ignored
        Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=f"192.0.2.{_}, {HERE}").post(
            "/login/", {"username": "vera", "password": "wrong guess"})
    assert AccessAttempt.objects.get(username="vera").ip_address == HERE
    assert Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=HERE).post(
        "/login/", {"username": "vera", "password": PASSWORD}).status_code == 429
    # Another client behind the same proxy is another address.
    response = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=ELSEWHERE).post(
        "/login/", {"username": "vera", "password": PASSWORD})
    assert response.status_code == 302


def test_the_admin_login_is_throttled_too(vera):
    User.objects.create_superuser("root", password="root's long passphrase")
    statuses = fail(5, "root", path="/admin/login/")
    assert statuses[-1] == 429 and statuses[:4] == [200] * 4
    client, response = log_in("root", "root's long passphrase", path="/admin/login/")
    assert response.status_code == 429 and not logged_in(client)


def test_the_lockout_ends_when_its_cooloff_has_passed(vera):
    fail(5)
    assert log_in("vera", PASSWORD)[1].status_code == 429  # (this attempt restarts the cool-off)
    # The attempts as if the last one was 15 minutes and a second ago.
    AccessAttempt.objects.filter(username="vera").update(
        attempt_time=AccessAttempt.objects.get(username="vera").attempt_time - timedelta(seconds=901))
    client, response = log_in("vera", PASSWORD)
    assert response.status_code == 302 and logged_in(client)
    assert not events(UNLOCKED)  # it ended by itself: the lockout event said for how long
    assert len(events(LOCKED_OUT)) == 1


def test_a_new_lockout_after_the_cooloff_of_the_last_is_a_new_event(vera, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)  # (the append-only log cannot be back-dated)
    assert fail(5)[-1] == 429 and len(events(LOCKED_OUT)) == 1
    time.sleep(1.1)
    assert fail(5)[-1] == 429 and len(events(LOCKED_OUT)) == 2


def test_a_short_cooloff_setting_is_what_the_page_and_the_lock_use(vera, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=30)
    fail(5)
    response = log_in("vera", PASSWORD)[1]
    assert response.status_code == 429 and "refused for 30 seconds" in response.content.decode()
    assert response["Retry-After"] == "30"
    AccessAttempt.objects.filter(username="vera").update(
        attempt_time=AccessAttempt.objects.get(username="vera").attempt_time - timedelta(seconds=31))
    assert log_in("vera", PASSWORD)[1].status_code == 302


def test_a_lockout_is_audited_once_however_often_the_locked_login_is_tried(vera):
    fail(5)
    fail(3)  # refused while locked
    log_in("vera", PASSWORD)
    [event] = events(LOCKED_OUT)
    assert event.actor == "anonymous" and event.remote_addr == HERE
    assert event.subject == f"login of 'vera' from {HERE}"
    assert event.details == {"username": "vera", "ip_address": HERE, "failures": 5, "cooloff_seconds": 900}
    assert audit_verify().ok


def test_an_unknown_user_name_is_locked_out_and_audited_the_same_way(db):
    # No account named so: the same answers, so the lockout does not tell which names exist.
    assert fail(5, "nobody") == [200, 200, 200, 200, 429]
    [event] = events(LOCKED_OUT)
    assert event.details["username"] == "nobody"


def test_an_unlock_by_manage_py_axes_reset_is_audited_and_lets_the_user_in(vera):
    fail(5)
    out = io.StringIO()
    call_command("axes_reset_username", "vera", stdout=out)
    assert "removed" in out.getvalue()
    [event] = events(UNLOCKED)
    assert event.actor.startswith("manage.py axes_reset_username (system user ")
    assert event.details == {"username": "vera", "ip_address": HERE, "failures": 5}
    client, response = log_in("vera", PASSWORD)
    assert response.status_code == 302 and logged_in(client)
    call_command("axes_reset", stdout=io.StringIO())  # nothing locked any more: nothing to audit
    assert len(events(UNLOCKED)) == 1
    # Locked again right after the unlock: a new lockout, a new event.
    assert fail(5)[-1] == 429 and len(events(LOCKED_OUT)) == 2
    assert audit_verify().ok


def test_an_unlock_in_the_admin_is_audited_with_the_admin_as_actor(vera):
    root = User.objects.create_superuser("root", password=None)
    fail(5)
    attempt = AccessAttempt.objects.get(username="vera")
    admin = Client(REMOTE_ADDR="192.0.2.50")
    admin.force_login(root)
    url = reverse("admin:axes_accessattempt_delete", args=[attempt.pk])
    assert admin.post(url, {"post": "yes"}).status_code == 302
    [event] = events(UNLOCKED)
    assert (event.actor, event.actor_user_id, event.remote_addr) == ("root", root.pk, "192.0.2.50")
    assert log_in("vera", PASSWORD)[1].status_code == 302


def test_an_unlock_by_the_admins_bulk_delete_is_audited_per_lockout(vera):
    root = User.objects.create_superuser("root", password=None)
    fail(5)
    fail(5, address=ELSEWHERE)
    fail(2, "otto")  # not locked: its deletion is no unlock
    admin = Client()
    admin.force_login(root)
    response = admin.post(reverse("admin:axes_accessattempt_changelist"), {
        "action": "delete_selected", "post": "yes",
        "_selected_action": [str(pk) for pk in AccessAttempt.objects.values_list("pk", flat=True)]})
    assert response.status_code == 302 and not AccessAttempt.objects.exists()
    assert sorted(e.details["ip_address"] for e in events(UNLOCKED)) == sorted([ELSEWHERE, HERE])
    assert all(e.actor == "root" for e in events(UNLOCKED))


def test_the_audit_page_filters_lockouts_and_unlocks_as_a_family(vera, client):
    fail(5)
    call_command("axes_reset_username", "vera", stdout=io.StringIO())
    client.force_login(vera)
    html = client.get(reverse("audit"), {"action": "login"}).content.decode()
    assert LOCKED_OUT in html and UNLOCKED in html
    assert '<option value="login" selected>any of logins</option>' in html
    rewinds_only = client.get(reverse("audit"), {"action": "rewind"}).content.decode()
    assert f"login of &#x27;vera&#x27; from {HERE}" in html and "login of &#x27;vera&#x27;" not in rewinds_only


def test_a_lockout_spread_over_user_agents_is_one_lockout_and_one_unlock(vera):
    # axes keeps a row per user agent; the lockout is their sum, and so is its unlock.
    for agent in ("curl/8", "curl/8", "curl/8", "python/3", "python/3"):
        Client(REMOTE_ADDR=HERE, HTTP_USER_AGENT=agent).post("/login/", {"username": "vera", "password": "wrong"})
    assert AccessAttempt.objects.filter(username="vera").count() == 2
    assert log_in("vera", PASSWORD)[1].status_code == 429
    call_command("axes_reset_username", "vera", stdout=io.StringIO())
    [event] = events(UNLOCKED)
    assert event.details["failures"] == 6  # five, and the refused right password
    assert len(events(LOCKED_OUT)) == 1
