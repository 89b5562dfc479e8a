"""The status page with live counts, and the metrics export API (CSV and JSON, per agent or per
round)."""

from __future__ import annotations

import csv
import io
import json
import urllib.request

import pytest
from django.urls import reverse

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.web.api import FIXED
from tests.campaigns.helpers import make_campaign


def add_metrics(campaign: Campaign) -> None:
    token, _ = create_token(campaign)
    node = WorkerNode.objects.create(
        campaign=campaign, node_id="w1", token=token, tier="tiny-1m", connected=True, round=2
    )
    for number in range(2):
        RoundMetrics.objects.create(
            campaign=campaign,
            arm="swarm",
            tier="tiny-1m",
            agent="node:w1",
            node=node,
            round=number,
            reward=0.25 * (number + 1),
            metrics={"reward": 0.9, "entropy": 1.5 + number, "batch/external_used": 2.0},
        )
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    RoundMetrics.objects.create(
        campaign=campaign,
        arm="isolated",
        tier="tiny-1m",
        agent=f"control:{run.pk}",
        control_run=run,
        round=0,
        reward=0.1,
        metrics={"reward": 0.1, "step_time": 0.5},
    )


def test_status_page_lists_campaigns_with_live_counts(anonymous):
    campaign = make_campaign(state=Campaign.State.RUNNING)
    add_metrics(campaign)
    page = anonymous.get("/").content.decode()
    assert campaign.name in page and campaign.get_absolute_url() in page
    data = anonymous.get("/api/status").json()
    row = next(c for c in data["campaigns"] if c["id"] == campaign.pk)
    assert (row["live_workers"], row["workers"], row["state"]) == (1, 1, "running")
    assert data["totals"]["running"] == 1 and data["totals"]["live_workers"] == 1
    # The swarm may be done while the controls still train: the page says so.
    assert row["controls"] == "1 of 1 training · round 0.0 / 3" and data["totals"]["controls_running"] == 1
    assert "1 of 1 training · round 0.0 / 3" in page


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_metrics_export_as_csv_and_json(anonymous):
    """(The test client reads the async stream synchronously, hence the ignored warning; the real
    server streams it: tests/campaigns/test_dashboard.py.)"""
    campaign = make_campaign(state=Campaign.State.RUNNING)
    add_metrics(campaign)
    url = reverse("api-metrics", args=[campaign.pk])
    response = anonymous.get(url, {"format": "csv"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert f"campaign-{campaign.pk}-metrics.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response).decode())))
    assert [(r["arm"], r["agent"], r["round"], float(r["reward"])) for r in rows] == [
        ("swarm", "node:w1", "0", 0.25),
        ("swarm", "node:w1", "1", 0.5),
        ("isolated", rows[2]["agent"], "0", 0.1),
    ]
    assert rows[1]["entropy"] == "2.5" and rows[2]["entropy"] == "" and rows[2]["step_time"] == "0.5"
    assert rows[0]["metrics/reward"] == "0.9"  # the worker's own claim, apart from the verified reward
    # which control seed, which swarm: a control's row carries its seed, a node's its swarm
    assert [(r["seed"], r["swarm"]) for r in rows] == [("", "0"), ("", "0"), ("0", "")]
    body = json.loads(b"".join(anonymous.get(url, {"format": "json", "arm": "swarm"})))
    assert body["campaign"] == campaign.pk and body["level"] == "agent"
    assert [(r["round"], r["reward"], r["metrics"]["entropy"]) for r in body["rows"]] == [
        (0, 0.25, 1.5),
        (1, 0.5, 2.5),
    ]
    body = anonymous.get(url, {"format": "json", "level": "round"}).json()
    assert [(r["arm"], r["round"], r["agents"], r["reward_mean"]) for r in body["rows"]] == [
        ("isolated", 0, 1, 0.1),
        ("swarm", 0, 1, 0.25),
        ("swarm", 1, 1, 0.5),
    ]
    rounds_csv = anonymous.get(url, {"format": "csv", "level": "round", "from_round": "1"}).content.decode()
    assert rounds_csv.splitlines()[0].startswith("campaign,arm,tier,round,agents,reward_mean")
    assert len(rounds_csv.splitlines()) == 2
    assert anonymous.get(url, {"format": "xml"}).status_code == 400
    assert anonymous.get(url, {"from_round": "x"}).status_code == 400


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_the_export_carries_the_new_arms_and_their_mechanism_metrics(anonymous):
    """Per agent: every key the engine reports (batch/informative_groups, generation/questions,
    ...) for a self-replay and an over-generation control; per round: the rolled-up means of the
    mechanism keys as columns (CSV) or a dict (JSON)."""
    from swarm_app.campaigns.rollups import MECHANISM_KEYS

    campaign = make_campaign(state=Campaign.State.RUNNING)
    reports = {
        "self": {"batch/external_used": 2.0, "batch/external_from_others": 0.0, "batch/external_age": 1.5},
        "dyn": {"generation/questions": 7.0, "batch/informative_groups": 4.0, "grad_norm_clipped": 0.5},
    }
    for arm, metrics in reports.items():
        run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm=arm, seed=0)
        RoundMetrics.objects.create(
            campaign=campaign,
            arm=arm,
            tier="tiny-1m",
            agent=f"control:{run.pk}",
            control_run=run,
            round=0,
            reward=0.2,
            metrics=metrics,
        )
    url = reverse("api-metrics", args=[campaign.pk])
    rows = {
        r["arm"]: r
        for r in csv.DictReader(io.StringIO(b"".join(anonymous.get(url, {"format": "csv"})).decode()))
    }
    assert set(rows) == {"self", "dyn"}
    assert rows["dyn"]["generation/questions"] == "7.0" and rows["self"]["generation/questions"] == ""
    assert rows["self"]["batch/external_from_others"] == "0.0" and rows["self"]["batch/external_age"] == "1.5"
    rounds_csv = anonymous.get(url, {"format": "csv", "level": "round"}).content.decode()
    rounds = {r["arm"]: r for r in csv.DictReader(io.StringIO(rounds_csv))}
    assert all(key in rounds["dyn"] for key in MECHANISM_KEYS) and "metric_means" not in rounds["dyn"]
    assert rounds["dyn"]["generation/questions"] == "7.0" and rounds["dyn"]["grad_norm_clipped"] == "0.5"
    assert rounds["self"]["batch/external_age"] == "1.5" and rounds["self"]["generation/questions"] == ""
    # The independent units come after every older column (a control's: its one seed).
    assert rounds_csv.splitlines()[0].endswith(",".join([*MECHANISM_KEYS, "units", "unit_mean", "unit_std"]))
    assert (rounds["dyn"]["units"], rounds["dyn"]["unit_mean"], rounds["dyn"]["unit_std"]) == (
        "1",
        "0.2",
        "0.0",
    )
    body = anonymous.get(url, {"format": "json", "level": "round", "arm": "dyn"}).json()
    assert body["rows"][0]["metric_means"] == {
        "generation/questions": 7.0,
        "batch/informative_groups": 4.0,
        "grad_norm_clipped": 0.5,
    }


# Cells a spreadsheet would run as formulas (OWASP's starting characters: = + - @ tab CR).
FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]


