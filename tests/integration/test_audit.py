"""The audit log around its chain: verify_audit, the audit page and its exports, and the events
that changes of stores, pipelines, roles and tokens append (admin, commands, services).
Over 400 lines because each audited change is one short case around the same chain fixtures."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import RequestFactory
from django.urls import reverse

from dashboard.accounts.roles import APPROVER, VIEWER
from dashboard.accounts.tokens import api_token_issue, api_token_revoke, pipeline_token_issue, pipeline_token_revoke
from dashboard.audit.actor import Actor
from dashboard.audit.selectors import audit_verification_forget
from dashboard.audit.services import audit_append, change_lines
from dashboard.models import ApiToken, AuditEvent, Cluster, Pipeline, PipelineToken, Store
from tests.factories import offline_pipeline
from tests.integration.test_audit_chain import _behind_the_apps_back
from tests.paths import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_verification():
    """The page's verification is cached per process: each test starts without one."""
    audit_verification_forget()
    yield
    audit_verification_forget()


def _rewind_event(pipeline, *, actor="olga", before=None, after=None, at=None, subject="rewind 7"):
    return audit_append(actor=Actor(actor, None, "10.0.0.7"), action="rewind.requested", subject=subject,
                        pipeline=pipeline, before=before or {"0": 120, "1": 300}, after=after or {"0": 40, "1": 300},
                        at=at)


def _events(action_prefix: str = "") -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action__startswith=action_prefix).order_by("id"))


# --- manage.py verify_audit -----------------------------------------------------------------------


def test_verify_audit_says_intact_with_the_count():
    for i in range(3):
        audit_append(actor=Actor("vera"), action="test.event", subject=f"event {i}")
    out = io.StringIO()
    call_command("verify_audit", stdout=out)
    assert out.getvalue() == "audit log intact: 3 events\n"


def test_verify_audit_names_the_changed_event_and_its_action():
    events = [audit_append(actor=Actor("vera"), action=f"test.step{i}", subject=f"event {i}") for i in range(4)]
    _behind_the_apps_back("UPDATE dashboard_auditevent SET actor = %s WHERE id = %s", ["mallory", events[2].pk])
    with pytest.raises(CommandError) as err:
        call_command("verify_audit", stdout=io.StringIO())
    assert err.value.returncode == 1
    assert str(err.value) == (f"audit log broken at event {events[2].pk}: event {events[2].pk} (test.step2) was changed "
                              "after it was written (2 events before it chain correctly)")


@pytest.mark.django_db(transaction=True)
def test_verify_audit_exits_1_in_a_shell_when_an_event_was_removed():
    """The real command in its own process, as cron would run it, on the test database."""
    events = [audit_append(actor=Actor("vera"), action="test.event", subject=f"event {i}") for i in range(3)]
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}

    def run():
        return subprocess.run([sys.executable, "manage.py", "verify_audit"], capture_output=True, text=True, env=env,
                              timeout=60, cwd=ROOT)

    ok = run()
    assert (ok.returncode, ok.stdout) == (0, "audit log intact: 3 events\n")
    _behind_the_apps_back("DELETE FROM dashboard_auditevent WHERE id = %s", [events[1].pk])
    broken = run()
    assert broken.returncode == 1
    assert f"audit log broken at event {events[2].pk}: event {events[2].pk} (test.event) does not chain to event " \
           f"{events[0].pk}" in broken.stderr


# --- the audit page ------------------------------------------------------------------------------


