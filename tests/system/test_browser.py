"""A real browser (Debian's chromium, driven by Playwright) against a real coordinator.

* The site as a user meets it: log in and out from the header (back on the page), a preset's
  task lines edited and stored as typed, a too-large task setting refused with its message, an
  empty tier panel's words, Stop asking for confirmation; no Content-Security-Policy violation.
* Live: launch a cpu-demo campaign from the form, create a worker token, start a tiny worker with
  the volunteer CLI, and watch its first verified reward appear on the chart without a reload;
  then the dashboard at phone width (390 px): no horizontal page scroll, no title or legend box
  over another. Screenshots at 1280 and 390 px go to <data dir>/test-artifacts/ (CI artifacts;
  docs/images/ has copies).

scripts/test.sh installs chromium (apt) and the playwright package (the `dev` extra); Playwright
drives the system chromium (no `playwright install`, which would download browsers).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections

from swarm_app.campaigns.models import Campaign, RoundAggregate, RoundMetrics
from tests.servers import asgi_server, stop, worker_process

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
ARTIFACTS = Path(settings.DATA_DIR) / "test-artifacts"
PHONE = {"width": 390, "height": 844}
# Boxes that must not cover each other: chart titles (HTML headings), plotly's axis titles, legends.
OVERLAPS = """() => {
  const boxes = (selector) => Array.from(document.querySelectorAll(selector))
    .map((node) => node.getBoundingClientRect()).filter((box) => box.width > 0 && box.height > 0);
  const overlap = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const titles = boxes(".chart-title, .gtitle, .xtitle, .ytitle");
  const legends = boxes(".legend");
  let count = 0;
  for (const legend of legends) for (const title of titles) if (overlap(legend, title)) count += 1;
  return {overlaps: count, legends: legends.length, titles: titles.length};
}"""
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
        page.csp_violations = []
        page.on(
            "console",
            lambda message: (
                page.csp_violations.append(message.text)
                if "Content Security Policy" in message.text
                else None
            ),
        )
        try:
            yield page
            assert not page.csp_violations
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
        "() => window.swarmDashboard && window.swarmDashboard.ready && window.swarmDashboard.socketOpen"
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
            page.wait_for_function("() => window.swarmDashboard.pointsReceived > 0", timeout=180_000)
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
        page.wait_for_function("() => window.swarmDashboard.pointsReceived >= 3", timeout=120_000)
        page.wait_for_function(
            "() => document.querySelectorAll('#workers tbody tr').length >= 1", timeout=30_000
        )
        assert page.evaluate("window.__sameDocument") is True
        assert page.is_hidden("form[data-action=launch]") and page.is_visible("form[data-action=pause]")

        # A per-worker curve, named as the picker names the worker (not its raw node id).
        page.select_option("#agent-select", index=0)
        page.wait_for_function(
            "() => document.getElementById('reward-tiny-1m').data.some((t) => t.meta && t.meta.agent)"
        )
        names = page.evaluate(
            "document.getElementById('reward-tiny-1m').data.filter((t) => t.meta && t.meta.agent).map((t) => t.name)"
        )
        assert names and all(name.startswith("worker ") and "(tiny-1m)" in name for name in names), names
        assert page.text_content("#pool-chart .ytitle") == "share of groups"
        check_layout(page, 1280)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-1280.png"), full_page=True)

        # Phone width: the page never scrolls sideways, titles and legends stay apart.
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(1000)  # plotly's responsive resize runs on the window's resize event
        check_layout(page, PHONE["width"])
        page.screenshot(path=str(ARTIFACTS / "dashboard-390.png"), full_page=True)
        assert page.evaluate("window.__sameDocument") is True
    finally:
        stop(worker)
    for width in (1280, 390):
        assert (ARTIFACTS / f"dashboard-{width}.png").stat().st_size > 10_000
    assert os.path.getsize(tmp_path / "worker.log") > 0


def check_layout(page, width: int) -> None:
    """No horizontal page scroll at ``width``; no title or legend box over another; every chart
    as wide as its box allows (plotly resized with the container)."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    layout = page.evaluate(OVERLAPS)
    assert layout["legends"] >= 3 and layout["titles"] >= 6, layout
    assert layout["overlaps"] == 0, layout
    chart = page.evaluate(
        "(() => { const c = document.getElementById('reward-tiny-1m');"
        " return [c.getBoundingClientRect().width, c.querySelector('svg.main-svg').getBoundingClientRect().width]; })()"
    )
    assert chart[1] <= chart[0] + 1 and chart[1] > chart[0] - 40, chart


