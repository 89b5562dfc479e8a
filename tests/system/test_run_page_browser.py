"""The run section of a campaign's page in a real browser (Debian's chromium via Playwright,
as tests/system/test_browser.py), against a real coordinator (daphne) on the test database.

* A completed campaign (stored reports, no model): the verdict, written from the numbers, with
  n and what is independent; the settings as labelled fields; no word of it still running; on a
  phone (390 px) the headline gain on screen without any horizontal scroll and outside every
  table.
* A running campaign: started, elapsed (ticking), the time left per arm from the rate so far;
  new rounds move the estimate without a reload; stopped from the server, the page says so and
  gives the verdict on the rounds run, with nothing left saying it runs.
* No Content-Security-Policy violation (console messages and securitypolicyviolation events),
  no script error.
"""

from __future__ import annotations

import re
import time

import pytest
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.campaigns.rollups import refresh_rollups
from swarm_app.runs import lifecycle
from tests.campaigns.test_run_page import seed
from tests.servers import asgi_server
from tests.system.conftest import ARTIFACTS, PHONE, in_thread

pytestmark = pytest.mark.slow

# The headline gain's element on screen: inside the viewport, in no table nor scrolling box.
HEADLINE_BOX = """(tier) => {
  const value = document.querySelector(`.headline[data-tier="${tier}"] .headline-value`);
  const box = value.getBoundingClientRect();
  let scroller = null;
  for (let node = value.parentElement; node; node = node.parentElement) {
    const overflow = getComputedStyle(node).overflowX;
    if (node.scrollWidth > node.clientWidth + 1 && (overflow === "auto" || overflow === "scroll")) scroller = node.id || node.tagName;
  }
  return {left: box.left, right: box.right, width: box.width, height: box.height,
          text: value.textContent, table: value.closest("table") !== null, scroller: scroller,
          scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth};
}"""


def no_errors(page) -> None:
    """No console error, uncaught exception or CSP violation so far, none in either script."""
    assert page.console_problems == []
    assert page.evaluate("window.__violations") == []
    assert (
        page.evaluate("window.swarmDashboard.errors") == [] and page.evaluate("window.swarmRun.errors") == []
    )


def wait_for_run(page, fetches: int = 1) -> None:
    """The run section has been redrawn from /run at least ``fetches`` times since the load."""
    page.wait_for_function(f"() => window.swarmRun && window.swarmRun.fetches >= {fetches}")


def test_completed_campaign_reads_as_finished_with_its_verdict(transactional_db, page, tmp_path):
    campaign = seed("completed")
    with asgi_server(tmp_path / "daphne.log", SERVE_STATIC="1") as base:
        page.goto(f"{base}{campaign.get_absolute_url()}")
        page.wait_for_function("() => window.swarmDashboard && window.swarmDashboard.ready")
        wait_for_run(page)
        assert page.inner_text("#state") == "completed"
        assert page.inner_text("#run-state").startswith("Completed: every arm ran its 9 rounds")
        assert page.inner_text("#run-elapsed") == "10 min 00 s"
        assert page.is_visible("#run-finished") and not page.is_visible("#run-eta-note")
        assert page.inner_text("#verdict-title") == "Verdict"
        verdict = page.inner_text("#verdict-tiers")
        # The demo's design, 2 swarms against 3 seeds, cannot decide (issue #47): the verdict and
        # the headline, as run.js renders them, say so and only describe.
        sentence = (
            "2 swarms against 3 seeds: no difference can be shown at the 5 % level; the smallest p "
            "possible is 0.2"
        )
        assert verdict.startswith(f"tiny-1m\n\n{sentence}. As a description, not a finding:"), verdict
        assert "higher" not in verdict and "lower" not in verdict
        assert page.inner_text(".headline[data-tier='tiny-1m'] .headline-design").startswith(sentence)
        assert "n = 2 swarms of 4 nodes in all vs 3 self-replay (4/4-self) seeds." in verdict
        assert "each swarm counts once, whatever its nodes" in page.inner_text("#independence")
        assert not page.is_visible("#verdict-pending")
        # The headline equals the summary table's headline column (one payload, two views).
        value = page.inner_text(".headline[data-tier='tiny-1m'] .headline-value")
        cell = page.locator("#summary tbody tr td[data-gain=self] .value").inner_text()
        assert value == cell == "+1.8 %", (value, cell)

        # Settings: labelled fields once opened, never a dict.
        page.click("#settings summary")
        labels = page.locator("#settings-fields dt").all_inner_texts()
        assert {"Rounds per node", "Swarm arm", "Tasks", "Isolated controls", "Headline control"} <= set(
            labels
        )
        fields = page.inner_text("#settings-fields")
        assert not re.search(r"[{}]|': ", fields), fields

        # Nothing says it is still going, anywhere on the page.
        status = page.inner_text("#status-line")
        assert status.startswith("Campaign completed"), status
        body = page.inner_text("body").lower()
        assert "running" not in body and "live." not in body and "time left" not in body

        # On a phone: the headline gain on screen, no horizontal scroll, in no table.
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(500)
        box = page.evaluate(HEADLINE_BOX, "tiny-1m")
        assert box["scrollWidth"] <= PHONE["width"], box
        assert box["width"] > 0 and box["height"] > 0 and box["text"] == "+1.8 %", box
        assert 0 <= box["left"] and box["right"] <= PHONE["width"], box
        assert not box["table"] and box["scroller"] is None, box
        page.locator(".headline[data-tier='tiny-1m']").scroll_into_view_if_needed()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "run-completed-390.png"))
        page.set_viewport_size({"width": 1280, "height": 1000})
        page.locator("#run").screenshot(path=str(ARTIFACTS / "run-completed-1280.png"))
        no_errors(page)


