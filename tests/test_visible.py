"""Bidirectional controls and invisible characters in names are shown, not obeyed (issue #12,
observation 9): a group "rtl\u202egnp.exe" must not read "rtlexe.png" anywhere people read it."""
from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from streamoffsets.visible import visible

RLO = "\u202e"
HOSTILE_GROUP = f"rtl{RLO}gnp.exe"
SHOWN_GROUP = "rtl⟨U+202E⟩gnp.exe"

# (case, name, shown): numbered so a failure names its rule.
CASES = [
    (1, HOSTILE_GROUP, SHOWN_GROUP),
    # 2-5: every bidi control (embeddings, overrides, isolates, marks, the Arabic letter mark).
    (2, "a\u202ab\u202bc\u202cd\u202de", "a⟨U+202A⟩b⟨U+202B⟩c⟨U+202C⟩d⟨U+202D⟩e"),
    (3, "\u2066x\u2067y\u2068z\u2069", "⟨U+2066⟩x⟨U+2067⟩y⟨U+2068⟩z⟨U+2069⟩"),
    (4, "l\u200er\u200f", "l⟨U+200E⟩r⟨U+200F⟩"),
    (5, "ar\u061cb", "ar⟨U+061C⟩b"),
    # 6: zero-width characters make two names look the same.
    (6, "or\u200bders\u200c\u200d\u2060\ufeff", "or⟨U+200B⟩ders⟨U+200C⟩⟨U+200D⟩⟨U+2060⟩⟨U+FEFF⟩"),
    # 7: other control and format characters (a tab, a newline, a soft hyphen, a line separator).
    (7, "a\tb\nc\u00add\u2028e", "a⟨U+0009⟩b⟨U+000A⟩c⟨U+00AD⟩d⟨U+2028⟩e"),
    # 8: ordinary names, spaces and any script are left alone.
    (8, "orders / billing-v2.etl", "orders / billing-v2.etl"),
    (9, "заказы 注文 طلبات", "заказы 注文 طلبات"),
    (10, "", ""),
]


@pytest.mark.parametrize("case,name,shown", CASES, ids=[str(c[0]) for c in CASES])
def test_visible(case, name, shown):
    assert visible(name) == shown


def test_free_text_may_keep_its_line_breaks():
    assert visible("a\nb\u202ec", keep="\n") == "a\nb⟨U+202E⟩c"
    assert visible(None) == ""


def test_notification_texts_show_names_the_payload_keeps_them_raw():
    from dashboard.notifications.services import rewind_message

    message = rewind_message(event="requested", rewind_summary={
        "id": 7, "topic": "orders", "group": HOSTILE_GROUP, "store": f"zk{RLO}", "reason": f"why{RLO}\nbecause"})
    assert SHOWN_GROUP in message["title"] and RLO not in message["title"]
    assert SHOWN_GROUP in message["text"] and RLO not in message["text"]
    assert "why⟨U+202E⟩\nbecause" in message["text"]
    assert message["rewind"]["group"] == HOSTILE_GROUP  # machines get the name as it is


@pytest.mark.django_db
def test_pages_show_the_escape_and_machines_get_the_raw_name(client):
    from dashboard.accounts.roles import VIEWER
    from dashboard.audit.actor import Actor
    from dashboard.audit.services import audit_append
    from tests.factories import person, pipeline_row

    pipeline = pipeline_row("vis", group=HOSTILE_GROUP, store_name="store\u200bz")
    audit_append(actor=Actor(f"eve{RLO}"), action="pipeline.declared", subject=f"pipeline orders / {HOSTILE_GROUP}",
                 pipeline=pipeline)
    client.force_login(person("vera", VIEWER))
    pid = pipeline.pk

    pages = [reverse("overview"), reverse("pipeline", args=[pid]), reverse("audit")]
    for url in pages:
        html = client.get(url).content.decode()
        assert SHOWN_GROUP in html, url
        # Form values go back raw (the filter must match the real name); they are not shown.
        shown = re.sub(r'value="[^"]*"', "", html)
        assert RLO not in shown and "\u200b" not in shown, url
    overview = client.get(reverse("overview")).content.decode()
    assert "store⟨U+200B⟩z" in overview  # the store filter's option, and the table's cell
    audit = client.get(reverse("audit")).content.decode()
    assert "eve⟨U+202E⟩" in audit

    chart = client.get(reverse("pipeline_lag_chart", args=[pid]) + "?range=24h")
    assert chart.status_code == 200
    title = json.loads(chart.content)["layout"]["title"]["text"]
    assert SHOWN_GROUP in title and "store⟨U+200B⟩z" in title and RLO not in title

    # The JSON API and the CSV keep the raw name: programs match names exactly.
    api = client.get(reverse("api_pipeline", args=[pid])).json()
    assert api["group"] == HOSTILE_GROUP
    csv_text = b"".join(client.get(reverse("pipeline_batches_csv", args=[pid])).streaming_content).decode()
    assert HOSTILE_GROUP in csv_text
    # ... and the download's name has neither (only [A-Za-z0-9._-]).
    disposition = client.get(reverse("pipeline_chart_csv", args=[pid]) + "?range=24h")["Content-Disposition"]
    assert RLO not in disposition and "rtl_gnp.exe" in disposition


@pytest.mark.django_db
def test_the_svg_title_shows_the_escape(client):
    from dashboard.accounts.roles import VIEWER
    from tests.factories import person, pipeline_row

    pipeline = pipeline_row("svg", group=HOSTILE_GROUP)
    client.force_login(person("vera", VIEWER))
    response = client.get(reverse("pipeline_chart_svg", args=[pipeline.pk]) + "?range=24h")
    assert response.status_code == 200
    svg = b"".join(response.streaming_content) if response.streaming else response.content
    svg = svg.decode()
    assert "rtl⟨U+202E⟩gnp.exe" in svg and RLO not in svg


@pytest.mark.django_db
def test_the_approver_reads_a_rewind_reason_as_written(client, unique_name):
    """A right-to-left override in a reason would show the approver a different text."""
    from dashboard.accounts.roles import APPROVER, OPERATOR
    from dashboard.rewinds.services import rewind_request
    from tests.factories import offline_pipeline, person

    pipeline = offline_pipeline(unique_name, partitions={0: (0, 100)}, batches=[(1_700_000_000_000, {0: 50})],
                                group=HOSTILE_GROUP)
    rewind = rewind_request(pipeline=pipeline, user=person("olga", OPERATOR), kind="shift", spec={"shift": -10},
                            reason=f"replay 10{RLO}00001 messages\nticket 7")
    client.force_login(person("amir", APPROVER))
    html = client.get(reverse("rewind", args=[rewind.pk])).content.decode()
    assert "replay 10⟨U+202E⟩00001 messages<br>ticket 7" in html
    assert SHOWN_GROUP in html and RLO not in html
