"""Exports: chart images (real kaleido + Chromium), chart data, the streamed per-batch history,
CSV injection, parameter errors, and background export jobs run by their service."""
from __future__ import annotations

import csv
import html
import io
import json
import re
import struct
import xml.etree.ElementTree as ET
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.exports.formats import ImageExportFailed, chromium_path
from dashboard.exports.services import export_job_create, export_job_run, export_jobs_prune
from dashboard.models import Batch, ExportJob
from offsetwatch.lib.streaming import csv_cell
from tests.factories import pipeline_row, samples_bulk

pytestmark = pytest.mark.django_db

HOSTILE_TOPIC = '=HYPERLINK("http://evil.example","x")'
HOSTILE_GROUP = '+cmd|\' /C calc\'!A0,"quoted"\nnext line'


@pytest.fixture
def charted():
    """A pipeline with an hour of samples (one a minute, 3 partitions) ending now."""
    p = pipeline_row("charted", topic="orders", group="billing", store_name="local-hbase")
    samples_bulk(p, start=timezone.now() - timedelta(minutes=59), step_s=60, count=60,
                 highs=lambda i: [100 * i, 50 * i, 10 * i], committed=lambda i: [max(0, 100 * i - 30), 50 * i, 0])
    return p


def batches(pipeline, count: int, *, start_ms: int = 1_700_000_000_000, partitions: int = 4) -> list[Batch]:
    rows = [Batch(pipeline=pipeline, batch_time_ms=start_ms + i * 5000, batch_id=i, committed=i % 10 != 9,
                  records=None if i == 0 else partitions * 7,
                  offsets={str(p): 7 * i + p for p in range(partitions) if not (p == 3 and i < 10)})
            for i in range(count)]
    Batch.objects.bulk_create(rows, batch_size=2000)
    return rows


def csv_parts(content: bytes) -> tuple[list[list[str]], list[str], list[list[str]]]:
    """(the `#` preamble rows, the header, the data rows)."""
    rows = list(csv.reader(io.StringIO(content.decode())))
    preamble = [r for r in rows if r and r[0].startswith("#")]
    rest = rows[len(preamble):]
    return preamble, rest[0], rest[1:]


# --- chart images ---------------------------------------------------------------------------------


def test_chart_png_is_a_png_of_the_asked_size_served_as_a_download(client, vera_logged_in, charted):
    response = client.get(reverse("pipeline_chart_png", args=[charted.pk]),
                          {"range": "1h", "kind": "partitions", "width": "900", "height": "450"})
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    png = response.content
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (900, 450)
    assert response["Content-Disposition"] == (
        'attachment; filename="offsetwatch_orders_billing_local-hbase_last-1h_partitions-messages.png"')


def test_chart_svg_parses_and_its_title_names_pipeline_range_and_time_zone(client, vera_logged_in, charted):
    response = client.get(reverse("pipeline_chart_svg", args=[charted.pk]), {"range": "1h", "unit": "seconds"})
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
    root = ET.fromstring(response.content)
    assert root.tag.endswith("svg")
    text = " ".join(root.itertext())
    assert "Lag in seconds, most-behind partition: orders / billing (store local-hbase), last 1 h, UTC" in text
    assert response["Content-Disposition"].endswith('_last-1h_total-seconds.svg"')


# --- chart data -----------------------------------------------------------------------------------


def test_chart_csv_has_every_sample_and_says_what_it_is(client, vera_logged_in, charted):
    response = client.get(reverse("pipeline_chart_csv", args=[charted.pk]), {"range": "1h", "kind": "partitions"})
    assert response.status_code == 200 and response.streaming
    preamble, header, rows = csv_parts(b"".join(response.streaming_content))
    meta = {r[0]: r[1] for r in preamble}
    assert meta["# topic"] == "orders" and meta["# group"] == "billing" and meta["# store"] == "local-hbase"
    assert meta["# range"] == "last 1 h" and meta["# time zone"] == "UTC"
    assert header == ["time", "epoch_ms", "partition 0 (messages)", "partition 1 (messages)", "partition 2 (messages)"]
    assert len(rows) == 60  # not downsampled
    assert [r[2:] for r in rows[:2]] == [["0", "0", "0"], ["30", "0", "10"]]
    assert rows[-1][2:] == ["30", "0", "590"]
    assert rows[0][0].endswith("+00:00") and int(rows[1][1]) - int(rows[0][1]) == 60_000


