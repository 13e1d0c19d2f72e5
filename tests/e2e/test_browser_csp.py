"""The Content-Security-Policy in a real browser (issue #12 observation 7): every page runs with
scripts from the site's own files only, Chromium reports no violation and no console error,
and what used inline script still works: the chart draws (plotly.js needs no eval), the chart's
selects submit their form, live regions re-render from their partials and redraw the chart."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from dashboard.rewinds.services import rewind_request
from tests.actors import actor, passphrase
from tests.e2e.conftest import log_in, wait_for_chart
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread must see the rows
T0 = 1_700_000_000_000

# Runs in every page before its own scripts (injected by the browser's debugging protocol, not
# subject to the page's policy): records each violation the browser reports.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture
def watched(browser, live_server):
    """A page whose policy violations and console errors are collected, across navigations."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []

    def on_console(msg) -> None:
        where = msg.location.get("url", "")
        if msg.type == "error" and not where.endswith("/favicon.ico"):  # the site has no icon: not ours to judge
            problems.append(f"console {msg.type}: {msg.text} ({where})")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))

    def check(where: str) -> None:
        problems.extend(f"{where}: violation {v}" for v in page.evaluate("window.__violations || []"))
        assert problems == [], problems

    yield page, check
    context.close()


@pytest.fixture
def world(unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 100), 1: (0, 90)},
                                batches=[(T0, {0: 10, 1: 10}), (T0 + 10_000, {0: 40, 1: 30}), (T0 + 20_000, {0: 80, 1: 70})])
    olga = actor("olga", can_log_in=True)
    actor("amir", can_log_in=True)
    rewind = rewind_request(pipeline=pipeline, user=olga, kind="batch", spec={"batch_time_ms": T0 + 10_000},
                            reason="bad deploy wrote garbage")
    return pipeline, rewind


def chart_drawn(page) -> int:
    wait_for_chart(page)  # (page.evaluate goes through the debugger: the policy allows it)
    # The lag series (markers of events sit on the second axis).
    return page.evaluate("document.getElementById('lag-chart').data.filter(t => t.yaxis !== 'y2').length")


def test_pages_run_under_the_policy_with_no_violation_and_their_scripts_work(watched, world, screenshot):
    page, check = watched
    pipeline, rewind = world
    page.goto("/login/")
    check("login")
    log_in(page, "olga", passphrase("olga"))

    # Overview: its table re-renders from the partial (the poll was an inline script).
    with page.expect_response(lambda r: "/live/overview/" in r.url and r.status == 200, timeout=12_000):
        page.goto("/")
    assert pipeline.topic in page.locator("#overview-live").inner_text()
    check("overview")

    # The pipeline page: plotly draws the chart from its JSON; a select submits its form.
    page.goto(f"/pipelines/{pipeline.pk}/")
    assert chart_drawn(page) == 1  # the total
    assert page.evaluate("getComputedStyle(document.getElementById('lag-chart')).minHeight") == "320px"
    check("pipeline")
    page.select_option("select[name=kind]", "partitions")
    page.wait_for_url("**kind=partitions**")
    assert chart_drawn(page) == 2  # one line per partition
    # The live region re-renders (every 5 s) and the chart is fetched again after it.
    with page.expect_response(lambda r: "/live/" in r.url and r.status == 200, timeout=12_000):
        pass
    with page.expect_response(lambda r: "lag-chart.json" in r.url and r.status == 200, timeout=12_000):
        pass
    page.select_option("select[name=unit]", "seconds")
    page.wait_for_url("**unit=seconds**")
    chart_drawn(page)
    screenshot(page, "pipeline-under-csp")
    check("pipeline after its selects")

    # The rewind pages, the audit log, collectors, exports.
    for url, landmark in ((f"/pipelines/{pipeline.pk}/rewind/", "textarea[name=reason]"),
                          ("/rewinds/", f'tr[data-rewind="{rewind.pk}"]'),
                          (f"/rewinds/{rewind.pk}/", "#rewind-status"),
                          ("/audit/", "#audit-filters"), ("/collectors/", "h1"), ("/exports/", "#export-jobs")):
        page.goto(url)
        page.wait_for_selector(landmark)
        check(url)
    # The audit page's styles came from the stylesheet too.
    page.goto("/audit/")
    assert page.evaluate("getComputedStyle(document.querySelector('#audit-filters input[name=pipeline]')).width") == "96px"

    # A rewind preview (a form post answering a page) under the policy.
    page.goto(f"/pipelines/{pipeline.pk}/")
    page.click(f'tr[data-batch-ms="{T0 + 10_000}"] a.rewind-here')
    page.fill("textarea[name=reason]", "checking the preview under the policy")
    page.click("button[value=preview]")
    page.wait_for_selector("#rewind-preview")
    check("rewind preview")


def test_the_admin_and_the_lockout_page_run_under_the_policy(watched, db):
    page, check = watched
    User.objects.create_superuser("root", password="root's long passphrase")
    page.goto("/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "root's long passphrase")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    for url in ("/admin/", "/admin/axes/accessattempt/", "/admin/auth/user/", "/admin/auth/user/add/",
                "/admin/dashboard/store/add/", "/admin/dashboard/pipeline/", "/admin/auth/group/add/"):
        assert page.goto(url).status == 200, url
        check(url)

    other = page.context.browser.new_context(base_url=page.url.split("/admin/")[0])
    try:
        guess = other.new_page()
        for _ in range(5):
            guess.goto("/login/")
            guess.fill("#id_username", "root")
            guess.fill("#id_password", "a wrong guess")
            guess.click("button[type=submit]")
        assert "Login locked" in guess.locator("h1").inner_text()
        assert guess.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex"  # styled
    finally:
        other.close()
