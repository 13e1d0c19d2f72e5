"""Bounded cost per user (issue #12, observation 4): the shared chart cache and its quantized
custom ranges, the maximum span, image and export size limits, heavy-request slots (429) and the
background-export quota. On the real PostgreSQL and Redis of the test run."""
from __future__ import annotations

import html
import time
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import heavy
from dashboard.charts import cache as chart_cache
from dashboard.charts import render as charts
from dashboard.models import ExportJob, LagSample
from dashboard.params import ChartParams, TimeRange
from devstack.components import free_port
from tests.factories import pipeline_row, samples_bulk

pytestmark = pytest.mark.django_db

DAY_START = datetime(2026, 11, 20, 10, 0, tzinfo=dt_timezone.utc)


@pytest.fixture
def erin_client(erin):
    """A second client, logged in as another viewer."""
    from django.test import Client

    other = Client()
    other.force_login(erin)
    return other


@pytest.fixture
def day():
    """A pipeline with a day of samples (every 10 min, 3 partitions) from DAY_START."""
    p = pipeline_row("day", topic="orders", group="billing")
    samples_bulk(p, start=DAY_START, step_s=600, count=145,
                 highs=lambda i: [100 * i, 50 * i, 10 * i], committed=lambda i: [max(0, 100 * i - 30), 50 * i, 0])
    return p


def custom(ms_from: int, ms_to: int) -> dict:
    """A custom range over the fixture's day, 7 minutes past, with the given milliseconds."""
    return {"kind": "partitions", "from": f"2026-11-20T10:07:00.{ms_from:03d}+00:00",
            "to": f"2026-11-21T10:07:00.{ms_to:03d}+00:00"}


def lag_queries(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if LagSample._meta.db_table in q["sql"]]


# --- the chart cache --------------------------------------------------------------------------------


def test_two_custom_ranges_milliseconds_apart_are_one_cache_entry(client, vera_logged_in, day):
    url = reverse("pipeline_lag_chart", args=[day.pk])
    first = client.get(url, custom(100, 200))
    assert first.status_code == 200
    assert chart_cache.stats()[0] == 1
    # A day's span moves a pixel every 86 s: the range is widened to 5-minute steps (10:05-10:10),
    # so the second request is the same chart and reads no lag sample.
    with CaptureQueriesContext(connection) as queries:
        second = client.get(url, custom(300, 999))
    assert second.status_code == 200 and second.content == first.content
    assert lag_queries(queries) == []
    assert chart_cache.stats()[0] == 1
    assert "2026-11-20 10:05 to 2026-11-21 10:10" in first.json()["layout"]["title"]["text"]


def test_a_cached_chart_is_served_while_the_users_heavy_slot_is_taken(client, vera_logged_in, day):
    url = reverse("pipeline_lag_chart", args=[day.pk])
    assert client.get(url, custom(1, 2)).status_code == 200
    with heavy.acquire(user_id=vera_logged_in.pk):
        assert client.get(url, custom(5, 6)).status_code == 200  # from the cache: no slot needed
        assert client.get(url, {**custom(1, 2), "unit": "seconds"}).status_code == 429  # cold: heavy


def test_quantization_steps_come_from_a_fixed_ladder_and_only_widen_the_range():
    since = datetime(2026, 11, 1, 13, 27, 12, 345000, tzinfo=dt_timezone.utc)
    cases = [  # (span, step): the smallest ladder step of at least span / 1000
        (timedelta(minutes=15), 1), (timedelta(hours=6), 60), (timedelta(days=1), 300),
        (timedelta(days=7), 900), (timedelta(days=30), 3600),
    ]
    for span, step in cases:
        assert chart_cache.step_s(span.total_seconds()) == step, span
        params = ChartParams("total", "messages", TimeRange(since, since + span, None))
        q = chart_cache.quantized(params).range
        assert q.since <= since and q.until >= since + span
        assert q.since.timestamp() % step == 0 and q.until.timestamp() % step == 0
    preset = ChartParams("total", "messages", TimeRange(since, since + timedelta(hours=1), "1h"))
    assert chart_cache.quantized(preset) is preset  # a preset's key is its name


