"""Chart data from stored samples: lag per partition and in seconds, markers, titles, and the
payload cap of the page's chart at 30 days of 64 partitions."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone as dj_timezone
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from dashboard.charts import render as charts
from dashboard.charts.selectors import chart_markers, pipeline_chart_table
from dashboard.models import Incident, StartReport
from dashboard.params import ChartParams, TimeRange
from streamoffsets.evaluation import Status, lag_seconds, lag_seconds_series
from tests.factories import pipeline_row, samples_bulk

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
UTC = ZoneInfo("UTC")


# --- lag in seconds over time: the merge-walk gives lag_seconds' numbers --------------------------

highs_st = st.lists(st.tuples(st.integers(0, 500), st.integers(0, 60)), max_size=40)  # (time step, offset step)


@given(highs_st, st.lists(st.tuples(st.integers(0, 600), st.one_of(st.none(), st.integers(0, 1500))), max_size=40),
       st.booleans())
@hsettings(max_examples=300, deadline=None)
def test_lag_seconds_series_equals_lag_seconds_at_every_sample(steps, queries, recreate):
    # Watermarks rising with flat stretches (offset step 0); optionally a re-created topic (a drop).
    t, h, high_samples = 0.0, 0, []
    for k, (dt, dh) in enumerate(steps):
        t += dt
        h = 3 if recreate and k == len(steps) // 2 else h + dh
        high_samples.append((t, h))
    committed = sorted(((float(qt), c) for qt, c in queries), key=lambda s: s[0])
    got = lag_seconds_series(committed, high_samples)
    want = [None if c is None else lag_seconds(c, [s for s in high_samples if s[0] <= at], at).seconds
            for at, c in committed]
    assert got == want


# --- chart tables from stored samples -------------------------------------------------------------


@pytest.mark.django_db
def test_per_partition_lag_in_messages_and_seconds_from_packed_samples():
    p = pipeline_row("pp")
    # One sample a minute. Partition 0 gets 100 messages a minute and its job is two minutes
    # behind; partition 1 gets 50 a minute and is caught up.
    samples_bulk(p, start=T0, step_s=60, count=10,
                 highs=lambda i: [100 * i, 50 * i], committed=lambda i: [max(0, 100 * (i - 2)), 50 * i])
    until = T0 + timedelta(minutes=9)

    messages = pipeline_chart_table(pipeline=p, kind="partitions", unit="messages", since=T0, until=until)
    assert messages.names == ["partition 0", "partition 1"]
    assert messages.values(0) == [0, 100] + [200] * 8
    assert messages.values(1) == [0] * 10
    assert list(messages.times) == [(T0 + timedelta(minutes=i)).timestamp() for i in range(10)]

    seconds = pipeline_chart_table(pipeline=p, kind="partitions", unit="seconds", since=T0, until=until)
    # Offset c = 100 (i - 2) was written 0.6 s after sample i - 2 (the high passed it there): lag 119.4 s.
    assert seconds.values(0) == [0.0, 59.4] + [119.4] * 8
    assert seconds.values(1) == [0.0] * 10
    total = pipeline_chart_table(pipeline=p, kind="total", unit="seconds", since=T0, until=until)
    assert total.values(0) == [0.0, 59.4] + [119.4] * 8  # the most-behind partition's

    stored_total = pipeline_chart_table(pipeline=p, kind="total", unit="messages", since=T0, until=until)
    assert stored_total.values(0) == [0, 100] + [200] * 8


@pytest.mark.django_db
def test_lag_seconds_uses_watermarks_from_before_the_range():
    p = pipeline_row("lookback")
    samples_bulk(p, start=T0, step_s=60, count=30, highs=lambda i: [100 * i], committed=lambda i: [0])
    # Asked for the last 5 minutes only: offset 0 was written 0.6 s after T0, 25+ minutes earlier.
    since = T0 + timedelta(minutes=25)
    table = pipeline_chart_table(pipeline=p, kind="total", unit="seconds", since=since,
                                           until=T0 + timedelta(minutes=29))
    assert table.values(0) == [round(25 * 60 + k * 60 - 0.6, 1) for k in range(5)]


@pytest.mark.django_db
def test_markers_are_incidents_and_restarts_in_the_range_in_time_order():
    p = pipeline_row("markers")
    Incident.objects.create(pipeline=p, opened_at=T0 + timedelta(minutes=5), closed_at=T0 + timedelta(minutes=9),
                            worst_status=int(Status.STALLED), reasons=["no offset moved in 120 s"])
    Incident.objects.create(pipeline=p, opened_at=T0 - timedelta(days=2), closed_at=T0 - timedelta(days=1),
                            worst_status=int(Status.ERR), reasons=["long ago"])
    report = StartReport.objects.create(pipeline=p, report={"decisions": ["partition 0: clamped to 40"]},
                                        clamped_partitions=1, messages_lost=12)
    StartReport.objects.filter(pk=report.pk).update(received_at=T0 + timedelta(minutes=7))

    markers = chart_markers(pipeline=p, since=T0, until=T0 + timedelta(minutes=10))
    assert [(m.at - T0, m.kind) for m in markers] == [
        (timedelta(minutes=5), "incident opened"), (timedelta(minutes=7), "restart"),
        (timedelta(minutes=9), "incident closed"),
    ]
    assert "STALLED" in markers[0].label and "no offset moved" in markers[0].label
    assert "12 messages lost" in markers[1].label and "clamped to 40" in markers[1].label

    chart = charts.pipeline_chart(pipeline=p, params=ChartParams("total", "messages", TimeRange(
        T0, T0 + timedelta(minutes=10), None)), tz=UTC)
    fig = charts.chart_figure(table=chart.table, markers=chart.markers, title=chart.title, tz=UTC)
    names = {t.name for t in fig.data if t.mode == "markers"}
    assert names == {"incident opened", "restart", "incident closed"}


@pytest.mark.django_db
def test_title_names_pipeline_store_range_and_time_zone_and_escapes_tags(settings):
    settings.TIME_ZONE = "Europe/Paris"
    p = pipeline_row("title", topic="orders", group="<b>billing</b>", store_name="local-hbase")
    r = TimeRange(T0, T0 + timedelta(hours=2), None)
    chart = charts.pipeline_chart(pipeline=p, params=ChartParams("partitions", "seconds", r),
                                  tz=ZoneInfo("Europe/Paris"))
    assert chart.title == ("Lag in seconds per partition: orders / <b>billing</b> (store local-hbase), "
                           "2026-11-01 01:00 to 2026-11-01 03:00, Europe/Paris")
    fig = charts.chart_figure(table=chart.table, markers=[], title=chart.title, tz=UTC)
    assert "&lt;b&gt;billing&lt;/b&gt;" in fig.layout.title.text and "<b>" not in fig.layout.title.text


def test_wall_clock_ms_shifts_by_the_offset_of_each_instant_dst_included():
    paris = ZoneInfo("Europe/Paris")
    summer = datetime(2026, 7, 1, 12, tzinfo=timezone.utc).timestamp()
    winter = datetime(2026, 12, 1, 12, tzinfo=timezone.utc).timestamp()
    assert charts.wall_clock_ms(summer, paris) == (summer + 7200) * 1000
    assert charts.wall_clock_ms(winter, paris) == (winter + 3600) * 1000


# --- the page's chart at scale: 64 partitions, 30 days, one sample a minute ------------------------

PARTITIONS = 64
MINUTES = 30 * 24 * 60
SPIKE_AT, SPIKE_PARTITION, SPIKE = 20_000, 7, 5_000_000


@pytest.fixture
def month_of_samples(db):
    p = pipeline_row("month")
    start = dj_timezone.now() - timedelta(minutes=MINUTES - 1)

    def committed(i):
        base = [1000 * i - (p_ * 3 + i % 17) for p_ in range(PARTITIONS)]
        if i == SPIKE_AT:
            base[SPIKE_PARTITION] -= SPIKE  # one cycle where the job fell far behind on one partition
        return base

    samples_bulk(p, start=start, step_s=60, count=MINUTES,
                 highs=lambda i: [1000 * i] * PARTITIONS, committed=committed, batch_size=5000)
    return p


@pytest.mark.django_db
def test_30_days_of_64_partitions_stays_under_the_point_and_payload_caps(client, vera_logged_in, month_of_samples):
    url = reverse("pipeline_lag_chart", args=[month_of_samples.pk])
    for kind, unit in (("partitions", "messages"), ("total", "messages"), ("total", "seconds")):
        response = client.get(url, {"range": "30d", "kind": kind, "unit": unit})
        assert response.status_code == 200
        assert len(response.content) < 300_000, (kind, unit, len(response.content))
        fig = json.loads(response.content)
        lines = [t for t in fig["data"] if t.get("yaxis") != "y2"]
        assert all(len(t["y"]) <= charts.SERIES_MAX_POINTS for t in lines)
        assert sum(len(t["y"]) for t in lines) <= charts.FIGURE_POINT_BUDGET + 2 * len(lines)
        if kind == "partitions":
            assert len(lines) == PARTITIONS
            spiked = next(t for t in lines if t["name"] == f"partition {SPIKE_PARTITION}")
            assert max(spiked["y"]) == SPIKE + SPIKE_PARTITION * 3 + SPIKE_AT % 17  # the spike survived
        elif unit == "messages":
            assert len(lines[0]["y"]) <= charts.SERIES_MAX_POINTS and len(lines[0]["y"]) > 1000
            assert max(lines[0]["y"]) > SPIKE
        else:
            assert max(lines[0]["y"]) > 60 * 60  # 5,000,000 messages at 1,000 a minute: days behind


@pytest.mark.django_db
def test_the_pages_figure_json_is_plotlys_own_json_of_the_figure():
    """The page's chart JSON is built from plain dicts (no plotly objects: they cost more than the
    roll-ups' read); it must be what plotly itself writes for the same figure, markers, notes and
    template included."""
    p = pipeline_row("figjson", group="<i>billing</i>")
    samples_bulk(p, start=T0, step_s=60, count=300, highs=lambda i: [100 * i, 7 * i], committed=lambda i: [50 * i, 0])
    Incident.objects.create(pipeline=p, opened_at=T0 + timedelta(minutes=5), worst_status=int(Status.STALLED),
                            reasons=["<b>stuck</b>"])
    for kind, unit, since in (("partitions", "seconds", T0), ("total", "messages", T0 - timedelta(days=3))):
        chart = charts.pipeline_chart(pipeline=p, params=ChartParams(kind, unit, TimeRange(
            since, T0 + timedelta(hours=5), None)), tz=ZoneInfo("Europe/Paris"))
        args = {"table": chart.table, "markers": chart.markers, "title": chart.title, "tz": ZoneInfo("Europe/Paris")}
        assert json.loads(charts.chart_figure_json(**args)) == json.loads(charts.chart_figure(**args).to_json())
    empty = charts.pipeline_chart(pipeline=p, params=ChartParams("total", "messages", TimeRange(
        T0 - timedelta(days=9), T0 - timedelta(days=8), None)), tz=UTC)
    args = {"table": empty.table, "markers": [], "title": empty.title, "tz": UTC}
    fast = json.loads(charts.chart_figure_json(**args))
    assert fast == json.loads(charts.chart_figure(**args).to_json())
    assert fast["layout"]["annotations"][0]["text"] == "no lag samples in this range yet"
