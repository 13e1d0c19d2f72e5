"""Hostile names through every output (issue #12's security suite): a topic, group, store and
cluster named to run script, break out of attributes, start spreadsheet formulas, split lines and
reverse text, written as a store can hold them, then read back through every page (audit and
collectors included) in Chromium, the chart SVG opened in Chromium, the PNG, CSV, JSON, the API,
/metrics and the download file names. Nothing runs, nothing is injected, each is shown as text."""
from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from dashboard.rewinds.services import rewind_request
from tests.actors import actor, passphrase
from tests.e2e.conftest import log_in
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread must see the rows
T0 = 1_700_000_000_000

TOPIC = 't"><img src=x id=injected-topic onerror=alert(1)>'
GROUP = '<script id="injected-group">alert("g")</script>\n=cmd|\' /C calc\'!A0 rtl\u202egnp.exe'
STORE = "@<svg id=injected-store onload=alert(2)>"
CLUSTER = "+<iframe id=injected-cluster src=javascript:alert(3)>"
INJECTED = "#injected-topic, #injected-group, #injected-store, #injected-cluster"


@pytest.fixture
def hostile(unique_name):
    cluster = cluster_get_or_create(name=CLUSTER, bootstrap_servers="127.0.0.1:1")
    store = store_get_or_create(name=STORE, kind="hbase", url="hbase://127.0.0.1:1/unused", cluster=cluster)
    pipeline = offline_pipeline(unique_name, store=store, topic=TOPIC, group=GROUP, partitions={0: (0, 100)},
                                batches=[(T0, {0: 10}), (T0 + 60_000, {0: 40})])
    olga = actor("olga")
    rewind = rewind_request(pipeline=pipeline, user=olga, kind="batch", spec={"batch_time_ms": T0},
                            reason=f"replay {GROUP}")  # the audit log and the rewind pages name it too
    actor("vera", can_log_in=True)
    return pipeline, rewind


def test_pages_and_the_svg_show_hostile_names_as_text_in_chromium(browser, live_server, hostile):
    pipeline, rewind = hostile
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, "vera", passphrase("vera"))
    pages = ["/", reverse("pipeline", args=[pipeline.pk]), "/collectors/", "/audit/", "/rewinds/",
             reverse("rewind", args=[rewind.pk])]
    for url in pages:
        page.goto(url)
        page.wait_for_load_state("load")
        assert page.locator(INJECTED).count() == 0, url
        text = page.inner_text("body")
        # Shown as text: the topic whole, the group with its reversing character made visible.
        if url != "/collectors/":  # (that page names stores and clusters, not pipelines)
            assert TOPIC in text, url
            assert "\u202e" not in text and "⟨U+202E⟩" in text, url
    # The SVG is served as a download; opened as a document of its own (where an SVG's scripts and
    # event handlers would run), with the bytes the dashboard served.
    svg = page.request.get(reverse("pipeline_chart_svg", args=[pipeline.pk]) + "?range=30d")
    assert svg.status == 200 and svg.headers["content-type"] == "image/svg+xml"
    page.route("**/opened-chart.svg", lambda route: route.fulfill(body=svg.body(), content_type="image/svg+xml"))
    page.goto("/opened-chart.svg")
    page.wait_for_load_state("load")
    assert TOPIC in page.evaluate("document.documentElement.textContent")
    assert page.locator(INJECTED).count() == 0
    assert page.locator("svg").count() >= 1
    assert dialogs == []
    context.close()


def _viewer() -> Client:
    client = Client()
    client.force_login(actor("vera"))
    return client


def test_files_api_and_metrics_carry_hostile_names_safely(hostile):
    pipeline, _ = hostile
    client = _viewer()
    # The API: the names exactly as the store holds them (machines match on them).
    api = client.get(f"/api/v1/pipelines/{pipeline.pk}").json()
    assert json.dumps(api).count(json.dumps(TOPIC)[1:-1]) >= 1 and json.dumps(GROUP)[1:-1] in json.dumps(api)
    # CSV: every cell that a spreadsheet would read as a formula is neutralised.
    for name in ("pipeline_chart_csv", "pipeline_batches_csv"):
        response = client.get(reverse(name, args=[pipeline.pk]), {"range": "30d"})
        assert response.status_code == 200, name
        body = b"".join(response.streaming_content) if response.streaming else response.content
        for row in csv.reader(io.StringIO(body.decode())):
            for cell in row:
                assert not re.match(r"^[=+\-@\t\r]", cell) or re.fullmatch(r"-?\d+(\.\d+)?", cell), (name, cell)
        assert re.fullmatch(r'attachment; filename="[A-Za-z0-9._-]+"', response["Content-Disposition"]), name
    # Images: rendered (the title names the pipeline), file names plain.
    for fmt, magic in (("png", b"\x89PNG"), ("svg", b"<svg")):
        response = client.get(reverse(f"pipeline_chart_{fmt}", args=[pipeline.pk]), {"range": "30d"})
        assert response.status_code == 200, fmt
        assert magic in response.content[:200], fmt
        assert re.fullmatch(r'attachment; filename="[A-Za-z0-9._-]+"', response["Content-Disposition"]), fmt
        if fmt == "svg":  # the names are XML text: no element of theirs
            svg = response.content.decode()
            assert not re.search(r"<(img|script|iframe|svg id=injected)", svg), fmt
    # /metrics: label values escaped as the exposition format requires, parsed back exactly.
    text = client.get("/metrics").content.decode()
    line = next(x for x in text.splitlines() if x.startswith("offsetwatch_pipeline_status{"))
    assert "\n" not in line and '\\"' in line and "\\n" in line