def test_the_cache_keeps_within_its_entry_and_byte_bounds(settings):
    settings.CHART_CACHE_MAX_ENTRIES, settings.CHART_CACHE_MAX_BYTES = 5, 800  # entries up to 100 bytes
    for i in range(12):
        assert chart_cache.put(chart_cache.Entry(f"{chart_cache.PREFIX}test:{i}", 60.0 + i), b"x" * 90)
    entries, size = chart_cache.stats()
    assert entries == 5 and size == 450
    # The ones kept are those that expire last; the evicted bodies are gone too.
    assert chart_cache.get(chart_cache.Entry(f"{chart_cache.PREFIX}test:11", 60.0)) == b"x" * 90
    assert chart_cache.get(chart_cache.Entry(f"{chart_cache.PREFIX}test:0", 60.0)) is None
    assert not chart_cache.put(chart_cache.Entry(f"{chart_cache.PREFIX}test:big", 60.0), b"x" * 101)
    settings.CHART_CACHE_MAX_ENTRIES = 100
    for i in range(12):
        chart_cache.put(chart_cache.Entry(f"{chart_cache.PREFIX}test:b{i}", 60.0), b"y" * 100)
    assert chart_cache.stats()[1] <= 800


def test_a_png_is_cached_and_a_second_one_needs_no_slot(client, vera_logged_in, day):
    url = reverse("pipeline_chart_png", args=[day.pk])
    query = {**custom(10, 20), "width": "600", "height": "300"}
    first = client.get(url, query)
    assert first.status_code == 200 and first.content[:8] == b"\x89PNG\r\n\x1a\n"
    with heavy.acquire(user_id=vera_logged_in.pk):
        second = client.get(url, {**query, "from": "2026-11-20T10:07:00.500+00:00"})
        assert second.status_code == 200 and second.content == first.content
        assert client.get(url, {**query, "width": "601"}).status_code == 429  # another image: rendered


# --- maximum span and sizes -------------------------------------------------------------------------


def test_a_custom_range_over_the_maximum_span_is_a_400_naming_from(client, vera_logged_in, day):
    for name in ("pipeline_lag_chart", "pipeline_chart_png", "pipeline_chart_json", "pipeline"):
        response = client.get(reverse(name, args=[day.pk]), {"from": "2026-10-01T00:00", "to": "2026-11-01T00:00"})
        assert response.status_code == 400, name
        assert ("parameter 'from': '2026-10-01T00:00:00+00:00' makes a range longer than the most a chart spans "
                "(30 days, OFFSETWATCH_CHART_MAX_SPAN)") in html.unescape(response.content.decode()), name
    assert client.get(reverse("pipeline_lag_chart", args=[day.pk]),
                      {"from": "2026-10-02T00:00", "to": "2026-11-01T00:00"}).status_code == 200  # 30 days


def test_a_preset_over_a_lowered_maximum_span_is_a_400_naming_range(client, vera_logged_in, day, settings):
    settings.CHART_MAX_SPAN_S = 7 * 86400
    response = client.get(reverse("pipeline_lag_chart", args=[day.pk]), {"range": "30d"})
    assert response.status_code == 400
    assert response.content.decode().startswith("parameter 'range': '30d' makes a range longer than the most a "
                                                "chart spans (7 days")


@pytest.mark.parametrize("query, message", [
    ({"width": "4000", "height": "1000"}, "parameter 'width': '4000' is not a whole number from 300 to 2400"),
    ({"width": "1000", "height": "3000"}, "parameter 'height': '3000' is not a whole number from 200 to 1600"),
])
def test_a_too_large_image_is_a_400(client, vera_logged_in, day, query, message):
    response = client.get(reverse("pipeline_chart_png", args=[day.pk]), {"range": "24h", **query})
    assert response.status_code == 400 and response.content.decode() == message


