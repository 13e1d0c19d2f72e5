"""The overview: worst first, filters, sparklines, banners, hostile names."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.models import PipelineEvaluation
from dashboard.monitoring.services import source_health_record, store_reading_record, watermarks_record
from offsetwatch.lib import sparkline
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db


def rows(html: str) -> list[tuple[str, str]]:
    """(status, topic) of each overview row, in page order."""
    return re.findall(r'<tr data-pipeline="\d+" data-status="(\w+)">.*?<a href="/pipelines/\d+/">([^<]*)</a>', html, re.S)


# --- sparkline rules (pure) ---------------------------------------------------------------------

SPARKLINE_CASES = [
    # 1. the first value opens its minute
    ([], 120.5, 7, [[120.0, 7]]),
    # 2. a second value in the same minute keeps the larger (a spike is not averaged away)
    ([[120.0, 7]], 150.0, 3, [[120.0, 7]]),
    ([[120.0, 7]], 150.0, 30, [[120.0, 30]]),
    # 3. a new minute appends
    ([[120.0, 7]], 185.0, 2, [[120.0, 7], [180.0, 2]]),
    # 4. points older than an hour fall off
    ([[0.0, 1], [3540.0, 2]], 3600.0, 3, [[3540.0, 2], [3600.0, 3]]),
    # 5. malformed stored points (hand-edited, older format) are dropped, not a crash
    ([["x"], None, [60.0, 1]], 61.0, 4, [[60.0, 4]]),
    # 6. points "from the future" (a clock step back) are dropped
    ([[600.0, 9]], 61.0, 4, [[60.0, 4]]),
]


@pytest.mark.parametrize("points, at, value, expected", SPARKLINE_CASES,
                         ids=[f"case{i + 1}" for i in range(len(SPARKLINE_CASES))])
def test_sparkline_push(points, at, value, expected):
    assert sparkline.push(points, at, value) == expected


def test_sparkline_svg_scales_time_and_value_into_its_box():
    line = sparkline.svg_points([[0, 0], [60, 10], [120, 5]], width=120, height=24)
    assert line == "0,23 60,1 120,12"
    assert sparkline.svg_points([[0, 5]]) == ""  # one point is no line


# --- the page -------------------------------------------------------------------------------------


def test_worst_first_and_each_filter(vera_client, unique_name):
    now = timezone.now()
    # ERR: committed below the low watermark; WARN-free lagging OK; caught-up OK.
    lost = offline_pipeline(unique_name, topic=unique_name("payments"), partitions={0: (50, 100)},
                            batches=[(int(now.timestamp() * 1000), {0: 10})])
    lagging = offline_pipeline(unique_name, topic=unique_name("orders"), partitions={0: (0, 100)},
                               batches=[(int(now.timestamp() * 1000), {0: 60})], store=lost.store)
    other = offline_pipeline(unique_name, topic=unique_name("clicks"), partitions={0: (0, 5)},
                             batches=[(int(now.timestamp() * 1000), {0: 5})])
    html = vera_client.get(reverse("overview")).content.decode()
    order = [topic for _, topic in rows(html)]
    assert order.index(lost.topic) < order.index(lagging.topic) < order.index(other.topic)
    assert dict((t, s) for s, t in rows(html))[lost.topic] == "ERR"

    html = vera_client.get(reverse("overview"), {"status": "ERR"}).content.decode()
    assert [t for _, t in rows(html)] == [lost.topic]
    html = vera_client.get(reverse("overview"), {"store": other.store.name}).content.decode()
    assert [t for _, t in rows(html)] == [other.topic]
    html = vera_client.get(reverse("overview"), {"cluster": lost.store.cluster.name}).content.decode()
    assert {t for _, t in rows(html)} == {lost.topic, lagging.topic}
    html = vera_client.get(reverse("overview"), {"q": lagging.topic[-6:].upper()}).content.decode()  # case-insensitive
    assert [t for _, t in rows(html)] == [lagging.topic]
    # The live partial honours the same filters (the page polls it with its own query string).
    live = vera_client.get(reverse("overview_live"), {"status": "ERR"}).content.decode()
    assert [t for _, t in rows(live)] == [lost.topic]
    html = vera_client.get(reverse("overview"), {"q": "no-such-pipeline-anywhere"}).content.decode()
    assert "No pipeline matches these filters." in html


def test_invalid_filter_values_are_explained_not_a_500(vera_client, unique_name):
    offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    for params in ({"status": "BROKEN"}, {"store": "no-such-store"}, {"q": "a\x00b"}, {"q": "x" * 500}):
        response = vera_client.get(reverse("overview"), params)
        assert response.status_code == 200, params
        html = response.content.decode()
        assert 'class="state-bad"' in html, params  # the field's error is shown
        assert rows(html), params  # and the overview is still there, unfiltered


def test_the_sparkline_follows_lag_minute_by_minute(vera_client, unique_name):
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=5)
    p = offline_pipeline(unique_name, partitions={0: (0, 100)}, batches=[(int(start.timestamp() * 1000), {0: 90})],
                         sampled_at=start)
    for minute, high in ((1, 150), (2, 400), (3, 160)):
        watermarks_record(cluster=p.store.cluster, sampled_at=start + timedelta(minutes=minute), result=_marks(p.topic, high))
    points = PipelineEvaluation.objects.get(pipeline=p).sparkline
    assert [v for _, v in points] == [10, 60, 310, 70]  # high - 90 at each minute
    html = vera_client.get(reverse("overview")).content.decode()
    assert re.search(r'<svg class="sparkline"[^>]*aria-label="lag over the last hour, up to 310"><polyline points="[\d., ]+"/>', html)


def _marks(topic, high):
    from streamoffsets.kafka import WatermarkResult
    from streamoffsets.types import Watermarks

    return WatermarkResult(by_topic={topic: {0: Watermarks(0, 0, high)}})


def test_banner_when_a_source_fails_or_its_data_is_stale(vera_client, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    long_ago = timezone.now() - timedelta(hours=2)
    source_health_record(source=f"cluster:{p.store.cluster_id}", label=f"cluster {p.store.cluster.name}",
                                  started_at=long_ago, duration_ms=5, warning="")
    source_health_record(source=f"store:{p.store_id}", label=f"store {p.store.name}",
                                  started_at=timezone.now(), duration_ms=5, error="connection refused")
    html = vera_client.get(reverse("overview")).content.decode()
    assert re.search(rf'class="banner stale">cluster {re.escape(p.store.cluster.name)}: no successful poll for 2 h', html)
    assert re.search(rf'class="banner error">store {re.escape(p.store.name)}: polls failing .*connection refused', html)


def test_hostile_names_are_escaped(vera_client, unique_name):
    topic = '<script>alert("t")</script>'
    group = '"><img src=x onerror=alert(1)>'
    p = offline_pipeline(unique_name, topic=topic, group=group, partitions={0: (0, 5)},
                         batches=[(1_700_000_000_000, {0: 1})])
    for url in (reverse("overview"), reverse("overview_live"), reverse("pipeline", args=[p.pk])):
        html = vera_client.get(url).content.decode()
        assert "<script>alert" not in html and "<img src=x" not in html, url
        assert "&lt;script&gt;alert" in html, url


def test_a_pipeline_not_evaluated_yet_is_listed_as_unknown(vera_client, unique_name):
    """Discovered by a store poll, no watermark poll yet: no evaluation row."""
    from dashboard.models import Cluster, Store
    from streamoffsets.stores.reading import StoreReading
    from streamoffsets.types import BatchOffsets, PipelineKey

    cluster = Cluster.objects.create(name=unique_name("c"), bootstrap_servers="127.0.0.1:1")
    store = Store.objects.create(name=unique_name("s"), kind="hbase", url="hbase://127.0.0.1:1/t", cluster=cluster)
    key = PipelineKey(unique_name("fresh"), "etl")
    store_reading_record(store=store, reading=StoreReading(
        pipelines=[key], batches={key: [BatchOffsets(key.topic, "etl", 1_700_000_000_000, {0: 1})]}))
    response = vera_client.get(reverse("overview"))
    assert response.status_code == 200
    assert (("UNKNOWN", key.topic)) in rows(response.content.decode())


# --- a fleet: pages, order and links on the server (issue #16) ----------------------------------

def fleet(unique_name, n: int):
    """n pipelines in one store with evaluations: pipeline i has status i % 6 and lag i (so the
    worst-first order is known), built directly (the collectors are not what is tested here)."""
    from dashboard.models import Pipeline, Store
    from dashboard.monitoring.services import cluster_get_or_create

    cluster = cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers="kafka:9092")
    store = Store.objects.create(name=unique_name("store"), kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    pipelines = Pipeline.objects.bulk_create(
        [Pipeline(store=store, topic=f"fleet-{i:04d}", group="etl", owner=f"team-{i % 3}") for i in range(n)])
    now = timezone.now()
    PipelineEvaluation.objects.bulk_create([
        PipelineEvaluation(pipeline=p, evaluated_at=now, status=i % 6, reasons=["r"], partitions=[], total_lag=i,
                           sparkline=[], sparkline_svg="", sparkline_max=0)
        for i, p in enumerate(pipelines)])
    return pipelines


def worst_first(n: int) -> list[str]:
    return [f"fleet-{i:04d}" for i in sorted(range(n), key=lambda i: (-(i % 6), -i))]


def test_the_overview_shows_one_page_worst_first_with_links_that_keep_the_filters(vera_client, unique_name):
    fleet(unique_name, 250)
    expected = worst_first(250)
    html = vera_client.get(reverse("overview")).content.decode()
    assert [t for _, t in rows(html)] == expected[:100]
    assert "pipelines 1–100 of 250, page 1 of 3" in html
    html = vera_client.get(reverse("overview") + "?page=3").content.decode()
    assert [t for _, t in rows(html)] == expected[200:]
    # The live partial reads the same query: the page the person is on stays that page.
    live = vera_client.get(reverse("overview_live") + "?page=2").content.decode()
    assert [t for _, t in rows(live)] == expected[100:200]
    # Filters and order travel in the links (a shareable URL for any view).
    html = vera_client.get(reverse("overview") + "?status=ERR&status=REWOUND&sort=lag").content.decode()
    errs = sorted((i for i in range(250) if i % 6 in (4, 5)), reverse=True)  # 83 of them: one page, by lag
    assert [t for _, t in rows(html)] == [f"fleet-{i:04d}" for i in errs]
    html = vera_client.get(reverse("overview") + "?sort=owner&page=2").content.decode()
    assert 'href="?sort=owner&amp;page=1"' in html and 'href="?sort=owner&amp;page=3"' in html


def test_a_page_past_the_end_is_the_last_and_a_bad_page_or_order_is_explained(vera_client, unique_name):
    fleet(unique_name, 150)
    html = vera_client.get(reverse("overview") + "?page=999999").content.decode()
    assert "page 2 of 2" in html and len(rows(html)) == 50
    for bad in ("page=0", "page=abc", "page=99999999999999999999", "sort=drop%20table", "page=-1"):
        response = vera_client.get(reverse("overview") + "?" + bad)
        assert response.status_code == 200, bad
        assert 'class="state-bad"' in response.content.decode(), bad  # said next to its field
        assert len(rows(response.content.decode())) == 100, bad  # and the first page is shown


def test_a_page_costs_the_same_queries_whatever_the_fleet(vera_client, unique_name):
    fleet(unique_name, 30)
    vera_client.get(reverse("overview"))
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as small:
        vera_client.get(reverse("overview"))
    fleet(unique_name, 400)
    with CaptureQueriesContext(connection) as large:
        html = vera_client.get(reverse("overview") + "?page=4").content.decode()
    assert len(rows(html)) == 100
    assert len(large.captured_queries) == len(small.captured_queries)