def test_the_page_shows_who_where_what_and_offsets_newest_first(client, vera, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 500), 1: (0, 500)}, batches=[(1_700_000_000_000, {0: 120})])
    first = _rewind_event(p)
    second = audit_append(actor=Actor("amir"), action="rewind.approved", subject="rewind 7", pipeline=p)
    client.force_login(vera)
    html = client.get(reverse("audit")).content.decode()
    assert html.index(f'data-event="{second.pk}"') < html.index(f'data-event="{first.pk}"')  # newest first
    row = html[html.index(f'data-event="{first.pk}"'):]
    row = row[:row.index("</tr>")]
    assert first.at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") in row
    for text in ("olga", "10.0.0.7", "rewind.requested", "rewind 7", "p0: 120 → 40", "p1: 300 → 300"):
        assert text in row, text
    assert f'href="{reverse("pipeline", args=[p.pk])}"' in row  # the pipeline still exists: a link
    assert 'href="/audit/"' in html  # the header's link


def test_a_deleted_pipeline_is_named_without_a_link(client, vera, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 500)}, batches=[(1_700_000_000_000, {0: 120})])
    event = _rewind_event(p)
    pipeline_id, label = p.pk, event.pipeline_label
    p.delete()
    client.force_login(vera)
    html = client.get(reverse("audit")).content.decode()
    assert f"{label} <span class=\"muted\">(gone)</span>" in html.replace("&#x27;", "'")
    assert reverse("pipeline", args=[pipeline_id]) not in html


def test_filters_narrow_the_page(client, vera, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 500)}, batches=[(1_700_000_000_000, {0: 120})])
    q = offline_pipeline(unique_name, partitions={0: (0, 500)}, batches=[(1_700_000_000_000, {0: 120})], group="billing")
    old = _rewind_event(p, actor="olga", at=datetime(2026, 1, 1, 12, tzinfo=timezone.utc), subject="rewind old")
    on_q = _rewind_event(q, actor="erin", subject="rewind on q")
    store_change = audit_append(actor=Actor("root"), action="store.changed", subject="store s1", before={"url": "a"},
                                after={"url": "b"})
    client.force_login(vera)

    def shown(**query) -> set[int]:
        html = client.get(reverse("audit"), query).content.decode()
        return {e.pk for e in (old, on_q, store_change) if f'data-event="{e.pk}"' in html}

    assert shown() == {old.pk, on_q.pk, store_change.pk}
    assert shown(pipeline=p.pk) == {old.pk}
    assert shown(actor="ERI") == {on_q.pk}  # text, any case
    assert shown(action="rewind") == {old.pk, on_q.pk}  # a family
    assert shown(action="store.changed") == {store_change.pk}
    assert shown(q="billing") == {on_q.pk}  # the pipeline's label
    assert shown(q="store s1") == {store_change.pk}  # the subject
    assert shown(since="2026-01-01T11:00", until="2026-01-01T13:00") == {old.pk}  # UTC
    assert shown(since="2026-01-01T12:30+01:00", until="2026-01-01T13:30+01:00") == {old.pk}  # 11:30-12:30 UTC