def test_chart_data_over_the_inline_point_limit_is_a_413_offering_a_background_export(client, vera_logged_in, day, settings):
    settings.EXPORT_INLINE_MAX_POINTS = 300  # 145 samples: 145 values in total, 435 per partition
    url = reverse("pipeline_chart_json", args=[day.pk])
    query = {"from": "2026-11-20T10:00", "to": "2026-11-21T10:00"}
    assert client.get(url, {**query, "kind": "total"}).status_code == 200
    too_large = client.get(url, {**query, "kind": "partitions"})
    assert too_large.status_code == 413
    html = too_large.content.decode()
    assert "<strong>145</strong> rows (435 values)" in html and "OFFSETWATCH_EXPORT_INLINE_MAX_POINTS" in html
    assert 'name="export" value="chart_csv"' in html
    assert client.get(reverse("pipeline_chart_csv", args=[day.pk]), {**query, "kind": "partitions"}).status_code == 413
    # Downsampled within the limit it is served.
    assert client.get(url, {**query, "kind": "partitions", "max_points": "200"}).status_code == 200
    assert client.get(url, {**query, "kind": "partitions", "max_points": "400"}).status_code == 413


def test_a_batch_export_over_the_inline_point_limit_is_a_413(client, vera_logged_in, settings):
    from dashboard.models import Batch

    settings.EXPORT_INLINE_MAX_POINTS = 100
    p = pipeline_row("wide")
    Batch.objects.bulk_create([Batch(pipeline=p, batch_time_ms=1_700_000_000_000 + i * 1000, batch_id=i,
                                     offsets={str(k): i for k in range(8)}) for i in range(20)])
    response = client.get(reverse("pipeline_batches_csv", args=[p.pk]), {"range": "all"})
    assert response.status_code == 413 and "(160 values)" in response.content.decode()


# --- heavy-request slots ----------------------------------------------------------------------------


def test_a_second_heavy_request_of_one_user_is_a_429_and_another_user_is_served(client, vera_logged_in, erin_client, day):
    with heavy.acquire(user_id=vera_logged_in.pk):  # vera's first heavy request, still running
        for name in ("pipeline_lag_chart", "pipeline_chart_png", "pipeline_chart_json", "pipeline_chart_csv"):
            response = client.get(reverse(name, args=[day.pk]), {"range": "24h"})
            assert response.status_code == 429, name
            assert response["Retry-After"] == "5" and response["Content-Type"].startswith("text/plain")
            assert response.content.decode().startswith("another heavy request of yours")
            assert "OFFSETWATCH_HEAVY_PER_USER" in response.content.decode()
        assert client.get(reverse("pipeline_batches_csv", args=[day.pk])).status_code == 429
        # The 1-hour chart the page polls is light: never refused.
        assert client.get(reverse("pipeline_lag_chart", args=[day.pk]), {"range": "1h"}).status_code == 200
        assert erin_client.get(reverse("pipeline_lag_chart", args=[day.pk]), {"range": "24h"}).status_code == 200
    assert client.get(reverse("pipeline_lag_chart", args=[day.pk]), {"range": "24h"}).status_code == 200


def test_the_global_limit_refuses_a_third_user_while_two_run(client, vera_logged_in, day, settings):
    assert settings.HEAVY_GLOBAL == 2
    with heavy.acquire(user_id="x1"), heavy.acquire(user_id="x2"):
        response = client.get(reverse("pipeline_chart_json", args=[day.pk]), {"range": "24h"})
        assert response.status_code == 429 and "OFFSETWATCH_HEAVY_GLOBAL" in response.content.decode()
    assert client.get(reverse("pipeline_chart_json", args=[day.pk]), {"range": "24h"}).status_code == 200


def test_a_429_under_the_api_is_json():
    from django.test import RequestFactory

    response = heavy.busy_response(RequestFactory().get("/api/v1/pipelines/1/lag"), heavy.Busy("busy now"))
    assert response.status_code == 429 and response["Retry-After"] == "5"
    assert response["Content-Type"] == "application/json" and response.content == b'{"error": "busy now"}'