def test_the_site_as_an_organizer_meets_it(site, page):
    """Header login and logout (back on the page), a preset's task lines edited and stored as
    typed, a too-large task setting refused with its message, an empty tier panel's words, and
    Stop asking for confirmation."""
    coordinator = site
    get_user_model().objects.create_user("organizer", password="pw-organizer-1", is_staff=True)

    # Log in from the header of the home page: back on the home page, logged in.
    page.goto(f"{coordinator}/")
    page.click("#login")
    page.wait_for_url("**/accounts/login/?next=/")
    page.fill("#id_username", "organizer")
    page.fill("#id_password", "pw-organizer-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{coordinator}/")
    assert page.inner_text("#username") == "organizer"

    # The cpu preset's lines, edited: the choice becomes "custom", and what was typed is stored.
    page.goto(f"{coordinator}/campaigns/new/?preset=cpu-demo")
    assert page.input_value("#id_task_preset") == "cpu"
    typed = "chain_sum 1 min_digits=1 max_digits=3"
    page.fill("#id_custom_tasks", typed)
    assert page.input_value("#id_task_preset") == "custom"
    page.fill("#id_name", "edited tasks")
    page.uncheck("input[name=tiers][value=tiny-5m]")
    page.uncheck("#id_controls_isolated")
    page.uncheck("#id_controls_filtered")
    page.click("button.primary[type=submit]")
    page.wait_for_url("**/campaigns/*/")
    campaign = Campaign.objects.get(name="edited tasks")
    assert campaign.settings.tasks == [
        {"name": "chain_sum", "weight": 1.0, "config": {"min_digits": 1, "max_digits": 3}}
    ]

    # Running, no worker yet: the tier's panels say so instead of drawing empty axes.
    assert campaign.state == Campaign.State.RUNNING
    page.wait_for_function("() => window.swarmDashboard && window.swarmDashboard.ready")
    for chart in ("reward-tiny-1m", "cumulative-tiny-1m"):
        assert page.inner_text(f"#{chart}-empty").startswith("No workers yet on tiny-1m")
        assert page.is_hidden(f"#{chart}")

    # Stop is final: it asks first; dismissed, nothing happens.
    dialogs: list[str] = []

    def answer(dialog, accept: bool) -> None:
        dialogs.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, False))
    page.click("form[data-action=stop] button")
    page.wait_for_timeout(500)
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.RUNNING and "final" in dialogs[0]
    page.once("dialog", lambda dialog: answer(dialog, True))
    with page.expect_navigation():
        page.click("form[data-action=stop] button")
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.STOPPED and len(dialogs) == 2
    assert page.inner_text("#state") == "stopped"

    # A too-large task setting: refused next to the task lines, with its bound, at once.
    page.goto(f"{coordinator}/campaigns/new/")
    page.select_option("#id_task_preset", "custom")
    page.fill("#id_custom_tasks", "chain_sum 1 max_digits=5000 max_terms=2000")
    page.fill("#id_max_new_tokens", "24")
    page.fill("#id_name", "too large")
    with page.expect_navigation():
        page.click("button.primary[type=submit]")
    error = page.inner_text("#field-custom_tasks .errorlist")
    assert "max_digits=5000 is too large; at most 40" in error
    assert not Campaign.objects.filter(name="too large").exists()

    # Log out from the header of a public page: back on it, logged out.
    page.goto(f"{coordinator}{campaign.get_absolute_url()}")
    with page.expect_navigation():
        page.click("#logout")
    assert page.url == f"{coordinator}{campaign.get_absolute_url()}"
    assert page.is_visible("#login") and not page.is_visible("#username")