@pytest.mark.parametrize("query,field,message", [
    ({"pipeline": "abc"}, "pipeline", "'abc' is not a whole number from 1 to"),  # dashboard.params
    ({"since": "yesterday"}, "since", "not a date-time"),
    ({"since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}, "until", "must be after"),
    ({"action": "rewind.sideways"}, "action", "Select a valid choice"),
    ({"q": "a\x00b"}, "q", "Null characters are not allowed"),  # PostgreSQL would refuse it: a 500
    ({"before": "-3"}, "before", "'-3' is not a whole number from 1 to"),
])
def test_bad_filters_are_shown_next_to_their_field_not_a_500(client, vera, query, field, message):
    audit_append(actor=Actor("olga"), action="rewind.requested", subject="rewind 1")
    client.force_login(vera)
    response = client.get(reverse("audit"), query)
    html = response.content.decode()
    assert response.status_code == 200
    assert f'data-field="{field}"' in html and message in html.replace("&#x27;", "'")
    assert "data-event=" not in html  # no unfiltered log passed off as the result


def test_pages_are_keyset_paged_and_keep_the_filters(client, vera):
    events = [audit_append(actor=Actor("olga"), action="rewind.requested", subject=f"rewind {i}") for i in range(53)]
    audit_append(actor=Actor("amir"), action="store.changed", subject="not a rewind")
    client.force_login(vera)
    first = client.get(reverse("audit"), {"action": "rewind"}).content.decode()
    assert f'data-event="{events[-1].pk}"' in first and f'data-event="{events[3].pk}"' in first
    assert f'data-event="{events[2].pk}"' not in first and "not a rewind" not in first
    older = first[first.index('id="older" href="') + len('id="older" href="'):]
    older = older[:older.index('"')].replace("&amp;", "&")
    assert "action=rewind" in older and f"before={events[3].pk}" in older
    second = client.get(older).content.decode()
    assert [e.pk for e in events if f'data-event="{e.pk}"' in second] == [events[0].pk, events[1].pk, events[2].pk]
    assert 'id="older"' not in second and "back to the newest" in second


def test_the_banner_reuses_a_verification_for_a_minute_and_approvers_verify_now(client, vera, amir):
    events = [audit_append(actor=Actor("olga"), action="rewind.requested", subject=f"rewind {i}") for i in range(3)]
    total = AuditEvent.objects.count()  # with the creation of vera and amir
    client.force_login(vera)
    html = client.get(reverse("audit")).content.decode()
    assert f"Audit log intact: {total} events chain correctly" in html and "verify now" not in html
    _behind_the_apps_back("UPDATE dashboard_auditevent SET subject = %s WHERE id = %s", ["nothing", events[1].pk])
    # Within the minute the cached result stands: the log is not walked on every page view.
    assert f"Audit log intact: {total} events" in client.get(reverse("audit")).content.decode()
    assert client.post(reverse("audit_verify")).status_code == 403  # a viewer cannot make it walk the log
    client.force_login(amir)
    assert "verify now" in client.get(reverse("audit")).content.decode()
    response = client.post(reverse("audit_verify"))
    assert response.status_code == 302 and response["Location"] == reverse("audit")
    html = client.get(reverse("audit")).content.decode()
    assert "Audit log broken</strong> at event" in html
    assert f"event {events[1].pk} (rewind.requested) was changed after it was written" in html


# --- exports ---------------------------------------------------------------------------------------


def _csv(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_csv_export_has_the_filtered_events_oldest_first_injection_safe(client, vera, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 500), 1: (0, 500)}, batches=[(1_700_000_000_000, {0: 120})])
    a = _rewind_event(p, actor="=cmd|' /C calc'!A0", subject="@SUM(A1)")
    audit_append(actor=Actor("root"), action="store.changed", subject="store s", before={"url": "a"}, after={"url": "b"})
    b = _rewind_event(p, actor="olga")
    client.force_login(vera)
    response = client.get(reverse("audit_export_csv"), {"action": "rewind"})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="offsetwatch_audit_')
    rows = _csv(response)
    assert [int(r["id"]) for r in rows] == [a.pk, b.pk]
    assert rows[0]["actor"] == "'=cmd|' /C calc'!A0" and rows[0]["subject"] == "'@SUM(A1)"
    assert rows[1]["change"] == "p0: 120 → 40; p1: 300 → 300" and json.loads(rows[1]["before"]) == {"0": 120, "1": 300}
    assert rows[1]["remote_addr"] == "10.0.0.7" and rows[1]["hash"] == b.hash
    assert rows[1]["at"] == b.at.astimezone(timezone.utc).isoformat()


def test_json_export_is_a_streamed_array_with_the_chain(client, vera):
    events = [audit_append(actor=Actor("olga"), action="token.issued", subject=f"token {i}", after={"prefix": f"owu_{i}"})
              for i in range(3)]
    audit_append(actor=Actor("olga"), action="user.created", subject="user x")
    client.force_login(vera)
    response = client.get(reverse("audit_export_json"), {"action": "token"})
    assert response.streaming and response["Content-Type"] == "application/json"
    doc = json.loads(b"".join(response.streaming_content))
    assert [e["id"] for e in doc] == [e.pk for e in events]
    assert doc[1]["after"] == {"prefix": "owu_1"} and doc[1]["prev_hash"] == events[0].hash
    assert doc[2]["at"] == events[2].at.astimezone(timezone.utc).isoformat()
    assert json.loads(b"".join(client.get(reverse("audit_export_json"), {"actor": "nobody"}).streaming_content)) == []


def test_exports_refuse_bad_filters_with_a_400_naming_them(client, vera):
    client.force_login(vera)
    response = client.get(reverse("audit_export_csv"), {"since": "soon", "pipeline": "x"})
    assert response.status_code == 400
    text = response.content.decode()
    assert "parameter 'since': 'soon' is not a date-time" in text
    assert "parameter 'pipeline': 'x' is not a whole number" in text


def test_the_page_and_exports_need_the_viewer_role(client, dave):
    client.force_login(dave)  # an account without a role
    for name in ("audit", "audit_export_csv", "audit_export_json"):
        assert client.get(reverse(name)).status_code == 403, name


def test_change_lines_are_compact():
    assert change_lines({"10": 5, "2": 7}, {"2": 1, "10": 5}) == ["p2: 7 → 1", "p10: 5 → 5"]
    assert change_lines(None, {"url": "kafka://b:9092", "enabled": True}) == ["url: — → kafka://b:9092",
                                                                                "enabled: — → True"]
    assert change_lines({"roles": ["viewer"]}, {"roles": []}) == ["roles: viewer → (none)"]
    assert change_lines(None, None) == []


# --- who and where ---------------------------------------------------------------------------------


def test_the_address_is_remote_addr_never_a_forwarded_header(vera):
    request = RequestFactory().post("/x", REMOTE_ADDR="192.0.2.10", HTTP_X_FORWARDED_FOR="203.0.113.99")
    request.user = vera
    assert Actor.of_request(request) == Actor("vera", vera.pk, "192.0.2.10")


# --- services: tokens and users ----------------------------------------------------------------------


def test_token_issue_and_revoke_are_audited_without_the_token(unique_name, vera):
    p = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    ptoken, pplain = pipeline_token_issue(pipeline=p, name="job", actor=Actor("ops-bot"))
    atoken, aplain = api_token_issue(user=vera, name="grafana", actor=Actor("root", 1, "192.0.2.1"))
    pipeline_token_revoke(token=ptoken, actor=Actor("erin", None, "192.0.2.2"))
    pipeline_token_revoke(token=ptoken, actor=Actor("erin"))  # already revoked: nothing happens, nothing recorded
    api_token_revoke(token=atoken)
    issued_p, issued_a, revoked_p, revoked_a = _events("token.")
    assert (issued_p.action, issued_p.actor, issued_p.pipeline_id) == ("token.issued", "ops-bot", p.pk)
    assert issued_p.after == {"kind": "pipeline", "prefix": ptoken.prefix, "name": "job"}
    assert (issued_a.actor, issued_a.actor_user_id, issued_a.remote_addr) == ("root", 1, "192.0.2.1")
    assert issued_a.subject == f"API token {atoken.prefix}… (grafana) acting as vera"
    assert (revoked_p.action, revoked_p.actor, revoked_p.remote_addr) == ("token.revoked", "erin", "192.0.2.2")
    assert revoked_p.before == {"revoked_at": None} and revoked_p.after["revoked_at"]
    assert revoked_a.actor == "system"
    everything = json.dumps(list(AuditEvent.objects.values()), default=str)
    for secret in (pplain, aplain, ptoken.token_hash, atoken.token_hash, pplain[12:], aplain[12:]):
        assert secret not in everything


def test_create_user_records_the_command_and_the_os_user_and_what_changed(tmp_path):
    import getpass

    secret = tmp_path / "pw"
    secret.write_text("gina's long passphrase\n")
    call_command("create_user", "gina", "--role", "viewer", "--password-file", str(secret), stdout=io.StringIO())
    call_command("create_user", "gina", "--role", "operator", "--role", "viewer", "--email", "gina@example.com",
                 stdout=io.StringIO())
    call_command("create_user", "gina", "--role", "viewer", "--role", "operator", stdout=io.StringIO())  # no change
    created, changed = _events("user.")
    assert created.actor == changed.actor == f"manage.py create_user (system user {getpass.getuser()})"
    assert created.action == "user.created" and created.after == {"email": "", "roles": ["viewer"], "password": "set"}
    assert changed.action == "user.roles_changed"
    assert changed.before == {"email": "", "roles": ["viewer"]}
    assert changed.after == {"email": "gina@example.com", "roles": ["operator", "viewer"]}
    assert "passphrase" not in json.dumps([created.after, changed.after, changed.before])


def test_issue_commands_record_the_declared_pipeline_and_the_token(unique_name, prometheus):
    p = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    plain = io.StringIO()
    call_command("issue_pipeline_token", "--store", p.store.name, "--topic", "new-topic", "--group", "g",
                 stdout=plain, stderr=io.StringIO())
    call_command("issue_api_token", "--user", "prometheus", "--name", "scraper", stdout=plain, stderr=io.StringIO())
    declared, = _events("pipeline.")
    issued_p, issued_a = _events("token.")
    new = Pipeline.objects.get(topic="new-topic")
    assert declared.pipeline_id == issued_p.pipeline_id == new.pk
    assert declared.actor.startswith("manage.py issue_pipeline_token (system user ")
    assert issued_a.actor.startswith("manage.py issue_api_token (system user ") and issued_a.after["user"] == "prometheus"
    for token in plain.getvalue().split():
        assert token not in json.dumps(list(AuditEvent.objects.values("subject", "before", "after", "details")))


# --- the Django admin ---------------------------------------------------------------------------------


@pytest.fixture
def root(client):
    user = User.objects.create_superuser("root", password="root's long passphrase")
    client.force_login(user)
    return user


ROOT_ADDR = {"REMOTE_ADDR": "198.51.100.4"}


def test_admin_store_and_cluster_changes_are_audited_with_changed_fields(client, root):
    response = client.post(reverse("admin:dashboard_cluster_add"), {"name": "prod", "bootstrap_servers": "k1:9092"},
                           **ROOT_ADDR)
    assert response.status_code == 302
    cluster = Cluster.objects.get(name="prod")
    store_form = {"name": "groups", "kind": "zookeeper", "url": "zk://svc:s3cret@k1:2181/c", "cluster": cluster.pk,
                  "enabled": "on"}
    assert client.post(reverse("admin:dashboard_store_add"), store_form, **ROOT_ADDR).status_code == 302
    store = Store.objects.get(name="groups")
    store_form.update(url="zk://svc:s3cret@k2:2181/c", enabled="")
    assert client.post(reverse("admin:dashboard_store_change", args=[store.pk]), store_form, **ROOT_ADDR).status_code == 302
    assert client.post(reverse("admin:dashboard_store_change", args=[store.pk]), store_form).status_code == 302  # no change
    cluster_created, = _events("cluster.")
    created, changed = _events("store.")
    assert (cluster_created.actor, cluster_created.actor_user_id, cluster_created.remote_addr) == (
        "root", root.pk, "198.51.100.4")
    assert cluster_created.after == {"name": "prod", "bootstrap_servers": "k1:9092"}
    assert created.action == "store.created" and created.after["cluster"] == "prod"
    assert changed.action == "store.changed" and changed.subject == "store groups"
    assert changed.before == {"url": "zk://svc:***@k1:2181/c", "enabled": True}
    assert changed.after == {"url": "zk://svc:***@k2:2181/c", "enabled": False}
    assert "s3cret" not in json.dumps(list(AuditEvent.objects.values("before", "after")))


def test_admin_pipeline_deletion_is_audited_on_the_pipeline(client, root, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    other = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})], group="b")
    response = client.post(reverse("admin:dashboard_pipeline_delete", args=[p.pk]), {"post": "yes"}, **ROOT_ADDR)
    assert response.status_code == 302 and not Pipeline.objects.filter(pk=p.pk).exists()
    response = client.post(reverse("admin:dashboard_pipeline_changelist"),  # the "delete selected" action
                           {"action": "delete_selected", "_selected_action": [other.pk], "post": "yes"})
    assert response.status_code == 302 and not Pipeline.objects.filter(pk=other.pk).exists()
    single, bulk = _events("pipeline.deleted")
    assert single.pipeline_id == p.pk and single.before == {"store": p.store.name, "topic": p.topic, "group": "etl", "owner": "", "retired": False}
    assert single.pipeline_label == f"{p.topic} / etl ({p.store.name})" and single.remote_addr == "198.51.100.4"
    assert bulk.pipeline_id == other.pk and bulk.actor == "root"