def test_the_slot_is_released_after_an_exception(client, vera_logged_in, day, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("the database went away mid-chart")

    monkeypatch.setattr(charts, "pipeline_chart", broken)
    with pytest.raises(RuntimeError, match="mid-chart"):
        client.get(reverse("pipeline_lag_chart", args=[day.pk]), {"range": "24h"})
    with pytest.raises(RuntimeError, match="mid-chart"):
        client.get(reverse("pipeline_chart_csv", args=[day.pk]), {"range": "24h"})
    monkeypatch.undo()
    assert client.get(reverse("pipeline_lag_chart", args=[day.pk]), {"range": "24h"}).status_code == 200


def test_a_streamed_export_holds_its_slot_until_it_is_read_or_closed(client, vera_logged_in, day):
    response = client.get(reverse("pipeline_chart_csv", args=[day.pk]), custom(0, 0))
    assert response.status_code == 200
    assert client.get(reverse("pipeline_chart_json", args=[day.pk]), {"range": "24h"}).status_code == 429
    assert b"".join(response.streaming_content).count(b"\n") > 145  # read to the end: the slot is back
    assert client.get(reverse("pipeline_chart_json", args=[day.pk]), {"range": "24h"}).status_code == 200
    unread = client.get(reverse("pipeline_batches_csv", args=[day.pk]))
    # The client went away before reading: the server closes the response (without closing the
    # test's database connection, as the test client does).
    request_finished.disconnect(close_old_connections)
    try:
        unread.close()
    finally:
        request_finished.connect(close_old_connections)
    assert client.get(reverse("pipeline_chart_json", args=[day.pk]), {"range": "6h"}).status_code == 200


def test_a_killed_holders_slot_expires(settings):
    settings.HEAVY_SLOT_TTL_S = 1.0
    heavy.acquire(user_id="killed")  # never released: its worker died
    with pytest.raises(heavy.Busy):
        heavy.acquire(user_id="killed")
    time.sleep(1.1)
    heavy.acquire(user_id="killed").release()


def test_without_redis_charts_are_served_without_cache_or_limit(client, vera_logged_in, day, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    slot = heavy.acquire(user_id=vera_logged_in.pk)
    assert slot.token is None
    url = reverse("pipeline_lag_chart", args=[day.pk])
    assert client.get(url, {"range": "24h"}).status_code == 200
    assert client.get(url, {"range": "24h"}).status_code == 200


# --- background exports -----------------------------------------------------------------------------


def test_a_fourth_background_export_is_a_429_until_one_finishes(client, vera_logged_in, day, django_capture_on_commit_callbacks):
    url = reverse("export_job_new", args=[day.pk])
    with django_capture_on_commit_callbacks(execute=False):
        for _ in range(3):
            assert client.post(url, {"export": "batches_csv", "range": "all"}).status_code == 302
        refused = client.post(url, {"export": "chart_csv", "range": "24h"})
    assert refused.status_code == 429 and refused["Retry-After"] == "60"
    assert "OFFSETWATCH_EXPORT_JOBS_PER_USER=3" in refused.content.decode()
    assert ExportJob.objects.filter(user=vera_logged_in).count() == 3
    ExportJob.objects.filter(pk=ExportJob.objects.filter(user=vera_logged_in).first().pk).update(status=ExportJob.Status.DONE)
    with django_capture_on_commit_callbacks(execute=False):
        assert client.post(url, {"export": "chart_csv", "range": "24h"}).status_code == 302


def test_a_heavy_computation_runs_niced_in_its_own_thread_on_the_requests_connection(day, settings):
    import os
    import threading

    settings.HEAVY_NICE = 10

    def compute():
        return (threading.get_ident(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                LagSample.objects.filter(pipeline=day).count())  # the test's uncommitted rows

    ident, nice, samples = heavy.at_low_priority(compute)
    assert ident != threading.get_ident() and nice >= 10 and samples == 145
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < 10  # the caller is not reniced
    with pytest.raises(ZeroDivisionError):
        heavy.at_low_priority(lambda: 1 / 0)
    assert LagSample.objects.filter(pipeline=day).count() == 145  # the connection is still the caller's


def test_a_range_at_the_end_of_the_calendar_is_drawn_as_asked_not_widened_past_it(client, vera_logged_in, day):
    # Widened to whole hours, 9999-12-31T23:30 would end in year 10000.
    response = client.get(reverse("pipeline_lag_chart", args=[day.pk]),
                          {"from": "9999-12-02T00:00+00:00", "to": "9999-12-31T23:30+00:00"})
    assert response.status_code == 200
    # The latest instant accepted is 9999-12-30T23:59:59.999Z (a day inside Python's limits, so it
    # can be shown in any time zone: dashboard/params.py); widened to its whole step it still ends
    # in year 9999.
    assert "to 9999-12-31 00:00" in response.json()["layout"]["title"]["text"]
