"""Bidirectional controls and invisible characters in names are shown on the pages, the chart's SVG
title and the rewind page, not obeyed; machines (JSON, CSV) get the name as it is (issue #12,
observation 9). The escaping alone: tests/unit/test_visible.py."""
from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from tests.unit.test_visible import HOSTILE_GROUP, RLO, SHOWN_GROUP


@pytest.mark.django_db
def test_pages_show_the_escape_and_machines_get_the_raw_name(client, vera):
    from dashboard.audit.actor import Actor
    from dashboard.audit.services import audit_append
    from tests.factories import pipeline_row

    pipeline = pipeline_row("vis", group=HOSTILE_GROUP, store_name="store\u200bz")
    audit_append(actor=Actor(f"eve{RLO}"), action="pipeline.declared", subject=f"pipeline orders / {HOSTILE_GROUP}",
                 pipeline=pipeline)
    client.force_login(vera)
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
def test_the_svg_title_shows_the_escape(client, vera):
    from tests.factories import pipeline_row

    pipeline = pipeline_row("svg", group=HOSTILE_GROUP)
    client.force_login(vera)
    response = client.get(reverse("pipeline_chart_svg", args=[pipeline.pk]) + "?range=24h")
    assert response.status_code == 200
    svg = b"".join(response.streaming_content) if response.streaming else response.content
    svg = svg.decode()
    assert "rtl⟨U+202E⟩gnp.exe" in svg and RLO not in svg


@pytest.mark.django_db
def test_the_approver_reads_a_rewind_reason_as_written(client, unique_name, olga, amir):
    """A right-to-left override in a reason would show the approver a different text."""
    from dashboard.rewinds.services import rewind_request
    from tests.factories import offline_pipeline

    pipeline = offline_pipeline(unique_name, partitions={0: (0, 100)}, batches=[(1_700_000_000_000, {0: 50})],
                                group=HOSTILE_GROUP)
    rewind = rewind_request(pipeline=pipeline, user=olga, kind="shift", spec={"shift": -10},
                            reason=f"replay 10{RLO}00001 messages\nticket 7")
    client.force_login(amir)
    html = client.get(reverse("rewind", args=[rewind.pk])).content.decode()
    assert "replay 10⟨U+202E⟩00001 messages<br>ticket 7" in html
    assert SHOWN_GROUP in html and RLO not in html