def test_exported_text_cells_are_never_formulas_and_numbers_stay_numbers(coordinator):
    """Rows as a coordinator before issue #27 stored them (metric names were only length-checked;
    a metric value of text), and a tier name starting with "-": through the real server, every
    text cell of both CSV exports that starts with a formula character comes out behind a "'",
    while a negative reward or metric value is written as the plain number."""
    campaign = make_campaign(state=Campaign.State.RUNNING)
    run = ControlRun.objects.create(campaign=campaign, tier="-tier", arm="isolated", seed=0)
    metrics: dict[str, object] = {name: -0.5 for name in FORMULAS}
    metrics["note"] = "=1+1"
    RoundMetrics.objects.create(
        campaign=campaign,
        arm="isolated",
        tier="-tier",
        agent=f"control:{run.pk}",
        control_run=run,
        round=0,
        reward=-0.5,
        metrics=metrics,
    )

    def download(level: str) -> list[list[str]]:
        url = f"{coordinator}/api/campaigns/{campaign.pk}/metrics?format=csv&level={level}"
        with urllib.request.urlopen(url, timeout=60) as response:
            return list(csv.reader(io.StringIO(response.read().decode(), newline="")))

    header, row = download("agent")
    held_out = ["eval/accuracy", "eval/reward"]  # the coordinator's held-out scores, last
    assert header[-2:] == held_out
    assert sorted(header[len(FIXED) : -2]) == sorted(["'" + name for name in FORMULAS] + ["note"])
    cells = dict(zip(header, row, strict=True))
    assert cells["tier"] == "'-tier" and cells["note"] == "'=1+1"
    assert cells["reward"] == "-0.5" and all(cells["'" + name] == "-0.5" for name in FORMULAS)
    rounds = download("round")
    assert dict(zip(rounds[0], rounds[1], strict=True))["tier"] == "'-tier"
    for cell in [*header, *row, *rounds[0], *rounds[1]]:
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        assert not cell.startswith("-") or float(cell) < 0, cell  # only numbers start with "-"