def test_chart_csv_and_json_downsample_when_asked(client, vera_logged_in, charted):
    response = client.get(reverse("pipeline_chart_csv", args=[charted.pk]), {"range": "1h", "max_points": "10"})
    _, _, rows = csv_parts(b"".join(response.streaming_content))
    assert 2 <= len(rows) <= 10
    doc = client.get(reverse("pipeline_chart_json", args=[charted.pk]),
                     {"range": "1h", "kind": "partitions", "max_points": "12"}).json()
    assert doc["downsampled_to"] == 12
    assert all(len(s["points"]) <= 12 for s in doc["series"])


def test_chart_json_names_pipeline_range_time_zone_and_carries_markers(client, vera_logged_in, charted):
    from dashboard.models import Incident

    Incident.objects.create(pipeline=charted, opened_at=timezone.now() - timedelta(minutes=10), worst_status=1,
                            reasons=["lag grew"])
    response = client.get(reverse("pipeline_chart_json", args=[charted.pk]), {"range": "1h", "kind": "partitions"})
    assert response["Content-Disposition"].endswith('_last-1h_partitions-messages.json"')
    doc = json.loads(response.content)
    assert doc["pipeline"] == {"id": charted.pk, "topic": "orders", "group": "billing", "store": "local-hbase",
                               "cluster": "charted-cluster"}
    assert doc["range"]["label"] == "last 1 h" and doc["time_zone"] == "UTC" and doc["downsampled_to"] is None
    assert [s["name"] for s in doc["series"]] == ["partition 0", "partition 1", "partition 2"]
    assert len(doc["series"][2]["points"]) == 60 and doc["series"][2]["points"][-1][1] == 590
    assert [m["kind"] for m in doc["markers"]] == ["incident opened"] and "lag grew" in doc["markers"][0]["label"]


# --- per-batch history ----------------------------------------------------------------------------


def test_batches_csv_streams_every_batch_with_one_column_per_partition(client, vera_logged_in, settings):
    settings.TIME_ZONE = "Europe/Paris"
    p = pipeline_row("hist")
    made = batches(p, 3000)
    response = client.get(reverse("pipeline_batches_csv", args=[p.pk]))
    assert response.streaming is True
    preamble, header, rows = csv_parts(b"".join(response.streaming_content))
    assert header == ["batch_time", "batch_time_ms", "batch_id", "committed", "records", "p0", "p1", "p2", "p3"]
    assert len(rows) == 3000
    assert rows[0] == ["2023-11-14T23:13:20.000+01:00", "1700000000000", "0", "true", "", "0", "1", "2", ""]
    for row, batch in zip(rows, made):  # every value, oldest first
        assert int(row[1]) == batch.batch_time_ms and int(row[2]) == batch.batch_id
        assert row[3] == ("true" if batch.committed else "false")
        assert row[5:] == [str(batch.offsets[str(q)]) if str(q) in batch.offsets else "" for q in range(4)]
    assert {r[0]: r[1] for r in preamble}["# range"] == "all retained history"
    assert response["Content-Disposition"].endswith('_all_batches.csv"')


def test_batches_csv_of_a_range_has_only_that_range(client, vera_logged_in):
    p = pipeline_row("hist-range")
    batches(p, 100)  # one every 5 s from 2023-11-14T22:13:20Z
    response = client.get(reverse("pipeline_batches_csv", args=[p.pk]),
                          {"from": "2023-11-14T22:14:00Z", "to": "2023-11-14T22:14:20Z"})
    _, _, rows = csv_parts(b"".join(response.streaming_content))
    assert [int(r[2]) for r in rows] == [8, 9, 10, 11, 12]


def test_hostile_names_are_neutralised_in_every_cell_and_file_name(client, vera_logged_in, charted):
    p = pipeline_row("hostile", topic=HOSTILE_TOPIC, group=HOSTILE_GROUP, store_name="@store")
    batches(p, 3)
    for url in (reverse("pipeline_batches_csv", args=[p.pk]), reverse("pipeline_chart_csv", args=[p.pk])):
        response = client.get(url)
        assert response.status_code == 200
        rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
        cells = [c for r in rows for c in r]
        assert not [c for c in cells if c[:1] in ("=", "+", "-", "@")], "a cell a spreadsheet would run"
        assert "'" + HOSTILE_TOPIC in cells and "'" + HOSTILE_GROUP in cells and "'@store" in cells
        disposition = response["Content-Disposition"]
        assert re.fullmatch(r'attachment; filename="[A-Za-z0-9._-]+"', disposition), disposition


def test_a_negative_lag_stays_a_number_not_a_quoted_formula():
    assert csv_cell(-5) == -5 and csv_cell("-5") == "'-5" and csv_cell(None) == ""


# --- parameters -----------------------------------------------------------------------------------


