"""A pipeline of many partitions in a real browser (issue #16): the worst partition first, "show
more" re-renders the table in place and becomes the page's address, which a reload keeps."""
from __future__ import annotations

import pytest

from tests.actors import actor, passphrase
from tests.e2e.conftest import log_in
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread must see the rows
T0 = 1_700_000_000_000


def test_show_more_partitions_in_place(page, screenshot, unique_name):
    marks = {p: (40 if p == 100 else 0, 1000 + p) for p in range(120)}  # 100: out of range (ERR)
    pipeline = offline_pipeline(unique_name, partitions=marks, batches=[(T0, {p: 10 for p in range(120)})])
    actor("vera", can_log_in=True)
    log_in(page, "vera", passphrase("vera"))
    page.goto(f"/pipelines/{pipeline.pk}/")
    rows = page.locator("#partitions tbody tr")
    assert rows.count() == 50
    assert rows.first.get_attribute("data-partition") == "100" and rows.first.get_attribute("data-status") == "ERR"
    page.evaluate("window.__not_reloaded = true")  # gone if the click reloaded the page

    page.click("#partitions-more")
    page.wait_for_selector("#partitions tbody tr:nth-child(100)")
    assert rows.count() == 100
    assert "shown=100" in page.url
    assert page.evaluate("window.__not_reloaded === true")
    assert "100 of 120 partitions shown" in page.locator("#partitions-shown").inner_text()
    screenshot(page, "pipeline-partitions-more")

    page.reload()
    assert page.locator("#partitions tbody tr").count() == 100
