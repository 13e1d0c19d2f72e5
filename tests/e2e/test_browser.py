"""The on-call path in a real browser: log in, find the worst pipeline, open it, read its
out-of-range warning, change the chart's time range; pages at a phone's width."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.monitoring.services import watermarks_record
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import Watermarks
from tests.actors import actor, passphrase
from tests.e2e.conftest import log_in, wait_for_chart
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread must see the rows


@pytest.fixture
def incident_data(unique_name):
    """Three pipelines; one lost data to retention (ERR). Four hours of watermark samples."""
    now = timezone.now()
    start = now - timedelta(hours=4)
    batch_ms = int(start.timestamp() * 1000)
    lost = offline_pipeline(unique_name, topic=unique_name("payments"), partitions={0: (50, 100), 1: (0, 80)},
                            batches=[(batch_ms, {0: 10, 1: 70})], sampled_at=start)
    healthy = [
        offline_pipeline(unique_name, topic=unique_name("orders"), partitions={0: (0, 40)},
                         batches=[(batch_ms, {0: 40})], sampled_at=start, store=lost.store),
        offline_pipeline(unique_name, topic=unique_name("clicks"), partitions={0: (0, 9)},
                         batches=[(batch_ms, {0: 5})], sampled_at=start, store=lost.store),
    ]
    # Samples every 20 minutes: the lag of `lost` grows as producers keep writing.
    for i in range(1, 13):
        at = start + timedelta(minutes=20 * i)
        watermarks_record(cluster=lost.store.cluster, sampled_at=at, result=WatermarkResult(by_topic={
            lost.topic: {0: Watermarks(0, 50, 100 + 10 * i), 1: Watermarks(1, 0, 80 + 5 * i)},
            healthy[0].topic: {0: Watermarks(0, 0, 40)},
            healthy[1].topic: {0: Watermarks(0, 0, 9)},
        }))
    actor("vera", can_log_in=True)
    return lost, healthy


def chart_points(pg) -> int:
    wait_for_chart(pg)
    return pg.evaluate("document.getElementById('lag-chart').data[0].x.length")


def test_find_the_worst_pipeline_open_it_and_change_the_range(page, screenshot, incident_data):
    lost, healthy = incident_data
    log_in(page, "vera", passphrase("vera"))
    page.goto("/")
    first = page.locator("#pipelines tbody tr").first
    assert first.get_attribute("data-status") == "ERR"
    assert lost.topic in first.inner_text()
    assert page.locator("#open-incidents").inner_text().count(lost.topic) == 1
    screenshot(page, "overview")

    first.locator("a").first.click()
    page.wait_for_url(f"**/pipelines/{lost.pk}/")
    status = page.locator("#pipeline-status").inner_text()
    assert "partition 0: 40 messages were deleted by retention before being processed" in status
    partitions = page.locator("#partitions").inner_text()
    assert "low out-of-range: 40 messages deleted before being processed" in partitions
    in_last_hour = chart_points(page)
    assert "last 1 h" in page.locator("#lag-chart .gtitle").text_content()
    screenshot(page, "pipeline")

    page.click("nav.ranges >> text=6h")
    page.wait_for_url("**range=6h")
    page.wait_for_selector("#lag-chart .gtitle:has-text('last 6 h')")
    assert chart_points(page) > in_last_hour  # four hours of samples against the last one
    screenshot(page, "pipeline-6h")

    # Export the chart shown (6 h) as PNG and its data as CSV, as an incident report would.
    with page.expect_download() as png:
        page.click("#chart-exports >> text=PNG")
    png_path = png.value.path()
    data = open(png_path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert lost.topic in png.value.suggested_filename and png.value.suggested_filename.endswith(".png")
    with page.expect_download() as csv_download:
        page.click("#chart-exports >> text=CSV")
    text = open(csv_download.value.path(), encoding="utf-8").read()
    assert lost.topic in text and "UTC" in text
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    # A header, then every stored sample of the range: the export keeps full resolution, where a
    # 6 h chart draws the per-minute roll-ups (and the newest evaluation as its last point).
    assert len(samples) - 1 == lost.lag_samples.count() == 13


def test_pages_fit_a_phone(browser, live_server, screenshot, incident_data):
    lost, _ = incident_data
    context = browser.new_context(viewport={"width": 390, "height": 844}, base_url=live_server.url)
    page = context.new_page()
    try:
        log_in(page, "vera", passphrase("vera"))
        for url, name in (("/", "overview-phone"), (f"/pipelines/{lost.pk}/", "pipeline-phone"),
                          ("/collectors/", "collectors-phone")):
            page.goto(url)
            # Wide tables scroll inside their own box; the page itself never scrolls sideways.
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, url
            screenshot(page, name)
    finally:
        context.close()
