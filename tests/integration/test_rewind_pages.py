"""The rewind pages through Django's client: roles, bad input said not crashed, every status
renders, CSRF, hostile text escaped."""
from __future__ import annotations

import pytest
from django.test import Client

from dashboard.models import RewindRequest
from dashboard.rewinds.services import rewind_decide, rewind_request
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db
T0 = 1_700_000_000_000


@pytest.fixture
def p(unique_name):
    return offline_pipeline(unique_name, partitions={0: (5, 100)}, batches=[(T0, {0: 10}), (T0 + 10_000, {0: 50})])


def logged_in(user, **kw) -> Client:
    client = Client(**kw)
    client.force_login(user)
    return client


def test_only_operators_open_the_request_form(p, vera, olga):
    assert logged_in(vera).get(f"/pipelines/{p.pk}/rewind/").status_code == 403
    page = logged_in(olga).get(f"/pipelines/{p.pk}/rewind/?kind=batch&batch_time_ms={T0}")
    assert page.status_code == 200 and "batch of 2023-11-14 22:13:20.000 UTC" in page.content.decode()


@pytest.mark.parametrize("form, message", [
    ({"kind": "offsets", "offsets": "0:abc"}, "&#x27;0:abc&#x27; is not partition:offset"),
    ({"kind": "offsets", "offsets": "0:1, 0:2"}, "partition 0 is given twice"),
    ({"kind": "offsets", "offsets": "0:99999999999999999999"}, "too large for Kafka"),
    ({"kind": "shift", "shift": "0"}, "other than 0"),
    ({"kind": "shift", "shift": "1e999"}, "&#x27;1e999&#x27; is not a whole number from"),  # dashboard.params
    ({"kind": "shift", "shift": "٣"}, "&#x27;٣&#x27; is not a whole number from"),
    ({"kind": "time", "time": "yesterday"}, "&#x27;yesterday&#x27; is not a date-time"),
    ({"kind": "time"}, "give the point in time"),
    ({"kind": "batch"}, "rewind here"),
    ({"kind": "yesterday"}, "Select a valid choice"),
    ({"kind": "offsets", "offsets": "0:2"}, "below the low watermark 5"),
    ({"kind": "offsets", "offsets": "3:2"}, "partition 3: the topic has no such partition"),
])
def test_bad_input_is_said_next_to_the_form_not_a_500(p, form, message, olga):
    as_olga = logged_in(olga)
    response = as_olga.post(f"/pipelines/{p.pk}/rewind/", {"reason": "replay", "mode": "job", "action": "preview", **form})
    html = response.content.decode()
    assert response.status_code in (200, 400) and message in html, html[-2000:]
    assert 'id="submit-request"' not in html  # nothing to submit while something is wrong
    assert not RewindRequest.objects.exists()


def test_preview_then_submit_creates_the_request(p, olga):
    as_olga = logged_in(olga)
    form = {"kind": "shift", "shift": "-20", "reason": "replay", "mode": "job"}
    preview = as_olga.post(f"/pipelines/{p.pk}/rewind/", {**form, "action": "preview"}).content.decode()
    assert 'id="submit-request"' in preview and "20 re-read" in preview
    response = as_olga.post(f"/pipelines/{p.pk}/rewind/", {**form, "action": "submit"})
    r = RewindRequest.objects.get(pipeline=p)
    assert response.status_code == 302 and response["Location"] == f"/rewinds/{r.pk}/"
    assert r.target_offsets == {"0": 30} and r.target_text == "shift every partition by -20 messages"


def test_every_status_renders(p, olga, vera):
    viewer = logged_in(vera)
    r = rewind_request(pipeline=p, user=olga, kind="earliest", spec={}, reason="replay")
    for status in RewindRequest.Status.values:
        RewindRequest.objects.filter(pk=r.pk).update(status=status, outcome=f"outcome of {status}")
        page = viewer.get(f"/rewinds/{r.pk}/")
        assert page.status_code == 200, status
        assert f'id="rewind-status">{status}<' in page.content.decode()
    assert viewer.get("/rewinds/").status_code == 200
    assert viewer.get("/rewinds/999999/").status_code == 404


def test_deciding_needs_the_role_another_person_and_a_csrf_token(p, amir, sam, vera):
    r = rewind_request(pipeline=p, user=sam, kind="earliest", spec={}, reason="replay")  # sam is an approver too
    requester = Client()
    requester.force_login(sam)
    refused = requester.post(f"/rewinds/{r.pk}/decide", {"decision": "approve"})
    assert refused.status_code == 409 and "someone other than its requester" in refused.content.decode()
    assert logged_in(vera).post(f"/rewinds/{r.pk}/decide", {"decision": "approve"}).status_code == 403
    forged = logged_in(amir, enforce_csrf_checks=True).post(f"/rewinds/{r.pk}/decide", {"decision": "approve"})
    assert forged.status_code == 403
    approver = Client()
    approver.force_login(amir)
    assert approver.post(f"/rewinds/{r.pk}/decide", {"decision": "approve", "comment": "ok"}).status_code == 302
    r.refresh_from_db()
    assert r.status == "approved"


def test_hostile_text_is_escaped(p, olga, amir, vera):
    r = rewind_request(pipeline=p, user=olga, kind="earliest", spec={}, reason='<script>alert("x")</script>',
                       ticket_url="https://tickets.example/<b>")
    rewind_decide(rewind=r, user=amir, approve=True, comment="<img src=x onerror=alert(1)>")
    html = logged_in(vera).get(f"/rewinds/{r.pk}/").content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert" in html
