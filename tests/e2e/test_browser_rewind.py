"""Rewind clicks in a real browser: an operator requests a rewind to a batch from its row, sees
the preview, submits; another person approves it on the rewind's page."""
from __future__ import annotations

import pytest

from dashboard.models import RewindRequest
from tests.actors import actor, passphrase
from tests.e2e.conftest import log_in
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db(transaction=True)
T0 = 1_700_000_000_000


def test_request_from_a_batch_row_then_another_person_approves(browser, live_server, screenshot, unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 100), 1: (0, 90)},
                         batches=[(T0, {0: 10, 1: 10}), (T0 + 10_000, {0: 40, 1: 30}), (T0 + 20_000, {0: 80, 1: 70})])
    actor("olga", can_log_in=True)
    actor("amir", can_log_in=True)

    operator = browser.new_context(base_url=live_server.url).new_page()
    log_in(operator, "olga", passphrase("olga"))
    operator.goto(f"/pipelines/{p.pk}/")
    operator.click(f'tr[data-batch-ms="{T0 + 10_000}"] a.rewind-here')
    operator.fill("textarea[name=reason]", "bad deploy 14:02 wrote garbage to the ledger")
    operator.click("button[value=preview]")
    rows = operator.locator("#rewind-preview tbody tr")
    assert rows.count() == 2
    assert "40" in rows.nth(0).inner_text() and "40 re-read" in rows.nth(0).inner_text()  # 80 -> 40
    screenshot(operator, "rewind-request-preview")
    operator.click("#submit-request")
    operator.wait_for_url("**/rewinds/*/")
    assert operator.locator("#rewind-status").inner_text() == "requested"
    assert "Another person with the approver role must approve" in operator.content()
    assert operator.locator("#approve").count() == 0  # the requester cannot approve
    rewind = RewindRequest.objects.get(pipeline=p)

    approver = browser.new_context(base_url=live_server.url).new_page()
    log_in(approver, "amir", passphrase("amir"))
    approver.goto("/rewinds/")
    approver.click(f'tr[data-rewind="{rewind.pk}"] a')
    assert "bad deploy 14:02" in approver.locator("#rewind-reason").inner_text()
    assert approver.locator("#preview-current tbody tr").count() == 2  # the plan recomputed now
    approver.fill("textarea[name=comment]", "checked with the ledger team")
    approver.click("#approve")
    approver.wait_for_selector("#rewind-status:has-text('approved')")
    timeline = approver.locator("#rewind-timeline").inner_text()
    assert "rewind.requested" in timeline and "rewind.approved" in timeline and "amir" in timeline
    screenshot(approver, "rewind-approved")
    rewind.refresh_from_db()
    assert rewind.status == "approved" and rewind.decided_by.username == "amir"
    assert rewind.target_offsets == {"0": 40, "1": 30}
