"""Held-out accuracy in a real browser (Debian's chromium via Playwright) against a real
coordinator (daphne) on the test database (issue #48's acceptance): the dashboard's held-out
chart and the verdict's held-out line, and a volunteer's and a node's page with the node's held-out curve beside its swarm's
mean and the isolated controls', at 1280 and 390 px, with no horizontal scroll, a missed
evaluation drawn as a gap and said in words (never a zero), and no Content-Security-Policy
violation or script error (the page fixture fails on any CSP violation at teardown)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode, WorkerToken
from swarm_app.coordinator.tokens import create_token
from swarm_app.volunteers.models import Volunteer
from tests.campaigns.test_run_page import scored, seed
from tests.servers import asgi_server
from tests.system.conftest import ARTIFACTS, PHONE

pytestmark = pytest.mark.slow

# Each swarm node's and each self-replay seed's accuracy after rounds 2, 5 and 8 (eval_every 3).
SWARM = {
    "node0": (0.3, None, 0.5),
    "node1": (0.35, 0.45, 0.6),
    "node2": (0.4, 0.5, 0.7),
    "node3": (0.3, 0.5, 0.6),
}
SEEDS = {"control0": (0.2, 0.25, 0.2), "control1": (0.25, 0.2, 0.25), "control2": (0.2, 0.3, 0.3)}
# The charts' traces as plotly holds them: names and points, the bands left out.
TRACES = """(element) => element.data.filter((t) => t.showlegend !== false)
  .map((t) => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))"""


def evaluated_campaign() -> tuple[Campaign, Volunteer, WorkerNode]:
    """A completed campaign (2 swarms of 2 nodes, 3 self-replay seeds, 9 rounds) evaluated after
    rounds 2, 5 and 8; node0, Grace H's, missed the evaluation after round 5."""
    campaign = seed("completed", replicates=2)
    Campaign.objects.filter(pk=campaign.pk).update(config={**campaign.config, "eval_every": 3})
    for node_id, accuracies in SWARM.items():
        node = WorkerNode.objects.get(campaign=campaign, node_id=node_id)
        for after, accuracy in zip((2, 5, 8), accuracies, strict=True):
            if accuracy is not None:
                scored(node, after, accuracy)
    runs = {f"control{run.seed}": run for run in campaign.control_runs.all()}
    token = WorkerToken.objects.get(campaign=campaign)
    for node_id, accuracies in SEEDS.items():
        node = WorkerNode.objects.create(
            campaign=campaign,
            node_id=node_id,
            token=token,
            tier="tiny-1m",
            arm="self",
            control_run=runs[node_id],
            round=9,
        )
        for after, accuracy in zip((2, 5, 8), accuracies, strict=True):
            scored(node, after, accuracy)
    user = get_user_model().objects.create_user("grace", password="pw-for-tests-only-1")
    volunteer = Volunteer.objects.create(user=user, display_name="Grace H")
    own, _ = create_token(campaign, "laptop")
    WorkerToken.objects.filter(pk=own.pk).update(owner=user)
    WorkerNode.objects.filter(campaign=campaign, node_id="node0").update(token=own)
    return campaign, volunteer, WorkerNode.objects.get(campaign=campaign, node_id="node0")


def no_horizontal_scroll(page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def chart_fits(page, selector: str) -> None:
    """The chart drawn (plotly's svg) and no wider than its box."""
    box = page.evaluate(
        "(s) => { const c = document.querySelector(s); const svg = c.querySelector('svg.main-svg');"
        " return [c.getBoundingClientRect().width, svg ? svg.getBoundingClientRect().width : -1]; }",
        selector,
    )
    assert 0 < box[1] <= box[0] + 1, box


def test_held_out_charts_on_the_dashboard_and_the_volunteers_page(transactional_db, page, tmp_path):
    campaign, volunteer, node = evaluated_campaign()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with asgi_server(tmp_path / "daphne.log", SERVE_STATIC="1") as base:
        # The dashboard: one curve per arm, the swarm's a mean over its 2 swarms.
        page.goto(f"{base}{campaign.get_absolute_url()}")
        page.wait_for_function("() => window.swarmDashboard && window.swarmDashboard.ready")
        page.wait_for_selector("#heldout-tiny-1m svg.main-svg")
        traces = {t["name"]: t for t in page.evaluate(TRACES, page.query_selector("#heldout-tiny-1m"))}
        swarm = traces["swarm (n=2, 95% t interval)"]
        assert swarm["x"] == [2, 5, 8]
        # swarm 0 is node0 and node2, swarm 1 node1 and node3; each swarm counts once; after
        # round 5 node0 missed, so its swarm is node2 alone there (missing, not a zero)
        assert swarm["y"] == pytest.approx([(0.35 + 0.325) / 2, (0.5 + 0.475) / 2, (0.6 + 0.6) / 2])
        assert traces["self-replay (n=3, 95% t interval)"]["y"] == pytest.approx(
            [0.65 / 3, 0.75 / 3, 0.75 / 3]
        )
        for width in (1280, PHONE["width"]):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(500)
            no_horizontal_scroll(page, width)
            chart_fits(page, "#heldout-tiny-1m")
            page.locator("#heldout-tiny-1m").screenshot(
                path=str(ARTIFACTS / f"held-out-dashboard-{width}.png")
            )
        # The verdict as run.js draws it: held-out accuracy beside the training reward, 2 swarms
        # against 3 seeds cannot decide
        page.wait_for_function("() => window.swarmRun && window.swarmRun.fetches >= 1")
        verdict = page.locator(".verdict-tier[data-tier='tiny-1m']")
        assert verdict.get_attribute("data-held-out-judgement") == "cannot decide"
        held_out = verdict.locator("p").last.inner_text()
        assert held_out.startswith("Held-out accuracy after round 8 (64 fresh questions"), held_out
        assert "the smallest p possible is 0.2: a description, not a finding." in held_out
        assert page.console_problems == []

        # The volunteer's page and the node's page: the node beside its tier's arms.
        for path in (f"/volunteers/{volunteer.pk}/", f"/campaigns/{campaign.pk}/nodes/{node.pk}/"):
            page.set_viewport_size({"width": 1280, "height": 1000})
            page.goto(f"{base}{path}")
            page.wait_for_selector("[data-held-out='0'] svg.main-svg")
            traces = {t["name"]: t for t in page.evaluate(TRACES, page.query_selector("[data-held-out='0']"))}
            assert set(traces) == {"this node", "swarm mean (2 swarms)", "self-replay (3 seeds)"}, traces
            assert traces["this node"]["x"] == [2, 5, 8]
            assert traces["this node"]["y"] == [0.3, None, 0.5]  # a gap, never a zero
            assert traces["swarm mean (2 swarms)"]["y"] == pytest.approx(swarm["y"])
            missing = page.inner_text(".held-out-missing")
            assert missing == "Missed evaluations (no score: missing, not zero): after round 5."
            for width in (1280, PHONE["width"]):
                page.set_viewport_size({"width": width, "height": 1000})
                page.wait_for_timeout(500)
                no_horizontal_scroll(page, width)
                chart_fits(page, "[data-held-out='0']")
            page.locator("#held-out-curves").screenshot(
                path=str(ARTIFACTS / f"held-out-{'volunteer' if 'volunteers' in path else 'node'}-390.png")
            )
        assert page.console_problems == []
        assert page.evaluate("window.__violations") == []