@pytest.mark.parametrize("url_name,query,message", [
    ("pipeline_chart_png", {"range": "2y"}, "parameter 'range': '2y' is not one of 15m, 1h, 6h, 24h, 7d, 30d"),
    ("pipeline_chart_svg", {"kind": "bars"}, "parameter 'kind': 'bars' is not one of total, partitions"),
    ("pipeline_chart_csv", {"unit": "bytes"}, "parameter 'unit': 'bytes' is not one of messages, seconds"),
    ("pipeline_chart_json", {"from": "yesterday"}, "parameter 'from': 'yesterday' is not a date-time"),
    ("pipeline_lag_chart", {"from": "2026-11-02T00:00", "to": "2026-11-01T00:00"}, "parameter 'from': '2026-11-02T00:00' must be before 'to'"),
    ("pipeline_chart_png", {"width": "99999"}, "parameter 'width': '99999' is not a whole number from 300 to 2400"),
    ("pipeline_chart_csv", {"max_points": "-3"}, "parameter 'max_points': '-3' is not a whole number"),
    ("pipeline_batches_csv", {"range": "all", "from": "2026-11-01"}, "parameter 'range': 'all' cannot be combined"),
    ("pipeline_batches_csv", {"to": "2026-11-01"}, "parameter 'from': '' is required with 'to'"),
    ("pipeline", {"unit": "<script>"}, "parameter 'unit': '<script>' is not one of messages, seconds"),
])
def test_bad_parameters_are_400s_naming_the_parameter_and_value(client, vera_logged_in, charted, url_name, query, message):
    response = client.get(reverse(url_name, args=[charted.pk]), query)
    assert response.status_code == 400
    if url_name == "pipeline":  # a page: an HTML page naming the parameter, the value escaped
        assert response["Content-Type"].startswith("text/html")
        assert html.escape(message) in response.content.decode()
    else:  # a file: plain text a script can print
        assert response["Content-Type"].startswith("text/plain")
        assert response.content.decode().startswith(message)


def test_every_export_needs_a_login(client, charted):
    for name in ("pipeline_chart_png", "pipeline_chart_svg", "pipeline_chart_csv", "pipeline_chart_json",
                 "pipeline_batches_csv", "pipeline_lag_chart"):
        assert client.get(reverse(name, args=[charted.pk])).status_code == 302
    assert client.get(reverse("export_jobs")).status_code == 302
    assert client.post(reverse("export_job_new", args=[charted.pk]), {"export": "batches_csv"}).status_code == 302


def test_the_pipeline_page_has_chart_selectors_custom_range_and_export_links(client, vera_logged_in, charted):
    html = client.get(reverse("pipeline", args=[charted.pk]), {"kind": "partitions", "unit": "seconds",
                                                               "range": "6h"}).content.decode()
    assert '<option value="partitions" selected>per partition</option>' in html
    assert '<option value="seconds" selected>seconds</option>' in html
    assert 'type="datetime-local" name="from"' in html
    query = "kind=partitions&amp;unit=seconds&amp;range=6h"
    for ext in ("png", "svg", "csv", "json"):
        assert f'href="/pipelines/{charted.pk}/chart.{ext}?{query}"' in html
    assert f'href="/pipelines/{charted.pk}/batches.csv?range=6h"' in html
    assert f'data-chart-url="/pipelines/{charted.pk}/lag-chart.json?{query}"' in html


# --- background exports ---------------------------------------------------------------------------


def test_a_batch_export_over_the_inline_limit_offers_a_background_job_that_is_queued(
    client, vera_logged_in, settings, django_capture_on_commit_callbacks
):
    settings.EXPORT_INLINE_MAX_ROWS = 100
    p = pipeline_row("big")
    batches(p, 150)
    response = client.get(reverse("pipeline_batches_csv", args=[p.pk]), {"range": "all"})
    assert response.status_code == 413
    assert "150</strong> rows" in response.content.decode() and 'name="export" value="batches_csv"' in response.content.decode()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("export_job_new", args=[p.pk]), {"export": "batches_csv", "range": "all"})
    assert response.status_code == 302 and response["Location"] == reverse("export_jobs")
    job = ExportJob.objects.get(pipeline=p)
    assert (job.user, job.kind, job.status, job.params["preset"], job.params["since"]) == (
        vera_logged_in, "batches_csv", "queued", "all", None)
    assert len(callbacks) == 1  # the task is sent once the row is committed


