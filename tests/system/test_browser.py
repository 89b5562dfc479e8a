"""A real browser (Debian's chromium, driven by Playwright) against a real coordinator:
log in, launch a cpu-demo campaign from the form, create a worker token, start a tiny worker
with the volunteer CLI, and watch its first verified reward appear on the chart without a
reload. Saves a screenshot of the dashboard under test-artifacts/.

scripts/test.sh installs chromium (apt) and the playwright package (the `dev` extra); Playwright
drives the system chromium (no `playwright install`, which would download browsers).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from swarm_app.campaigns.models import Campaign, RoundAggregate, RoundMetrics
from tests.servers import ROOT, asgi_server, stop, worker_process

pytestmark = pytest.mark.slow

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
ARTIFACTS = ROOT / "test-artifacts"
LIVE_BOUND_SECONDS = 5.0  # generous: the requirement is 2 s, measured in bench/dashboard.py


@pytest.fixture
def site(transactional_db, tmp_path: Path):
    """The coordinator (daphne), serving its static files itself also in production mode
    (where nginx would serve them), since the page loads plotly.js and its own scripts."""
    with asgi_server(tmp_path / "daphne.log", SERVE_STATIC="1") as base:
        yield base


@pytest.fixture
def page(monkeypatch):
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: scripts/test.sh installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls of this test are
    # plain sequential ones, so Django's async-safety guard can stand down.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(30_000)
        try:
            yield page
        finally:
            browser.close()
            # ORM calls made inside Playwright's sync API run in its context, with a connection
            # of their own: close it, or it would outlive the test database.
            connections.close_all()


def test_launch_from_the_browser_and_watch_a_worker_live(site, page, tiny_1m_dir, tmp_path):
    coordinator = site
    get_user_model().objects.create_user("organizer", password="pw-organizer-1", is_staff=True)

    # Log in; the login page sends us on to the form with the cpu-demo preset.
    page.goto(f"{coordinator}/accounts/login/?next=/campaigns/new/%3Fpreset%3Dcpu-demo")
    page.fill("#id_username", "organizer")
    page.fill("#id_password", "pw-organizer-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/campaigns/new/?preset=cpu-demo")

    # The cpu-demo preset, made small for a test: one tier, short rounds, no controls.
    page.fill("#id_name", "browser demo")
    page.uncheck("input[name=tiers][value=tiny-5m]")
    for field, value in {
        "group_size": "4",
        "questions_per_round": "4",
        "num_local": "2",
        "num_external": "2",
        "rounds": "3",
        "max_new_tokens": "8",
        "num_iterations": "1",
    }.items():
        page.fill(f"#id_{field}", value)
    page.uncheck("#id_controls_isolated")
    page.uncheck("#id_controls_filtered")
    assert page.is_checked("#id_launch_now")  # the demo preset launches at once
    page.click("button.primary[type=submit]")
    page.wait_for_url("**/campaigns/*/")
    campaign = Campaign.objects.get(name="browser demo")
    assert page.url.endswith(campaign.get_absolute_url())
    assert page.inner_text("#state") == "running" and campaign.state == "running"
    assert campaign.settings.tiers == ["tiny-1m"] and campaign.created_by.username == "organizer"

    # A worker token, shown once.
    page.click("text=Worker tokens")
    page.fill("#id_label", "browser test worker")
    page.click("button[name=create]")
    secret = page.inner_text("#token-secret").strip()
    assert secret.startswith("swt_")

    # The dashboard, live; the marker proves the page is never reloaded.
    page.goto(f"{coordinator}{campaign.get_absolute_url()}")
    page.wait_for_function(
        "window.swarmDashboard && window.swarmDashboard.ready && window.swarmDashboard.socketOpen"
    )
    page.evaluate("window.__sameDocument = true")
    assert page.evaluate("window.swarmDashboard.pointsReceived") == 0

    worker = worker_process(
        coordinator,
        secret,
        tmp_path / "worker",
        tmp_path / "worker.log",
        "--max-rounds",
        "3",
        SWARM_MODEL_CACHE=str(tiny_1m_dir.parent),
    )
    try:
        try:
            page.wait_for_function("window.swarmDashboard.pointsReceived > 0", timeout=180_000)
        except Exception:
            print("--- worker log\n" + (tmp_path / "worker.log").read_text()[-3000:])
            print("--- coordinator log\n" + (tmp_path / "daphne.log").read_text()[-6000:])
            print(
                "--- dashboard state\n"
                + repr(
                    page.evaluate(
                        "({messages: swarmDashboard.messages, reconnects: swarmDashboard.reconnects,"
                        " errors: swarmDashboard.errors, socketOpen: swarmDashboard.socketOpen})"
                    )
                )
            )
            print(
                "--- stored\n"
                + repr(
                    list(
                        RoundMetrics.objects.filter(campaign=campaign).values_list(
                            "id", "arm", "tier", "round", "reward"
                        )
                    )
                )
            )
            print(
                repr(
                    list(
                        RoundAggregate.objects.filter(campaign=campaign).values_list(
                            "source_id", "arm", "tier", "round", "agents"
                        )
                    )
                )
            )
            raise
        received_ms = page.evaluate("window.swarmDashboard.firstPointAt")
        assert page.evaluate("window.__sameDocument") is True
        swarm_points = page.evaluate(
            "document.getElementById('reward-tiny-1m').data.filter(t => t.name === 'swarm')[0].x.length"
        )
        assert swarm_points >= 1
        first = RoundMetrics.objects.filter(campaign=campaign, arm="swarm").order_by("created_at").first()
        assert first is not None and first.round == 0
        latency = received_ms / 1000 - first.created_at.timestamp()
        print(f"browser live update latency: {latency:.3f} s after the report was stored")
        assert latency < LIVE_BOUND_SECONDS
        # More rounds and the workers table follow (tables every few seconds), still no reload.
        page.wait_for_function("window.swarmDashboard.pointsReceived >= 3", timeout=120_000)
        page.wait_for_function("document.querySelectorAll('#workers tbody tr').length >= 1", timeout=30_000)
        assert page.evaluate("window.__sameDocument") is True
        assert page.is_hidden("form[data-action=launch]") and page.is_visible("form[data-action=pause]")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    finally:
        stop(worker)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000
    assert os.path.getsize(tmp_path / "worker.log") > 0
