"""The dashboard pages, rendered from the database by the real views."""
from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse

from collectors.cycle import collect_once
from dashboard.models import Pipeline
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db


def cells(html: str, table_id: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [re.findall(r"<td[^>]*>\s*(.*?)\s*</td>", row, re.S) for row in re.findall(r"<tr.*?</tr>", body, re.S)]


def test_login_is_required_except_for_health(client, collectors_ticking):
    assert client.get(reverse("overview")).status_code == 302
    assert client.get(reverse("healthz")).json() == {"status": "ok"}


def test_pipeline_page_shows_batches_newest_first_and_lag_per_partition(client, vera_logged_in, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=2, records=20)  # 10 per partition
    save(s, "billing", 1_700_000_000_000, {0: 3, 1: 4})
    save(s, "billing", 1_700_000_060_000, {0: 7, 1: 9})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)

    html = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()

    assert cells(html, "batches") == [
        ["2023-11-14 22:14:20.000", "", "7", "9", "9", "60 s"],  # records = 4 + 5; a minute after the first
        ["2023-11-14 22:13:20.000", "", "3", "4", "—", "—"],
    ]
    partitions = {row[0]: row for row in cells(html, "partitions")}
    assert partitions["0"][1:5] == ["7", "0", "10", "3"]  # committed, low, high, lag = high - committed
    assert partitions["1"][1:5] == ["9", "0", "10", "1"]
    assert partitions["0"][-1].startswith("lagging")
    assert html.index('id="pipeline-status"') < html.index('id="lag-chart"')  # the verdict before the chart
    assert "Data is stale" not in html


def test_overview_lists_pipelines_with_total_lag(client, vera_logged_in, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=5)
    save(s, "g", 1_700_000_000_000, {0: 2})
    collect_once()
    html = client.get(reverse("overview")).content.decode()
    row = re.search(rf'<tr data-pipeline="\d+"[^>]*>((?:(?!</tr>).)*{s.topic}.*?)</tr>', html, re.S).group(1)
    assert '<td class="num total-lag">3</td>' in row
    assert ">STOPPED</span>" not in row and "p0: 3" in row


def test_stale_data_is_said_not_shown_as_current(client, vera_logged_in, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=5)
    save(s, "g", 1_700_000_000_000, {0: 2})
    collect_once()
    s.store.url = "hbase://127.0.0.1:1/gone"
    s.store.save()
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    html = client.get(reverse("pipeline_status", args=[pipeline.pk])).content.decode()
    assert "Data is stale" in html and "poll(s) failed" in html and "cannot reach the HBase Thrift server" in html
    assert "hbase://127.0.0.1:1/gone" in html
    assert "polls failing since" in client.get(reverse("overview")).content.decode()


def test_hostile_group_names_are_escaped(client, vera_logged_in, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=1)
    hostile = '<script>alert("g")</script>'
    save(s, hostile, 1_700_000_000_000, {0: 1})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    for url in (reverse("overview"), reverse("pipeline", args=[pipeline.pk])):
        html = client.get(url).content.decode()
        assert hostile not in html
        assert "&lt;script&gt;alert(&quot;g&quot;)&lt;/script&gt;" in html


def test_lag_chart_is_a_plotly_figure_of_the_samples(client, vera_logged_in, stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=4)
    save(s, "g", 1_700_000_000_000, {0: 1})
    collect_once()
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    fig = client.get(reverse("pipeline_lag_chart", args=[pipeline.pk]), {"range": "15m"}).json()
    assert fig["data"][0]["y"] == [3, 3]
    assert pipeline.topic in fig["layout"]["title"]["text"]


def test_unknown_pipeline_is_a_404_not_a_500(client, vera_logged_in):
    assert client.get(reverse("pipeline", args=[999999])).status_code == 404


def test_collector_health_page_and_json(client, vera_logged_in, stack, unique_name):
    good = hbase_store_setup(stack, unique_name, partitions=1)
    bad = hbase_store_setup(stack, unique_name, partitions=1)
    bad.store.url = "hbase://127.0.0.1:1/gone"
    bad.store.save()
    collect_once()
    html = client.get(reverse("collectors")).content.decode()
    row = re.search(rf'<tr data-source="store:{bad.store.pk}">(.*?)</tr>', html, re.S).group(1)
    assert "FAILING" in row and "cannot reach the HBase Thrift server" in row
    assert "FAILING" not in re.search(rf'<tr data-source="store:{good.store.pk}">(.*?)</tr>', html, re.S).group(1)
    sources = {s["source"]: s for s in client.get(reverse("api_collectors")).json()["sources"]}
    assert sources[f"store:{bad.store.pk}"]["healthy"] is False
    assert sources[f"store:{bad.store.pk}"]["consecutive_failures"] == 1
    assert sources[f"store:{good.store.pk}"]["healthy"] is True
    assert sources[f"cluster:{good.cluster.pk}"]["last_duration_ms"] is not None


def test_collector_json_needs_a_session(client):
    response = client.get(reverse("api_collectors"))
    assert response.status_code == 401 and "log in" in response.json()["error"]


def test_the_cadence_of_a_page_s_oldest_batch_comes_from_the_next_page(client, vera_logged_in, unique_name):
    from tests.factories import offline_pipeline

    batches = [(1_700_000_000_000 + i * 2_000 + (500 if i == 2 else 0), {0: i}) for i in range(53)]
    p = offline_pipeline(unique_name, partitions={0: (0, 60)}, batches=batches)
    first = cells(client.get(reverse("pipeline", args=[p.pk])).content.decode(), "batches")
    assert len(first) == 50 and first[-1][0] == "2023-11-14 22:13:26.000"  # batches 52 ... 3 on page 1
    assert first[-1][-1] == "1.5 s"  # batch 3 (6 s) came 1.5 s after batch 2 (4.5 s), which is on page 2
    assert first[0][-1] == "2 s"
    last = cells(client.get(reverse("pipeline", args=[p.pk]), {"page": 2}).content.decode(), "batches")
    assert [row[-1] for row in last] == ["2.5 s", "2 s", "—"]


def test_a_long_first_import_shows_its_progress_until_done(client, vera_logged_in, stack, unique_name, settings):
    settings.MAX_BATCHES_PER_CYCLE = 10
    s = hbase_store_setup(stack, unique_name, partitions=1, records=30)
    start = int(time.time() * 1000) - 30 * 60_000
    for i in range(25):  # 25 batches, one a minute, from 30 minutes ago
        save(s, "billing", start + i * 60_000, {0: i})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    html = client.get(reverse("pipeline_status", args=[pipeline.pk])).content.decode()
    # 10 of 25 batches read: up to minute 9 of the 30 since the oldest.
    assert re.search(r"Importing the store's retained history: (29|30)%", html), html
    assert "10 batches so far" in html
    collect_once()
    collect_once()  # 25 read: the last page was not full
    html = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert "Importing the store" not in html
    assert Pipeline.objects.get(pk=pipeline.pk).batches.count() == 25