def test_the_export_service_writes_the_file_with_progress_and_the_owner_downloads_it(client, vera_logged_in, erin, settings, tmp_path):
    settings.EXPORT_DIR = tmp_path / "exports"
    p = pipeline_row("bg", topic="orders", group="billing")
    batches(p, 2500)
    time_range = exports_range_all()
    job = export_job_create(user=vera_logged_in, pipeline=p, kind=ExportJob.Kind.BATCHES_CSV, time_range=time_range)

    done = export_job_run(job_id=job.pk)
    assert done.status == "done" and done.error == ""
    assert done.rows_done == done.rows_total == 2500 and done.percent == 100
    assert done.file_name == "offsetwatch_orders_billing_bg-store_all_batches.csv"
    assert export_job_run(job_id=job.pk) is None  # claimed once: a second run does nothing

    written = Path(done.file_path).read_bytes()
    inline = b"".join(client.get(reverse("pipeline_batches_csv", args=[p.pk]), {"range": "all"}).streaming_content)
    assert csv_parts(written)[1:] == csv_parts(inline)[1:]  # same header and rows as the inline export

    listing = client.get(reverse("export_jobs_live")).content.decode()
    assert f'data-job="{job.pk}"' in listing and "2,500 / 2,500 rows" in listing
    assert reverse("export_job_download", args=[job.pk]) in listing
    download = client.get(reverse("export_job_download", args=[job.pk]))
    assert download.status_code == 200 and b"".join(download.streaming_content) == written
    assert 'filename="offsetwatch_orders_billing_bg-store_all_batches.csv"' in download["Content-Disposition"]

    client.force_login(erin)
    assert client.get(reverse("export_job_download", args=[job.pk])).status_code == 404
    assert f'data-job="{job.pk}"' not in client.get(reverse("export_jobs_live")).content.decode()


def test_a_chart_export_job_writes_the_chart_rows(vera, settings, tmp_path, charted):
    from dashboard.params import TimeRange

    settings.EXPORT_DIR = tmp_path
    now = timezone.now()
    job = export_job_create(user=vera, pipeline=charted, kind=ExportJob.Kind.CHART_CSV,
                                     time_range=TimeRange(now - timedelta(hours=1), now, "1h"),
                                     chart_kind="partitions", chart_unit="messages")
    done = export_job_run(job_id=job.pk)
    assert done.status == "done" and done.rows_total == 60
    preamble, header, rows = csv_parts(Path(done.file_path).read_bytes())
    assert header[2:] == ["partition 0 (messages)", "partition 1 (messages)", "partition 2 (messages)"]
    assert rows[-1][2:] == ["30", "0", "590"]
    assert {r[0]: r[1] for r in preamble}["# Offset Watch export"].startswith("Lag in messages per partition: orders")


def test_a_failing_export_is_recorded_with_its_reason_and_leaves_no_file(vera, settings, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    settings.EXPORT_DIR = blocker / "exports"
    p = pipeline_row("fails")
    job = export_job_create(user=vera, pipeline=p, kind=ExportJob.Kind.BATCHES_CSV,
                                     time_range=exports_range_all())
    failed = export_job_run(job_id=job.pk)
    assert failed.status == "failed" and "NotADirectoryError" in failed.error and failed.finished_at
    assert failed.file_path == ""


def test_prune_removes_expired_exports_and_their_files_and_fails_orphaned_ones(vera, settings, tmp_path):
    settings.EXPORT_DIR = tmp_path
    p = pipeline_row("prune")
    batches(p, 5)
    job = export_job_create(user=vera, pipeline=p, kind=ExportJob.Kind.BATCHES_CSV,
                                     time_range=exports_range_all())
    done = export_job_run(job_id=job.pk)
    orphan = ExportJob.objects.create(user=vera, pipeline=p, kind="batches_csv", status="running",
                                      started_at=timezone.now() - timedelta(hours=3))
    later = timezone.now() + timedelta(seconds=settings.EXPORT_RETENTION_S + 60)
    assert export_jobs_prune(now=later) == 1  # the expired one
    assert not Path(done.file_path).exists() and not ExportJob.objects.filter(pk=done.pk).exists()
    orphan.refresh_from_db()  # its worker died: failed, and kept a retention period so its owner sees why
    assert orphan.status == "failed" and "worker stopped" in orphan.error


def exports_range_all():
    from dashboard.params import TimeRange

    return TimeRange(None, timezone.now(), "all")


def test_a_missing_chromium_is_named_before_kaleido_starts(settings):
    settings.CHROMIUM_PATH = "/nonexistent/chromium"
    with pytest.raises(ImageExportFailed, match="no Chromium at /nonexistent/chromium"):
        chromium_path()


def test_chart_data_over_the_inline_limit_is_refused_unless_downsampled(client, vera_logged_in, settings, charted):
    settings.EXPORT_INLINE_MAX_ROWS = 10
    url = reverse("pipeline_chart_json", args=[charted.pk])
    assert client.get(url, {"range": "1h"}).status_code == 413
    assert client.get(reverse("pipeline_chart_csv", args=[charted.pk]), {"range": "1h"}).status_code == 413
    assert client.get(url, {"range": "1h", "max_points": "8"}).status_code == 200