def test_admin_role_changes_user_creation_and_deletion_are_audited(client, root, erin):
    viewer, approver = Group.objects.get(name=VIEWER), Group.objects.get(name=APPROVER)
    form = {"username": "erin", "email": "erin@example.com", "is_active": "on", "groups": [viewer.pk, approver.pk],
            "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"}
    response = client.post(reverse("admin:auth_user_change", args=[erin.pk]), form, **ROOT_ADDR)
    assert response.status_code == 302, response.content.decode()[:2000]
    response = client.post(reverse("admin:auth_user_add"), {
        "username": "frank", "password1": "frank's long passphrase", "password2": "frank's long passphrase",
        "usable_password": "true"}, **ROOT_ADDR)
    assert response.status_code == 302
    frank = User.objects.get(username="frank")
    response = client.post(reverse("admin:auth_user_delete", args=[frank.pk]), {"post": "yes"}, **ROOT_ADDR)
    assert response.status_code == 302 and not User.objects.filter(username="frank").exists()

    changed = AuditEvent.objects.get(action="user.changed", subject="user erin")
    roles = AuditEvent.objects.get(action="user.roles_changed", actor="root")
    assert changed.before == {"email": ""} and changed.after == {"email": "erin@example.com"}
    assert roles.before == {"groups": ["viewer"]} and roles.after == {"groups": ["approver", "viewer"]}
    assert roles.remote_addr == "198.51.100.4"
    assert roles.details == {"user_id": erin.pk, "groups_added": ["approver"], "groups_removed": []}
    created = AuditEvent.objects.get(action="user.created", subject="user frank")
    assert created.actor == "root" and created.after["password"] == "set"
    deleted = AuditEvent.objects.get(action="user.deleted")
    assert deleted.before["username"] == "frank" and deleted.details == {"user_id": frank.pk}
    assert "passphrase" not in json.dumps(list(AuditEvent.objects.values("before", "after")))
    assert "pbkdf2" not in json.dumps(list(AuditEvent.objects.values("before", "after")))


def test_admin_revokes_tokens_through_the_audited_service(client, root, unique_name, olga):
    p = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    token, _ = pipeline_token_issue(pipeline=p, name="job")
    api_token, _ = api_token_issue(user=olga, name="automation")
    for name, pk in (("admin:dashboard_pipelinetoken_changelist", token.pk),
                     ("admin:dashboard_apitoken_changelist", api_token.pk)):
        response = client.post(reverse(name), {"action": "revoke", "_selected_action": [pk]}, **ROOT_ADDR)
        assert response.status_code == 302
    assert PipelineToken.objects.get(pk=token.pk).revoked_at and ApiToken.objects.get(pk=api_token.pk).revoked_at
    revoked_p, revoked_a = _events("token.revoked")
    assert (revoked_p.actor, revoked_p.remote_addr, revoked_p.pipeline_id) == ("root", "198.51.100.4", p.pk)
    assert revoked_a.subject == f"API token {api_token.prefix}… (automation) acting as olga"