def test_running_campaign_shows_elapsed_and_time_left_live(transactional_db, page, tmp_path):
    campaign = seed("running", rounds=20, reported={"swarm": 5, "self": 10})
    with asgi_server(tmp_path / "daphne.log", SERVE_STATIC="1") as base:
        page.goto(f"{base}{campaign.get_absolute_url()}")
        page.wait_for_function("() => window.swarmDashboard && window.swarmDashboard.ready")
        wait_for_run(page)
        assert page.inner_text("#state") == "running"
        assert page.inner_text("#run-state").startswith("Running:")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page.inner_text("#run-started"))
        # Elapsed ticks in the browser between the server's answers.
        first = page.inner_text("#run-elapsed")
        assert re.fullmatch(r"10 min \d\d s \(pauses included\)", first), first
        page.wait_for_function(f"() => document.getElementById('run-elapsed').textContent !== {first!r}")
        # 5 rounds in the 10 min and some seconds since the start: 15 to go at that rate, about
        # 30 min (31 once more than 10 min 15 s have passed, as on a loaded machine); the
        # self-replay seeds' 10 in the same time: about 10 min (11 past 10 min 30 s).
        swarm = "#run-eta li[data-arm=swarm] .eta-text"
        assert re.match(r"5 of 20 rounds · about 3[01] min left", page.inner_text(swarm)), page.inner_text(
            swarm
        )
        own = page.inner_text("#run-eta li[data-arm=self] .eta-text")
        assert re.match(r"10 of 20 rounds · about 1[01] min left", own), own
        assert "estimate from each arm's current rate" in page.inner_text("#run-eta-note")
        assert not page.is_visible("#verdict") and page.is_visible("#verdict-pending")
        assert "so far" in page.inner_text(".headline[data-tier='tiny-1m'] .headline-what")

        # Five more swarm rounds arrive: the next tables message moves the estimate, no reload.
        page.evaluate("window.__sameDocument = true")
        fetched = page.evaluate("window.swarmRun.fetches")
        nodes = RoundMetrics.objects.filter(campaign=campaign, arm="swarm", round=0)
        RoundMetrics.objects.bulk_create(
            RoundMetrics(
                campaign=campaign, arm="swarm", tier="tiny-1m", agent=row.agent, round=r, reward=row.reward
            )
            for row in nodes
            for r in range(5, 10)
        )
        # reported at a steady pace since the start: the current rate is the average
        started, now = Campaign.objects.get(pk=campaign.pk).started_at, timezone.now()
        for r in range(10):
            RoundMetrics.objects.filter(campaign=campaign, arm="swarm", round=r).update(
                created_at=started + (now - started) * (r + 1) / 10
            )
        refresh_rollups()
        started = time.monotonic()
        page.wait_for_function(
            "() => document.querySelector('#run-eta li[data-arm=swarm] .eta-text').textContent.startsWith('10 of 20')",
            timeout=40_000,
        )
        assert page.evaluate("window.swarmRun.fetches") > fetched and time.monotonic() - started < 40
        # 10 rounds in 10 min and some seconds: about 10 min left (11 past 10 min 30 s, as on a
        # loaded machine: CI's side-by-side suites read 11).
        assert re.search(r"about 1[01] min left", page.inner_text(swarm)), page.inner_text(swarm)

        # Stopped on the server (its controls exit after their round): the page says so at once,
        # with the verdict on the rounds run.
        in_thread(lambda: lifecycle.stop(Campaign.objects.get(pk=campaign.pk)))
        ControlRun.objects.filter(campaign=campaign).update(state=ControlRun.State.STOPPED)
        page.wait_for_function(
            "() => document.getElementById('run').dataset.state === 'stopped'", timeout=5_000
        )
        assert page.inner_text("#status-line").startswith("Campaign stopped")
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('#controls tbody tr')).every((tr) => tr.textContent.includes('stopped'))",
            timeout=40_000,
        )
        assert page.inner_text("#state") == "stopped"
        assert page.inner_text("#run-state").startswith("Stopped by an organizer")
        assert page.inner_text("#verdict-title") == "Verdict on the rounds run before the stop"
        assert page.is_visible("#run-finished") and not page.is_visible("#run-eta-note")
        assert page.inner_text(swarm) == "10 of 20 rounds"
        elapsed = page.inner_text("#run-elapsed")
        page.wait_for_timeout(1500)
        assert page.inner_text("#run-elapsed") == elapsed  # a finished run's time no longer ticks
        body = page.inner_text("body").lower()
        assert "running" not in body and "time left" not in body, body
        assert page.evaluate("window.__sameDocument") is True
        no_errors(page)
