"""The system tests' browser: Debian's chromium through Playwright, one page per test that
records every Content-Security-Policy violation and console error (tests fail on any CSP
violation at teardown; those that expect no console error say so: test_run_page_browser's
no_errors)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from django.conf import settings
from django.db import connections

T = TypeVar("T")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(settings.DATA_DIR) / "test-artifacts"
PHONE = {"width": 390, "height": 844}
# Every securitypolicyviolation the document reports, recorded before the page's own scripts run.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(event.violatedDirective + " " + event.blockedURI);
});
"""


def in_thread(call: Callable[[], T], timeout: float = 30.0) -> T:
    """``call()`` in a thread of its own, its result (or exception) returned here. Playwright's
    sync API keeps an event loop in the test's thread, where async_to_sync refuses to run: a
    state change made there (lifecycle.complete_if_done, stop) is stored, but its push to the
    page fails with a warning, and the page hears of it only from its next periodic tables (up to
    15 s later; web/consumers.IDLE_TABLES_SECONDS), past a loaded machine's share of a 30 s wait.
    The thread's database connections are closed after."""

    def target() -> T:
        try:
            return call()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(target).result(timeout=timeout)


@pytest.fixture
def page(monkeypatch):
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: scripts/test.sh installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls here are plain
    # sequential ones, so Django's async-safety guard can stand down.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(30_000)
        page.add_init_script(RECORD_VIOLATIONS)
        page.console_problems = []
        page.on(
            "console",
            lambda message: (
                page.console_problems.append(message.text)
                if message.type == "error" or "Content Security Policy" in message.text
                else None
            ),
        )
        page.on("pageerror", lambda error: page.console_problems.append(str(error)))
        try:
            yield page
            # After the server has gone the page's socket fails to reconnect (a console error):
            # the tests check for errors before that (no_errors); CSP violations never pass.
            assert not [text for text in page.console_problems if "Content Security Policy" in text]
            assert page.evaluate("window.__violations") == []
        finally:
            browser.close()
            connections.close_all()
