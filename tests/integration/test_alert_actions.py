"""What the people on call do (issue #15): acknowledge an incident, silence a pipeline or pipelines
by pattern, cancel a silence; the owner and archived pipelines on the pages. Through the services
(dashboard.alerting.actions) and the real views, by the cast (tests/actors.py)."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard.alerting import actions
from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_verify
from dashboard.models import AuditEvent, Incident, Pipeline, Silence
from streamoffsets.evaluation import Status
from tests.factories import pipeline_row

pytestmark = pytest.mark.django_db

ADDR = {"REMOTE_ADDR": "198.51.100.21"}


def _incident(pipeline: Pipeline, **fields) -> Incident:
    return Incident.objects.create(pipeline=pipeline, opened_at=timezone.now() - timedelta(minutes=5),
                                   worst_status=Status.STALLED, status=Status.STALLED, reasons=["stalled"], **fields)


def _logged_in(user) -> Client:
    client = Client(**ADDR)
    client.force_login(user)
    return client


def _ack(client, incident, note="looking"):
    return client.post(reverse("incident_acknowledge", args=[incident.pipeline_id, incident.pk]), {"note": note})


def _silence(client, pipeline, **form):
    return client.post(reverse("pipeline_silence", args=[pipeline.pk]),
                       {"duration": "3600", "reason": "deploy window", **form})


@pytest.fixture
def world(unique_name):
    p = pipeline_row(unique_name("ack"), topic=unique_name("orders"))
    return p, _incident(p)


# --- acknowledging -----------------------------------------------------------------------------------------


def test_an_operator_acknowledges_the_open_incident_and_the_page_says_who(world, olga, vera):
    p, incident = world
    response = _ack(_logged_in(olga), incident, note="restarting the job\nticket OPS-12")
    assert response.status_code == 302 and response["Location"].endswith(f"/pipelines/{p.pk}/#on-call")
    incident.refresh_from_db()
    assert incident.acknowledged_by == olga and incident.acknowledged_at is not None
    assert incident.ack_note == "restarting the job\nticket OPS-12"
    event = AuditEvent.objects.get(action="incident.acknowledged")
    assert (event.actor, event.actor_user_id, event.remote_addr, event.pipeline_id) == ("olga", olga.pk, ADDR["REMOTE_ADDR"], p.pk)
    assert event.details["incident"] == incident.pk and event.after["note"].startswith("restarting")
    assert audit_verify().ok
    html = _logged_in(vera).get(reverse("pipeline", args=[p.pk])).content.decode()
    ack = re.search(r'<span id="acknowledgement">(.*?)</span>', html, re.S).group(1)
    assert "<strong>olga</strong>" in ack and "restarting the job" in ack
    assert 'id="acknowledge-form"' not in html


def test_a_second_acknowledgement_is_refused_naming_the_first(world, olga, amir):
    p, incident = world
    assert _ack(_logged_in(olga), incident).status_code == 302
    response = _ack(_logged_in(amir), incident, note="mine now")
    assert response.status_code == 409
    assert "already acknowledged by olga" in response.content.decode()
    incident.refresh_from_db()
    assert incident.acknowledged_by == olga and incident.ack_note == "looking"
    assert AuditEvent.objects.filter(action="incident.acknowledged").count() == 1


def test_a_closed_incident_is_not_acknowledged(unique_name, amir):
    p = pipeline_row(unique_name("closed"))
    incident = _incident(p, closed_at=timezone.now())
    response = _ack(_logged_in(amir), incident)
    assert response.status_code == 409 and "only an open incident" in response.content.decode()
    assert Incident.objects.get(pk=incident.pk).acknowledged_at is None


@pytest.mark.parametrize("who", ["vera", "dave"])
def test_a_viewer_or_a_user_without_role_may_not_acknowledge(world, who, request):
    p, incident = world
    user = request.getfixturevalue(who)
    response = _ack(_logged_in(user), incident)
    assert response.status_code == 403
    if who == "vera":
        assert "needs the operator or approver role" in response.content.decode()
    assert Incident.objects.get(pk=incident.pk).acknowledged_at is None
    assert not AuditEvent.objects.filter(action="incident.acknowledged").exists()


def test_the_service_refuses_an_actor_that_is_no_person(world):
    _, incident = world
    with pytest.raises(actions.ActionRefused) as refused:
        actions.incident_acknowledge(incident_id=incident.pk, actor=Actor.SYSTEM, note="")
    assert refused.value.status == 403 and "'system' is not one" in refused.value.message


@pytest.mark.parametrize("note,expected", [
    ("x" * 2001, "at most 2000 characters"), ("bell \x07 here", "control character"), ("esc \x1b[31m", "control character"),
])
def test_a_hostile_note_is_a_clear_400(world, olga, note, expected):
    _, incident = world
    with pytest.raises(actions.ActionRefused) as refused:
        actions.incident_acknowledge(incident_id=incident.pk, actor=Actor.of_user(olga), note=note)
    assert refused.value.status == 400 and expected in refused.value.message
    response = _ack(_logged_in(olga), incident, note=note)
    assert response.status_code == 400 and Incident.objects.get(pk=incident.pk).acknowledged_at is None


@pytest.mark.parametrize("incident_id", [999_999_999, 99999999999999999999999])
def test_an_unknown_incident_is_a_404(world, olga, incident_id):
    p, _ = world
    response = _logged_in(olga).post(f"/pipelines/{p.pk}/incidents/{incident_id}/acknowledge", {"note": ""})
    assert response.status_code == 404


def test_another_pipelines_incident_is_not_acknowledged_through_this_one(world, unique_name, olga):
    _, incident = world
    other = pipeline_row(unique_name("other"))
    response = _logged_in(olga).post(f"/pipelines/{other.pk}/incidents/{incident.pk}/acknowledge", {"note": ""})
    assert response.status_code == 404 and Incident.objects.get(pk=incident.pk).acknowledged_at is None


def test_forms_need_the_csrf_token(world, olga):
    p, incident = world
    client = Client(enforce_csrf_checks=True)
    client.force_login(olga)
    assert client.post(reverse("incident_acknowledge", args=[p.pk, incident.pk]), {"note": ""}).status_code == 403
    assert client.post(reverse("pipeline_silence", args=[p.pk]), {"duration": "3600", "reason": "r"}).status_code == 403
    assert Incident.objects.get(pk=incident.pk).acknowledged_at is None and not Silence.objects.exists()


def test_get_is_not_an_action(world, olga):
    p, incident = world
    assert _logged_in(olga).get(reverse("incident_acknowledge", args=[p.pk, incident.pk])).status_code == 405


# --- silencing -----------------------------------------------------------------------------------------------


def test_an_approver_silences_a_pipeline_for_four_hours(world, amir, vera):
    p, _ = world
    before = timezone.now()
    response = _silence(_logged_in(amir), p, duration="14400", reason="broker upgrade")
    assert response.status_code == 302
    silence = Silence.objects.get(pipeline=p)
    assert silence.created_by == amir and silence.reason == "broker upgrade"
    assert timedelta(hours=4) - timedelta(seconds=5) < silence.ends_at - before < timedelta(hours=4, seconds=5)
    event = AuditEvent.objects.get(action="silence.created")
    assert event.actor == "amir" and event.pipeline_id == p.pk and event.details["duration_s"] == 14400
    html = _logged_in(amir).get(reverse("pipeline", args=[p.pk])).content.decode()
    banner = re.search(r'<div id="active-silence".*?</div>', html, re.S).group(0)
    assert "by amir" in banner and "broker upgrade" in banner and 'id="cancel-silence-form"' in banner
    assert 'id="silence-form"' not in html
    # The viewer sees the silence and no form.
    html = _logged_in(vera).get(reverse("pipeline", args=[p.pk])).content.decode()
    assert 'id="active-silence"' in html and 'id="cancel-silence-form"' not in html


def test_a_custom_duration_in_minutes(world, olga):
    p, _ = world
    assert _silence(_logged_in(olga), p, duration="custom", minutes="90").status_code == 302
    silence = Silence.objects.get(pipeline=p)
    assert abs((silence.ends_at - silence.starts_at) - timedelta(minutes=90)) < timedelta(seconds=1)


@pytest.mark.parametrize("form,expected", [
    ({"duration": "custom", "minutes": "-5"}, "is not a whole number from 5 to 43200"),
    ({"duration": "custom", "minutes": "4"}, "is not a whole number from 5 to 43200"),
    ({"duration": "custom", "minutes": "1" + "0" * 30}, "is not a whole number from 5 to 43200"),
    ({"duration": "custom", "minutes": "١٠"}, "is not a whole number"),
    ({"duration": "custom"}, "give the number of minutes"),
    ({"duration": "99999999999"}, "not one of the available choices"),
    ({"duration": "-3600"}, "not one of the available choices"),
    ({"reason": ""}, "reason: This field is required"),
    ({"reason": "   "}, "reason: This field is required"),
    ({"reason": "r" * 2001}, "at most 2000 characters"),
    ({"reason": "nul\x00"}, "Null characters are not allowed"),
])
def test_hostile_silence_forms_are_a_clear_400(world, olga, form, expected):
    p, _ = world
    response = _silence(_logged_in(olga), p, **form)
    assert response.status_code == 400
    assert expected in response.content.decode().replace("&#x27;", "'")
    assert not Silence.objects.exists()


@pytest.mark.parametrize("duration_s", [0, 299, 30 * 86400 + 1, -3600, 10**20, True, 3600.5])
def test_the_service_bounds_the_duration_and_says_so(world, olga, duration_s):
    p, _ = world
    with pytest.raises(actions.ActionRefused) as refused:
        actions.silence_create(pipeline=p, duration_s=duration_s, reason="r", actor=Actor.of_user(olga))
    assert refused.value.status == 400 and "a silence lasts from 5 min to 30 d" in refused.value.message


def test_the_service_refuses_a_pattern_silence_without_pattern_and_a_mix(world, olga):
    p, _ = world
    olga_acts = Actor.of_user(olga)
    with pytest.raises(actions.ActionRefused, match="needs at least one pattern"):
        actions.silence_create(duration_s=3600, reason="r", actor=olga_acts)
    with pytest.raises(actions.ActionRefused, match="not both"):
        actions.silence_create(pipeline=p, topic_pattern="orders-*", duration_s=3600, reason="r", actor=olga_acts)
    with pytest.raises(actions.ActionRefused, match="starts now or within 30 d"):
        actions.silence_create(pipeline=p, duration_s=3600, reason="r", actor=olga_acts,
                               starts_at=timezone.now() + timedelta(days=31))
    with pytest.raises(actions.ActionRefused, match="control character"):
        actions.silence_create(topic_pattern="orders\x1b", duration_s=3600, reason="r", actor=olga_acts)
    assert not Silence.objects.exists() and not AuditEvent.objects.filter(action__startswith="silence.").exists()


def test_a_viewer_may_not_silence(world, vera):
    p, _ = world
    response = _silence(_logged_in(vera), p)
    assert response.status_code == 403 and "needs the operator or approver role" in response.content.decode()
    assert not Silence.objects.exists()


def test_cancelling_a_silence(world, olga, amir, vera):
    p, _ = world
    silence = actions.silence_create(pipeline=p, duration_s=3600, reason="r", actor=Actor.of_user(olga))
    url = reverse("silence_cancel", args=[silence.pk])
    assert _logged_in(vera).post(url).status_code == 403
    # A `next` elsewhere is not followed: back to the silences page.
    response = _logged_in(amir).post(url, {"next": "https://evil.example/"})
    assert response.status_code == 302 and response["Location"] == reverse("silences")
    silence.refresh_from_db()
    assert silence.cancelled_at is not None
    event = AuditEvent.objects.get(action="silence.cancelled")
    assert event.actor == "amir" and event.pipeline_id == p.pk and event.details["silence"] == silence.pk
    again = _logged_in(amir).post(url)
    assert again.status_code == 409 and "cancelled already" in again.content.decode()
    assert _logged_in(amir).post(reverse("silence_cancel", args=[10**12])).status_code == 404
    assert _logged_in(amir).post("/silences/99999999999999999999999/cancel").status_code == 404
    html = _logged_in(vera).get(reverse("pipeline", args=[p.pk])).content.decode()
    assert 'id="active-silence"' not in html


def test_a_silence_by_pattern_from_the_silences_page(unique_name, olga, vera):
    hit = pipeline_row(unique_name("hit"), topic="payments-eu")
    miss = pipeline_row(unique_name("miss"), topic="orders-eu")
    client = _logged_in(olga)
    response = client.post(reverse("silence_new"), {"topic_pattern": "", "duration": "3600", "reason": "r"})
    assert response.status_code == 400 and "needs at least one pattern" in response.content.decode()
    response = client.post(reverse("silence_new"), {"topic_pattern": "payments-*", "duration": "86400",
                                                    "reason": "payments maintenance"})
    assert response.status_code == 302
    silence = Silence.objects.get()
    assert silence.pipeline is None and silence.topic_pattern == "payments-*"
    assert AuditEvent.objects.get(action="silence.created").subject == f"silence #{silence.pk} of pipelines matching topic 'payments-*'"
    page = _logged_in(vera).get(reverse("silences")).content.decode()
    active = re.search(r'<table id="silences-active">.*?</table>', page, re.S).group(0)
    assert "<code>payments-*</code>" in active and "payments maintenance" in active and "olga" in active
    assert "<button" not in active  # the viewer cannot cancel
    overview = _logged_in(vera).get(reverse("overview")).content.decode()
    assert 'class="mark silenced"' in _row(overview, hit) and 'class="mark silenced"' not in _row(overview, miss)
    assert 'id="active-silence"' in _logged_in(vera).get(reverse("pipeline", args=[hit.pk])).content.decode()


def test_the_silences_page_lists_recent_ones(unique_name, olga, vera):
    p = pipeline_row(unique_name("recent"))
    silence = actions.silence_create(pipeline=p, duration_s=3600, reason="over soon", actor=Actor.of_user(olga))
    actions.silence_cancel(silence_id=silence.pk, actor=Actor.of_user(olga))
    page = _logged_in(vera).get(reverse("silences")).content.decode()
    recent = re.search(r'<table id="silences-recent">.*?</table>', page, re.S).group(0)
    assert "over soon" in recent and "cancelled" in recent
    assert 'id="silences-active"' not in page


# --- the overview: marks, owner, archived ----------------------------------------------------------------


def _row(html: str, pipeline: Pipeline) -> str:
    return re.search(rf'<tr data-pipeline="{pipeline.pk}".*?</tr>', html, re.S).group(0)


def test_overview_marks_owner_acknowledged_and_hides_archived(unique_name, olga, vera):
    shown = pipeline_row(unique_name("shown"))
    Pipeline.objects.filter(pk=shown.pk).update(owner="team-payments")
    incident = _incident(shown)
    actions.incident_acknowledge(incident_id=incident.pk, actor=Actor.of_user(olga), note="")
    archived = pipeline_row(unique_name("gone"))
    Pipeline.objects.filter(pk=archived.pk).update(archived_at=timezone.now(), retired=True)

    html = _logged_in(vera).get(reverse("overview")).content.decode()
    row = _row(html, shown)
    assert '<td class="owner">team-payments</td>' in row and 'class="mark acknowledged"' in row
    assert f'data-pipeline="{archived.pk}"' not in html
    assert re.search(r'<a href="\?archived=1">show 1 archived</a>', html)

    html = _logged_in(vera).get(reverse("overview"), {"archived": "1"}).content.decode()
    assert 'class="mark archived"' in _row(html, archived) and f'data-pipeline="{shown.pk}"' in html
    assert "hide them" in html
    live = _logged_in(vera).get(reverse("overview_live"), {"archived": "1"}).content.decode()
    assert f'data-pipeline="{archived.pk}"' in live
    # archived=0, or garbage, is not an error.
    assert f'data-pipeline="{archived.pk}"' not in _logged_in(vera).get(reverse("overview"), {"archived": "0"}).content.decode()

    page = _logged_in(vera).get(reverse("pipeline", args=[archived.pk])).content.decode()
    assert 'id="archived-banner"' in page and ">retired</span>" in page
    page = _logged_in(vera).get(reverse("pipeline", args=[shown.pk])).content.decode()
    assert '<span id="owner">team-payments</span>' in page and 'id="archived-banner"' not in page


def test_overview_queries_do_not_grow_with_pipelines_silences_or_acknowledgements(unique_name, olga, vera):
    client = _logged_in(vera)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(reverse("overview_live")).status_code == 200
        return len(captured)

    def add(n: int) -> None:
        for _ in range(n):
            p = pipeline_row(unique_name("q"))
            actions.incident_acknowledge(incident_id=_incident(p).pk, actor=Actor.of_user(olga), note="")
            actions.silence_create(pipeline=p, duration_s=3600, reason="r", actor=Actor.of_user(olga))
            Pipeline.objects.filter(pk=p.pk).update(owner="team")
        archived = pipeline_row(unique_name("a"))
        Pipeline.objects.filter(pk=archived.pk).update(archived_at=timezone.now())

    add(1)
    client.get(reverse("overview_live"))  # the session and the user, cached the same way for both
    few = queries()
    add(6)
    assert queries() == few


def test_hostile_owner_and_reason_are_escaped(unique_name, olga, vera):
    p = pipeline_row(unique_name("hostile"))
    Pipeline.objects.filter(pk=p.pk).update(owner='<script>alert("o")</script>\u202etxt.exe')
    actions.silence_create(pipeline=p, duration_s=3600, reason='<img src=x onerror=alert(1)>', actor=Actor.of_user(olga))
    actions.silence_create(group_pattern='"><script>x</script>', duration_s=3600, reason="r", actor=Actor.of_user(olga))
    for url in (reverse("overview"), reverse("pipeline", args=[p.pk]), reverse("silences")):
        html = _logged_in(vera).get(url).content.decode()
        assert "<script>" not in html.split("</header>", 1)[1].replace('<script src=', '') and "<img src=x" not in html, url
        assert "\u202e" not in html, url
