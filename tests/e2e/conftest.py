"""A real headless Chromium (Debian's, driven by Playwright) against the live Django server.

One browser per test session; a fresh context (cookies) per test. Screenshots of the pages go
to OFFSETWATCH_TEST_ARTIFACTS (default .run/test-artifacts/screenshots) for people to look at.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.paths import ROOT

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("OFFSETWATCH_TEST_ARTIFACTS", ROOT / ".run" / "test-artifacts"))


def chromium_path() -> str:
    path = os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("Chromium not found: scripts/setup.sh --test installs Debian's chromium; or set BROWSER_PATH")
    return path


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread, which Django takes for
    # async code and refuses ORM calls; the tests' ORM calls are plain synchronous ones.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            yield b
            b.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True, base_url=live_server.url)
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()


@pytest.fixture
def screenshot():
    """Save a full-page screenshot as a test artifact; returns its path."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)

    def take(pg, name: str) -> Path:
        path = folder / f"{name}.png"
        pg.screenshot(path=str(path), full_page=True)
        return path
    return take


def wait_for_chart(pg) -> None:
    """Until plotly has drawn #lag-chart. A selector, not wait_for_function: Playwright evaluates
    a waited-for function with eval, which the pages' Content-Security-Policy refuses."""
    pg.wait_for_selector("#lag-chart.js-plotly-plot svg.main-svg")


def log_in(pg, username: str, password: str) -> None:
    pg.goto("/login/")
    pg.fill("#id_username", username)
    pg.fill("#id_password", password)
    pg.click("button[type=submit]")
    pg.wait_for_url(lambda url: "/login/" not in url)
