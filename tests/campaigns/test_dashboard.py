"""The dashboard's numbers: rollups equal to the raw aggregates (also after incremental
refreshes), downsampling, cumulative reward, the bootstrap, gains, the pool panel; and the live
feed over a real websocket, coalesced, within 2 s of a stored report."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import urllib.request

import msgspec
import numpy as np
import pytest
import websockets
from channels.layers import get_channel_layer
from django.db import connection
from django.db.models import Avg, Count, Max, Min

from swarm_app.campaigns import rollups
from swarm_app.campaigns.broadcast import campaign_group
from swarm_app.campaigns.metrics import record_control_metrics
from swarm_app.campaigns.models import AgentBlock, Campaign, ControlRun, RoundAggregate, RoundMetrics
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.core import messages
from swarm_app.web import consumers, dashboard, estimates, series, status_tables
from tests.coordinator.helpers import in_thread
from worker.shared import stats
from worker.shared.campaign import CampaignConfig


def make_campaign(public: bool = True, rounds: int = 100, **config) -> Campaign:
    cfg = CampaignConfig(tiers=["tiny-1m", "tiny-5m"], rounds=rounds, **config).validate()
    return Campaign.objects.create(
        name="dash", state=Campaign.State.RUNNING, public=public, config=cfg.to_json()
    )


def add_rows(campaign: Campaign, arm: str, tier: str, agents: list[str], rounds: range, reward) -> None:
    RoundMetrics.objects.bulk_create(
        RoundMetrics(
            campaign=campaign,
            arm=arm,
            tier=tier,
            agent=agent,
            round=number,
            reward=reward(agent, number),
            metrics={
                "frac_reward_zero_std": 0.25,
                "batch/local_used": 4.0,
                "batch/external_used": 4.0 if arm == "swarm" else 0.0,
            },
        )
        for agent in agents
        for number in rounds
    )
    for node in WorkerNode.objects.filter(campaign=campaign):  # as the coordinator stores them
        RoundMetrics.objects.filter(campaign=campaign, agent=f"node:{node.node_id}").update(node=node)


def add_nodes(campaign: Campaign, tier: str, swarms: dict[str, int]) -> None:
    """The coordinator's nodes behind swarm agents "node:<id>", each in its swarm (replicate)."""
    token, _ = create_token(campaign)
    WorkerNode.objects.bulk_create(
        WorkerNode(
            campaign=campaign, node_id=agent.removeprefix("node:"), token=token, tier=tier, replicate=r
        )
        for agent, r in swarms.items()
    )


def raw_aggregates(campaign: Campaign) -> dict:
    rows = (
        RoundMetrics.objects.filter(campaign=campaign)
        .values("arm", "tier", "round")
        .annotate(n=Count("id"), mean=Avg("reward"), low=Min("reward"), high=Max("reward"))
    )
    return {(r["arm"], r["tier"], r["round"]): (r["n"], r["mean"], r["low"], r["high"]) for r in rows}


def rolled_up(campaign: Campaign) -> dict:
    return {
        (a.arm, a.tier, a.round): (a.agents, a.reward_mean, a.reward_min, a.reward_max)
        for a in RoundAggregate.objects.filter(campaign=campaign)
    }


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        x[0] == y[0] and all(math.isclose(p, q) for p, q in zip(x[1:], y[1:], strict=True))
        for x, y in ((a[k], b[k]) for k in a)
    )


def noisy(agent: str, number: int) -> float:
    return random.Random(f"{agent}:{number}").random()


# --- statistics ---------------------------------------------------------------------------------


def test_gain_and_downsampling_step():
    assert series.gain_percent(12.0, 10.0) == pytest.approx(20.0)
    assert series.gain_percent(8.0, 10.0) == pytest.approx(-20.0)
    assert series.gain_percent(1.0, 0.0) is None and series.gain_percent(None, 1.0) is None
    assert [series.downsample_step(n) for n in (0, 1, 500, 501, 2000)] == [1, 1, 1, 2, 4]
    assert [estimates.interval_note(n) for n in (0, 1, 2)] == ["-", "no interval (1 node)", None]


def test_unpaired_ratio_interval():
    """stats.ratio_interval: the gain of two independent samples, each resampled on its own."""
    swarm, isolated = [0.52, 0.61, 0.55, 0.58], [0.40, 0.47, 0.43]
    low, high = stats.ratio_interval(swarm, isolated)
    point = np.mean(swarm) / np.mean(isolated) - 1
    assert low < point < high and 0.1 < low and high < 0.6
    assert stats.ratio_interval(swarm, isolated) == (low, high)  # seeded
    assert stats.ratio_interval(swarm, isolated, seed=1) != (low, high)
    # No spread in either arm: exactly the gain; one value in an arm: no interval at all.
    assert stats.ratio_interval([0.5, 0.5], [0.4, 0.4, 0.4]) == pytest.approx((0.25, 0.25))
    assert stats.ratio_interval([0.5], isolated) is None and stats.ratio_interval(swarm, [0.4]) is None
    assert stats.ratio_interval(swarm, [0.0, 0.0]) is None  # undefined gain
    # A negative baseline: the gain is relative to |baseline|, as gain_percent's.
    assert stats.ratio_interval([-0.5, -0.5], [-1.0, -1.0]) == pytest.approx((0.5, 0.5))


# --- rollups ------------------------------------------------------------------------------------


def test_rollups_equal_raw_aggregates_through_incremental_refreshes(db):
    campaign = make_campaign()
    workers = [f"node:w{i}" for i in range(6)]
    add_rows(campaign, "swarm", "tiny-1m", workers, range(0, 30), noisy)
    add_rows(campaign, "isolated", "tiny-1m", ["control:1", "control:2"], range(0, 25), noisy)
    rollups.refresh_rollups()
    assert same(rolled_up(campaign), raw_aggregates(campaign))
    assert rollups.refresh_rollups() == {"rows": 0}  # idle: nothing to do
    # New rounds, and a straggler filling in an old round: both touched keys are recomputed.
    add_rows(campaign, "swarm", "tiny-1m", workers, range(30, 33), noisy)
    add_rows(campaign, "swarm", "tiny-1m", ["node:late"], range(0, 2), noisy)
    stats = rollups.refresh_rollups()
    assert stats["rows"] >= 20 and stats["campaigns"] == [campaign.pk]
    assert same(rolled_up(campaign), raw_aggregates(campaign))
    # Agent blocks hold each agent's exact reward sum.
    sums = {
        a["agent"]: a["s"]
        for a in RoundMetrics.objects.filter(campaign=campaign)
        .values("agent")
        .annotate(s=Avg("reward") * Count("id"))
    }
    blocks: dict[str, float] = {}
    for block in AgentBlock.objects.filter(campaign=campaign):
        blocks[block.agent] = blocks.get(block.agent, 0.0) + block.reward_sum
    assert blocks.keys() == sums.keys()
    assert all(math.isclose(blocks[a], sums[a]) for a in sums)
    # Std is the population std across agents.
    agg = RoundAggregate.objects.get(campaign=campaign, arm="swarm", tier="tiny-1m", round=5)
    values = list(
        RoundMetrics.objects.filter(campaign=campaign, arm="swarm", round=5).values_list("reward", flat=True)
    )
    assert agg.reward_std == pytest.approx(np.std(values))
    assert agg.zero_std_share == pytest.approx(0.25) and agg.external_used == pytest.approx(4.0)


def test_a_large_backlog_is_rebuilt_in_one_pass(db, monkeypatch):
    monkeypatch.setattr(rollups, "COLD_ROWS", 50)
    campaign = make_campaign()
    add_rows(campaign, "swarm", "tiny-5m", [f"node:{i}" for i in range(10)], range(20), noisy)
    # A page load does not wait for it: it says so and shows what there is.
    payload = dashboard.dashboard_payload(campaign)
    assert payload["backlog"] == 51 and payload["series"]["tiny-5m"] == {}  # counted up to COLD_ROWS + 1
    stats = rollups.refresh_rollups()  # beat's
    assert stats["rebuilt"] == [campaign.pk]
    assert same(rolled_up(campaign), raw_aggregates(campaign))


def test_sparse_ids_are_not_mistaken_for_a_backlog(db):
    """Ids are not dense: after a million ids spent elsewhere (PostgreSQL's sequences never
    restart, not even when a test truncates the table), three new rows are three rows, and
    the live refresh aggregates them instead of waiting for beat's rebuild."""
    campaign = make_campaign()
    for number in range(3):
        RoundMetrics.objects.create(
            pk=1_000_000 + number,
            campaign=campaign,
            arm="swarm",
            tier="tiny-1m",
            agent="node:a",
            round=number,
            reward=0.5,
            metrics={},
        )
    assert rollups.backlog() == 3
    assert rollups.refresh_rollups(rebuild=False)["rows"] == 3
    assert same(rolled_up(campaign), raw_aggregates(campaign))


# --- the payload --------------------------------------------------------------------------------


def test_series_summary_and_gains_follow_the_definitions(db):
    campaign = make_campaign()
    swarm = [f"node:w{i}" for i in range(4)]
    # Swarm agents earn 0.5 per round, isolated seeds 0.4, filtered 0.25; rounds 0..9 (isolated
    # reached only 8 rounds, so the common horizon H is 8).
    add_rows(
        campaign,
        "swarm",
        "tiny-1m",
        swarm,
        range(10),
        lambda a, r: 0.5 + (0.1 if a.endswith("0") else -0.1 / 3),
    )
    add_rows(campaign, "isolated", "tiny-1m", ["control:1", "control:2"], range(8), lambda a, r: 0.4)
    add_rows(campaign, "filtered", "tiny-1m", ["control:3", "control:4"], range(10), lambda a, r: 0.25)
    payload = dashboard.dashboard_payload(campaign)
    s = payload["series"]["tiny-1m"]["swarm"]
    assert s["round"] == list(range(10)) and payload["step"] == 1
    assert s["mean"] == pytest.approx([0.5] * 10)
    assert s["std"][0] == pytest.approx(np.std([0.6, 0.5 - 0.1 / 3, 0.5 - 0.1 / 3, 0.5 - 0.1 / 3]))
    assert s["cumulative"] == pytest.approx([0.5 * (r + 1) for r in range(10)])
    assert payload["series"]["tiny-5m"] == {}
    summary = payload["summary"]["tiny-1m"]
    assert summary["horizon"] == 8
    assert summary["arms"]["swarm"]["cumulative"] == pytest.approx(4.0)
    assert summary["arms"]["isolated"]["cumulative"] == pytest.approx(3.2)
    assert summary["arms"]["filtered"]["cumulative"] == pytest.approx(2.0)
    assert summary["gain_vs_isolated"] == pytest.approx(25.0)
    assert summary["gain_vs_filtered"] == pytest.approx(100.0)
    # One swarm (R = 1): one independent value, no interval; its 4 nodes' spread, labelled.
    swarm_row = summary["arms"]["swarm"]
    assert (swarm_row["agents"], swarm_row["nodes"], swarm_row["low"]) == (1, 4, None)
    assert swarm_row["note"] == series.ONE_SWARM == "one swarm: no interval"
    spread = swarm_row["spread"]
    assert spread["low"] < 4.0 < spread["high"] and spread["note"] == series.NODE_SPREAD
    assert summary["gains"]["isolated"]["note"] == "one swarm: no interval for the gain"
    assert summary["gains"]["isolated"]["low"] is None and summary["gains"]["isolated"]["n"] == [1, 2]
    assert summary["arms"]["isolated"]["low"] == pytest.approx(3.2)  # identical seeds: no spread
    assert payload["summary"]["tiny-5m"]["arms"]["swarm"] is None
    assert "std" in payload["band"] and "one agent has no band" in payload["band"]


def test_point_and_interval_come_from_the_same_rounds_mid_run(db):
    """Issue #26's constructed campaign: the swarm has run 30 rounds, the control 45, and the
    control's curve drops after round 30. The summary compares rounds 0..29 (H = 30); an
    interval from whole 50-round blocks took the control's rounds 30..44 in and sat far below
    its own point (and the gain's far above it). Point and interval now come from the same
    per-agent values over exactly rounds 0..H-1, so each interval holds its point."""
    campaign = make_campaign(replicates=2)
    swarm = {f"node:w{i}": 0.50 + 0.02 * i for i in range(4)}
    add_nodes(campaign, "tiny-1m", {agent: i // 2 for i, agent in enumerate(swarm)})  # swarms 0.51, 0.55
    seeds = {f"control:{i}": 0.48 + 0.02 * i for i in range(3)}
    add_rows(campaign, "swarm", "tiny-1m", list(swarm), range(30), lambda a, r: swarm[a])
    add_rows(
        campaign, "isolated", "tiny-1m", list(seeds), range(45), lambda a, r: seeds[a] if r < 30 else 0.05
    )
    tier = dashboard.dashboard_payload(campaign)["summary"]["tiny-1m"]
    assert tier["horizon"] == 30
    assert tier["reference"] == "isolated" and tier["gain"] == tier["gains"]["isolated"]  # the headline
    for arm in ("swarm", "isolated"):
        row = tier["arms"][arm]
        assert row["low"] <= row["cumulative"] <= row["high"], (arm, row)
    assert tier["arms"]["isolated"]["cumulative"] == pytest.approx(30 * 0.50)
    gain = tier["gains"]["isolated"]
    assert gain["value"] == pytest.approx((0.53 / 0.50 - 1) * 100)
    assert gain["low"] <= gain["value"] <= gain["high"], gain
    # H at a block's edge and past it: the cut block and the whole ones add up the same way.
    add_rows(campaign, "swarm", "tiny-1m", list(swarm), range(30, 55), lambda a, r: swarm[a])
    add_rows(campaign, "isolated", "tiny-1m", list(seeds), range(45, 60), lambda a, r: 0.05)
    tier = dashboard.dashboard_payload(campaign)["summary"]["tiny-1m"]
    assert tier["horizon"] == 55
    assert tier["arms"]["isolated"]["cumulative"] == pytest.approx(30 * 0.50 + 25 * 0.05)
    assert tier["arms"]["swarm"]["cumulative"] == pytest.approx(55 * 0.53)
    for row in (*[tier["arms"][a] for a in ("swarm", "isolated")], tier["gains"]["isolated"]):
        point = row.get("cumulative", row.get("value"))
        assert row["low"] <= point <= row["high"], row
    # The time course: thirds of H, each from exactly its rounds; the control's drop after
    # round 30 shows in the last window only.
    windows = tier["windows"]
    assert [(w["start"], w["end"]) for w in windows] == [(0, 18), (18, 36), (36, 55)]
    assert windows[0]["arms"]["isolated"]["mean"] == pytest.approx(0.50)
    assert windows[1]["arms"]["isolated"]["mean"] == pytest.approx((12 * 0.50 + 6 * 0.05) / 18)
    assert windows[2]["arms"]["isolated"]["mean"] == pytest.approx(0.05)
    assert windows[2]["arms"]["swarm"]["agents"] == 2  # swarms, not nodes
    for window in windows:
        gain = window["gains"]["isolated"]
        assert gain["n"] == [2, 3] and gain["low"] <= gain["value"] <= gain["high"], window
    assert windows[0]["gains"]["isolated"]["value"] == pytest.approx(6.0)
    assert windows[2]["gains"]["isolated"]["value"] == pytest.approx((0.53 / 0.05 - 1) * 100)


def test_rounds_not_yet_reported_by_every_live_agent_stay_out_of_the_numbers(db):
    """Issue #26 item 5: node a is 3 rounds ahead of nodes b and c. Its rounds 5..7 are one node's
    values; they are sent (the page draws them apart, with their n) but no summary, window or
    share sums them: the settled rounds are 0..4 while b and c are connected, all 8 once they
    have left (a node that left reports nothing more), and a running control seed counts like a
    connected node."""
    campaign = make_campaign()
    token, _ = create_token(campaign)
    for name in "abc":
        WorkerNode.objects.create(
            campaign=campaign, node_id=name, token=token, tier="tiny-1m", connected=True
        )
    add_rows(campaign, "swarm", "tiny-1m", ["node:b", "node:c"], range(5), lambda a, r: 0.5)
    add_rows(campaign, "swarm", "tiny-1m", ["node:a"], range(8), lambda a, r: 0.5 if r < 5 else 1.0)
    run = ControlRun.objects.create(
        campaign=campaign, tier="tiny-1m", arm="isolated", seed=0, state=ControlRun.State.RUNNING
    )
    add_rows(campaign, "isolated", "tiny-1m", [f"control:{run.pk}"], range(6), lambda a, r: 0.5)
    payload = dashboard.dashboard_payload(campaign)
    assert payload["settled"]["tiny-1m"] == {"swarm": 5, "isolated": 6}
    assert payload["series"]["tiny-1m"]["swarm"]["round"] == list(range(8))  # all sent, with n
    assert payload["series"]["tiny-1m"]["swarm"]["agents"][5:] == [1, 1, 1]
    tier = payload["summary"]["tiny-1m"]
    assert tier["horizon"] == 5
    assert tier["arms"]["swarm"]["cumulative"] == pytest.approx(5 * 0.5)  # no 1.0 of node a
    assert payload["pool"]["external_by_tier"]["tiny-1m"]["round"] == 4
    WorkerNode.objects.filter(node_id__in=["b", "c"]).update(connected=False)
    ControlRun.objects.filter(pk=run.pk).update(state=ControlRun.State.COMPLETED)
    payload = dashboard.dashboard_payload(campaign)
    assert payload["settled"]["tiny-1m"] == {"swarm": 8, "isolated": 6}
    assert payload["summary"]["tiny-1m"]["horizon"] == 6


def test_the_compute_axis_is_completions_generated_per_agent(db):
    """Issue #26 item 7: each series carries, beside its rounds, the completions generated per
    agent up to each round (the running sum of the per-round mean of generation/completions),
    so the page can draw reward against compute; over-generation's x runs ahead of the swarm's.
    None from the first round an agent did not report it (an older worker), not a guess."""
    campaign = make_campaign()
    for arm, agents, per_round in (("swarm", ["node:a", "node:b"], 64.0), ("dyn", ["control:9"], 96.0)):
        RoundMetrics.objects.bulk_create(
            RoundMetrics(
                campaign=campaign,
                arm=arm,
                tier="tiny-1m",
                agent=agent,
                round=number,
                reward=0.5,
                metrics={"generation/completions": per_round + 32 * (number == 1 and agent == "node:b")},
            )
            for agent in agents
            for number in range(3)
        )
    RoundMetrics.objects.create(
        campaign=campaign, arm="swarm", tier="tiny-1m", agent="node:a", round=3, reward=0.5
    )
    series = dashboard.dashboard_payload(campaign)["series"]["tiny-1m"]
    assert series["swarm"]["completions"] == [64.0, 144.0, 208.0, None]  # round 1: (64 + 96) / 2
    assert series["dyn"]["completions"] == [96.0, 192.0, 288.0]
    live = dashboard.points(campaign.pk, {("tiny-1m", "dyn", 2)})
    assert live == [
        {
            "tier": "tiny-1m",
            "arm": "dyn",
            "round": 2,
            "agents": 1,
            "mean": 0.5,
            "std": 0.0,
            "completions": 96.0,
            "units": 1,
            "unit_mean": 0.5,
            "unit_std": 0.0,
        }
    ]


def test_a_control_run_never_reads_running_under_a_paused_or_finished_campaign(db):
    """The controls table follows the campaign's badge: a run whose task is still marked
    running waits while the campaign is paused and is finishing its round once it stopped."""
    campaign = make_campaign()
    ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0, state="running")
    statuses = {}
    for state in ("running", "paused", "stopped", "completed"):
        Campaign.objects.filter(pk=campaign.pk).update(state=state)
        campaign.refresh_from_db()
        statuses[state] = status_tables.control_rows(campaign)[0]["status"]
    assert statuses == {
        "running": "running",
        "paused": "waiting (campaign paused)",
        "stopped": "finishing its round",
        "completed": "finishing its round",
    }


def test_every_gain_and_mean_has_its_interval_and_n_and_one_agent_has_none(db):
    """Arms of 4 workers, 3 seeds and 1 seed: intervals for the first two and their gain (a t
    interval over both arms' units), the words "no interval (1 node)" instead of
    a zero-width interval for the single seed and for the gain that involves it; one swarm says
    that it is one."""
    campaign = make_campaign(replicates=4)
    swarm = {f"node:w{i}": 0.5 + 0.04 * i for i in range(4)}
    add_nodes(campaign, "tiny-1m", {agent: i for i, agent in enumerate(swarm)})  # 4 swarms
    isolated = {f"control:{i}": 0.35 + 0.05 * i for i in range(3)}
    add_rows(campaign, "swarm", "tiny-1m", list(swarm), range(10), lambda a, r: swarm[a])
    add_rows(campaign, "isolated", "tiny-1m", list(isolated), range(10), lambda a, r: isolated[a])
    add_rows(campaign, "filtered", "tiny-1m", ["control:9"], range(10), lambda a, r: 0.3)
    add_rows(campaign, "swarm", "tiny-5m", ["node:only"], range(10), lambda a, r: 0.2)
    add_rows(campaign, "isolated", "tiny-5m", ["control:20"], range(10), lambda a, r: 0.1)
    summary = dashboard.dashboard_payload(campaign)["summary"]
    tier = summary["tiny-1m"]
    arms, gains = tier["arms"], tier["gains"]
    assert [arms[a]["agents"] for a in ("swarm", "isolated", "filtered")] == [4, 3, 1]
    for arm in ("swarm", "isolated"):
        assert arms[arm]["low"] < arms[arm]["cumulative"] < arms[arm]["high"] and arms[arm]["note"] is None
    assert arms["filtered"]["cumulative"] == pytest.approx(3.0)
    assert arms["filtered"]["low"] is None and arms["filtered"]["high"] is None
    assert arms["filtered"]["note"] == "no interval (1 node)"
    # Gain vs isolated: point from the cumulative rewards, interval from the agents' means.
    gain = gains["isolated"]
    assert gain["value"] == pytest.approx((0.56 / 0.4 - 1) * 100) == tier["gain_vs_isolated"]
    # Its interval: the delta method's t interval, Welch's df rounded down (issue #47), worked
    # by hand: v_a = s_a² / (4 · 0.40²), v_b = 0.56² s_b² / (3 · 0.40⁴), df = 3.57 -> 3, t = 3.1824.
    v_a = np.var(list(swarm.values()), ddof=1) / (4 * 0.4**2)
    v_b = 0.56**2 * np.var(list(isolated.values()), ddof=1) / (3 * 0.4**4)
    assert (v_a + v_b) ** 2 / (v_a**2 / 3 + v_b**2 / 2) == pytest.approx(3.57, abs=0.01)
    half = 3.182446 * math.sqrt(v_a + v_b) * 100
    assert (gain["low"], gain["high"]) == pytest.approx((40 - half, 40 + half), abs=1e-3)
    assert gain["low"] < gain["value"] < gain["high"] and gain["n"] == [4, 3] and gain["note"] is None
    # Every swarm above every seed: the exact permutation test's smallest p, 2 / C(7, 4) = 2 / 35.
    assert gain["p"] == gain["min_p"] == pytest.approx(2 / 35)
    # Gain vs the single filtered seed: the point value, no interval, and the words.
    gain = gains["filtered"]
    assert gain["value"] == pytest.approx((0.56 / 0.3 - 1) * 100)
    assert gain["low"] is None and gain["high"] is None
    assert gain["n"] == [4, 1] and gain["note"] == "no interval (1 node)"
    # One agent in every arm (the demo of old): nothing looks precise.
    small = summary["tiny-5m"]
    assert small["arms"]["swarm"]["note"] == "one swarm: no interval"
    assert small["arms"]["swarm"]["spread"] is None  # one node: nothing to describe either
    assert small["arms"]["isolated"]["note"] == "no interval (1 node)"
    assert small["gains"]["isolated"]["value"] == pytest.approx(100.0)
    assert small["gains"]["isolated"]["low"] is None
    assert small["gains"]["isolated"]["note"] == "one swarm: no interval for the gain"
    # No baseline arm at all: no gain, no words.
    assert small["gains"]["filtered"] == {
        "value": None,
        "low": None,
        "high": None,
        "n": [1, 0],
        "note": None,
        "p": None,
        "min_p": 1.0,
    }


def test_the_per_round_difference_counts_swarms_and_seeds_not_nodes(db):
    """The series the paired-difference chart draws from: per round, the swarm arm's units are
    its swarms (the mean over each swarm's nodes), a control's its seeds; so two swarms of two
    nodes give n = 2 and the spread of the two swarm means, not n = 4 and the nodes' spread,
    in the page's series, its live points and through an incremental refresh."""
    campaign = make_campaign(replicates=2)
    nodes = {"node:a0": 0.5, "node:a1": 0.7, "node:b0": 0.3, "node:b1": 0.5}  # swarm means 0.6, 0.4
    add_nodes(campaign, "tiny-1m", {"node:a0": 0, "node:a1": 0, "node:b0": 1, "node:b1": 1})
    add_rows(campaign, "swarm", "tiny-1m", list(nodes), range(3), lambda a, r: nodes[a])
    add_rows(campaign, "isolated", "tiny-1m", ["control:1", "control:2", "control:3"], range(3), noisy)
    payload = dashboard.dashboard_payload(campaign)
    swarm = payload["series"]["tiny-1m"]["swarm"]
    assert swarm["agents"] == [4, 4, 4] and swarm["units"] == [2, 2, 2]
    assert swarm["unit_mean"] == pytest.approx([0.5] * 3)
    assert swarm["unit_std"] == pytest.approx([0.1] * 3)  # the two swarm means, not the four nodes
    assert swarm["std"] == pytest.approx([np.std(list(nodes.values()))] * 3)
    isolated = payload["series"]["tiny-1m"]["isolated"]
    assert isolated["units"] == [3, 3, 3]
    seeds = [noisy(f"control:{i}", 0) for i in (1, 2, 3)]
    assert (isolated["unit_mean"][0], isolated["unit_std"][0]) == pytest.approx(
        (np.mean(seeds), np.std(seeds))
    )
    # A new round through the incremental refresh, and its live point.
    add_rows(campaign, "swarm", "tiny-1m", list(nodes), range(3, 4), lambda a, r: nodes[a] + 0.1)
    rollups.refresh_rollups()
    (point,) = dashboard.points(campaign.pk, {("tiny-1m", "swarm", 3)})
    assert (point["agents"], point["units"]) == (4, 2)
    assert (point["unit_mean"], point["unit_std"]) == pytest.approx((0.6, 0.1))


def welch_by_hand(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's 95% t interval of mean(a) - mean(b), worked here from its definition with df
    rounded down and the t table's quantiles (not stats'), for the tests' designs."""
    table = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469}
    v_a, v_b = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    df = math.floor((v_a + v_b) ** 2 / (v_a**2 / (len(a) - 1) + v_b**2 / (len(b) - 1)))
    d = np.mean(a) - np.mean(b)
    return d - table[df] * math.sqrt(v_a + v_b), d + table[df] * math.sqrt(v_a + v_b)


def test_the_per_round_difference_band_is_welchs_t_interval_over_units_live_too(db):
    """The paired-difference chart's band comes from the server (issue #47): per round, Welch's
    t interval of the swarms' mean minus the seeds' (the two swarm means 0.6 and 0.4 against 3
    seeds), in the page's payload and, for a round that arrives later, in the socket's bands;
    none against a control with one seed. A 1.96-standard-error band (the browser's of old) is
    about half as wide at these n."""
    campaign = make_campaign(replicates=2)
    nodes = {"node:a0": 0.5, "node:a1": 0.7, "node:b0": 0.3, "node:b1": 0.5}
    add_nodes(campaign, "tiny-1m", {"node:a0": 0, "node:a1": 0, "node:b0": 1, "node:b1": 1})
    add_rows(campaign, "swarm", "tiny-1m", list(nodes), range(3), lambda a, r: nodes[a])
    add_rows(campaign, "isolated", "tiny-1m", ["control:1", "control:2", "control:3"], range(3), noisy)
    add_rows(campaign, "filtered", "tiny-1m", ["control:9"], range(3), noisy)
    bands = dashboard.dashboard_payload(campaign)["difference_bands"]["tiny-1m"]
    seeds = [noisy(f"control:{i}", 0) for i in (1, 2, 3)]
    low, high = welch_by_hand([0.6, 0.4], seeds)
    assert bands["isolated"]["round"] == [0, 1, 2]
    assert (bands["isolated"]["low"][0], bands["isolated"]["high"][0]) == pytest.approx((low, high), abs=1e-4)
    assert bands["isolated"]["difference"][0] == pytest.approx(0.5 - np.mean(seeds))
    normal = 1.96 * math.sqrt(np.var([0.6, 0.4], ddof=1) / 2 + np.var(seeds, ddof=1) / 3)
    assert high - low > 3 * normal  # t_{0.975, 1} = 12.7 where n = 2 swarms gives df 1
    assert bands["filtered"]["low"] == [None] * 3 and bands["filtered"]["high"] == [None] * 3
    # A later round of the control, live: its band against the swarm, the same definition.
    add_rows(campaign, "swarm", "tiny-1m", list(nodes), range(3, 4), lambda a, r: nodes[a] + 0.1)
    add_rows(campaign, "isolated", "tiny-1m", ["control:1", "control:2", "control:3"], range(3, 4), noisy)
    rollups.refresh_rollups()
    (band,) = dashboard.point_bands(campaign.pk, {("tiny-1m", "isolated", 3)})
    seeds = [noisy(f"control:{i}", 3) for i in (1, 2, 3)]
    assert (band["tier"], band["arm"], band["round"]) == ("tiny-1m", "isolated", 3)
    assert (band["low"], band["high"]) == pytest.approx(welch_by_hand([0.7, 0.5], seeds), abs=1e-4)
    # The swarm's round changes its band against every control that has the round.
    live = dashboard.point_bands(campaign.pk, {("tiny-1m", "swarm", 3)})
    assert [(b["arm"], b["round"]) for b in live] == [("isolated", 3)]


def test_the_external_share_is_shown_per_tier_with_its_interval_and_n(db):
    """Tiers apart (their models differ, so do their shares): each tier's latest round with a
    known batch, sum external / sum trained over its nodes, a bootstrap interval over nodes."""
    campaign = make_campaign()
    external = {"tiny-1m": [0.0, 2.0, 4.0, 6.0], "tiny-5m": [1.0, 1.0, 1.0]}
    for tier, counts in external.items():
        RoundMetrics.objects.bulk_create(
            RoundMetrics(
                campaign=campaign,
                arm="swarm",
                tier=tier,
                agent=f"node:{tier}-{i}",
                round=number,
                reward=0.5,
                # Round 0: no external rollouts yet; round 1: the counts above.
                metrics={"batch/local_used": 8.0 - ext, "batch/external_used": ext if number else 0.0},
            )
            for i, ext in enumerate(counts)
            for number in range(2)
        )
    pool = dashboard.dashboard_payload(campaign)["pool"]
    small, large = pool["external_by_tier"]["tiny-1m"], pool["external_by_tier"]["tiny-5m"]
    assert small["round"] == 1 and small["agents"] == 4 and small["note"] is None
    assert small["share"] == pytest.approx(12 / 32)
    assert small["low"] < small["share"] < small["high"]
    expected = stats.paired_ratio_interval([0, 2, 4, 6], [8] * 4, series.PAGE_BOOTSTRAP_RESAMPLES)
    assert (small["low"], small["high"]) == pytest.approx((expected[0] + 1, expected[1] + 1))
    assert large["share"] == large["low"] == large["high"] == pytest.approx(1 / 8) and large["agents"] == 3
    assert pool["series"]["tiny-1m"]["external"] == pytest.approx([0.0, 12 / 32])


def test_long_runs_are_downsampled_and_keep_their_cumulative(db):
    campaign = make_campaign(rounds=1200)
    add_rows(campaign, "swarm", "tiny-1m", ["node:a", "node:b"], range(1200), lambda a, r: (r % 10) / 10)
    payload = dashboard.dashboard_payload(campaign, max_points=500)
    s = payload["series"]["tiny-1m"]["swarm"]
    assert payload["step"] == 3 and len(s["round"]) == 400
    assert s["round"][:2] == [2, 5] and s["round"][-1] == 1199
    assert s["cumulative"][-1] == pytest.approx(sum((r % 10) / 10 for r in range(1200)))
    assert s["mean"][0] == pytest.approx(0.1)  # rounds 0, 1, 2: 0.0, 0.1, 0.2


def test_pool_panel_and_workers_table(db):
    campaign = make_campaign(pool_window=4)
    token, _ = create_token(campaign)
    node = WorkerNode.objects.create(
        campaign=campaign,
        node_id="abc",
        token=token,
        tier="tiny-1m",
        round=3,
        last_reward=0.4,
        rejected_submissions=1,
        backend="transformers",
        connected=True,
        hardware={"device": "cpu", "device_name": "x86_64", "ram_bytes": 8 * 1024**3},
    )
    lease = Lease.objects.create(
        lease_id="l", campaign=campaign, node=node, round=0, questions=[], deadline=node.created_at
    )
    for sequence in range(1, 7):
        PoolRollout.objects.create(
            campaign=campaign,
            sequence=sequence,
            rollout_id=f"r{sequence}",
            node=node,
            lease=lease,
            tier="tiny-1m",
            round=0,
            task="chain_sum",
            question_seed=0,
            question_index=sequence,
            record={},
            mean_reward=0.5,
            zero_advantage=sequence in (5, 6),
        )
    Campaign.objects.filter(pk=campaign.pk).update(rollout_sequence=6)
    add_rows(campaign, "swarm", "tiny-1m", ["node:abc"], range(3), lambda a, r: 0.4)
    payload = dashboard.dashboard_payload(campaign)
    pool = payload["pool"]
    assert (pool["shared"], pool["window"], pool["size"]) == (6, 4, 4)
    assert pool["zero_advantage_share"] == pytest.approx(0.5)  # 5 and 6 of the window 3..6
    assert pool["external_share"] == pytest.approx(0.5)  # 4 external of 8 trained
    assert list(pool["series"]) == ["tiny-1m"]  # one series per tier: tiers are never mixed
    assert pool["series"]["tiny-1m"]["zero_advantage"] == pytest.approx([0.25] * 3)
    # Per tier: one node, so its share has no interval and says so.
    assert pool["external_by_tier"] == {
        "tiny-1m": {
            "round": 2,
            "share": pytest.approx(0.5),
            "low": None,
            "high": None,
            "agents": 1,
            "note": "no interval (1 node)",
        }
    }
    (worker,) = payload["workers"]
    assert worker == {
        "agent": "node:abc",
        "node": "abc",
        "name": "worker · abc",
        "state": "healthy",
        "connected": True,
        "status": "healthy",
        "tier": "tiny-1m",
        "hardware": "cpu x86_64 · 8 GiB RAM",
        "backend": "transformers",
        "round": 3,
        "reward": 0.4,
        "rejected": 1,
    }
    assert payload["worker_counts"] == {"healthy": 1, "connected": 1}
    curve = dashboard.agent_series(campaign, "node:abc")
    assert (
        curve["round"] == [0, 1, 2]
        and curve["reward"] == pytest.approx([0.4] * 3)
        and curve["tier"] == "tiny-1m"
    )


# --- live over a real server --------------------------------------------------------------------


async def open_dashboard(base: str, campaign_id: int):
    return await websockets.connect(
        base.replace("http", "ws", 1) + f"/ws/campaigns/{campaign_id}/",
        origin=base,
        open_timeout=10,
    )


# Every frame the socket sends must decode as one of its declarations (swarm_app/core/messages.py).
SERVER_FRAME = msgspec.json.Decoder(messages.PointsFrame | messages.TablesFrame | messages.StateFrame)


async def next_of(ws, kind: str, seconds: float = 10.0) -> dict:
    async with asyncio.timeout(seconds):
        while True:
            raw = await ws.recv()
            SERVER_FRAME.decode(raw)
            message = json.loads(raw)
            if message["type"] == kind:
                return message


def record(run: ControlRun, number: int, metrics: dict) -> None:
    """record_control_metrics from a helper thread, closing that thread's connection."""
    try:
        record_control_metrics(run, number, metrics)
    finally:
        connection.close()


def test_live_points_reach_the_socket_coalesced_and_fast(coordinator, tmp_path):
    campaign = make_campaign()
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    latencies = []

    async def scenario():
        ws = await open_dashboard(coordinator, campaign.pk)
        await ws.send(json.dumps({"type": "watch", "agents": [f"control:{run.pk}"]}))
        # An event that is not its declaration is dropped where it arrives; the socket goes on.
        malformed = {"type": "metrics.points", "points": [{"round": 7}]}
        await get_channel_layer().group_send(campaign_group(campaign.pk), malformed)
        await asyncio.sleep(0.5)
        for number in range(3):
            stored = time.time()
            await in_thread(record, run, number, {"reward": 0.1 * number, "loss": 0.0})
            message = await next_of(ws, "points")
            latencies.append(time.time() - stored)
            assert message["points"] == [
                {
                    "tier": "tiny-1m",
                    "arm": "isolated",
                    "round": number,
                    "agents": 1,
                    "mean": pytest.approx(0.1 * number),
                    "std": 0.0,
                    "completions": None,  # this report has no generation/completions
                    "units": 1,
                    "unit_mean": pytest.approx(0.1 * number),
                    "unit_std": 0.0,
                }
            ]
            assert message["agents"] == [
                {"agent": f"control:{run.pk}", "round": number, "reward": pytest.approx(0.1 * number)}
            ]
        # A burst of reports becomes a few pushes of aggregates, not one message per report.
        for number in range(3, 23):
            await in_thread(record, run, number, {"reward": 0.5})
        seen: set[int] = set()
        pushes = 0
        while len(seen) < 20:
            message = await next_of(ws, "points")
            pushes += 1
            seen.update(p["round"] for p in message["points"])
        assert seen == set(range(3, 23)) and pushes < 20
        tables = await next_of(ws, "tables", seconds=20)
        assert tables["controls"][0]["round"] == 23 and "summary" in tables
        await ws.close()

    asyncio.run(scenario())
    print(f"live update latencies (s): {[round(x, 3) for x in latencies]}")
    assert max(latencies) < 2.0
    assert "dropped a malformed metrics.points event" in (tmp_path / "daphne.log").read_text()


def test_the_viewers_of_a_campaign_share_one_computed_points_frame(coordinator):
    """A server reads a flush's aggregates once for all its viewers of the campaign
    (web/consumers.CampaignFeed), not once per viewer: three pages get the same points frame,
    computed at one moment (one sent_at); the page that watches an agent gets its point in it."""
    campaign = make_campaign()
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)

    async def first_with(ws, number: int) -> dict:
        while True:
            message = await next_of(ws, "points")
            if number in {p["round"] for p in message["points"]}:
                return message

    async def scenario() -> list[list[dict]]:
        pages = [await open_dashboard(coordinator, campaign.pk) for _ in range(3)]
        await pages[0].send(json.dumps({"type": "watch", "agents": [f"control:{run.pk}"]}))
        await asyncio.sleep(0.5)
        seen = []
        for number in range(3):
            await in_thread(record, run, number, {"reward": 0.1 * number, "loss": 0.0})
            seen.append([await first_with(page, number) for page in pages])
        for page in pages:
            await page.close()
        return seen

    for number, frames in enumerate(asyncio.run(scenario())):
        assert len({frame["sent_at"] for frame in frames}) == 1, [frame["sent_at"] for frame in frames]
        assert frames[0]["points"] == frames[1]["points"] == frames[2]["points"]
        assert frames[0]["bands"] == frames[1]["bands"] == frames[2]["bands"]
        assert {
            "agent": f"control:{run.pk}",
            "round": number,
            "reward": pytest.approx(0.1 * number),
        } in frames[0]["agents"]
        assert frames[1]["agents"] == frames[2]["agents"] == []


def test_a_slow_viewer_holds_one_merged_points_value_not_a_queue():
    """Flushes offered to a viewer that has not sent the last one merge into one value (the
    newer aggregate of a round wins): its pending points grow with the rounds, not the flushes."""

    def flush(number: int, mean: float, at: float) -> consumers.SharedPoints:
        point = messages.AggregatePoint(
            tier="t", arm="swarm", round=number, agents=1, mean=mean, std=0.0, completions=None,
            units=1, unit_mean=mean, unit_std=0.0,
        )  # fmt: skip
        band = messages.Band(tier="t", arm="isolated", round=number, difference=mean, low=None, high=None)
        return consumers.SharedPoints([point], [band], at)

    pending = None
    for flushed in range(1000):
        offered = flush(flushed % 3, float(flushed), float(flushed))
        pending = offered if pending is None else pending.then(offered)
    assert pending is not None and pending.sent_at == 999.0
    assert sorted((p.round, p.mean) for p in pending.points) == [(0, 999.0), (1, 997.0), (2, 998.0)]
    assert sorted((b.round, b.difference) for b in pending.bands) == [(0, 999.0), (1, 997.0), (2, 998.0)]
    frame = json.loads(pending.frame([]))
    assert frame["type"] == "points" and frame["agents"] == [] and len(frame["points"]) == 3


def test_private_campaigns_are_not_streamed_to_anonymous_viewers(coordinator):
    campaign = make_campaign(public=False)

    async def scenario():
        with pytest.raises(websockets.InvalidStatus) as refused:
            await open_dashboard(coordinator, campaign.pk)
        return refused.value.response.status_code

    assert asyncio.run(scenario()) == 403


def test_sockets_from_foreign_origins_are_refused(coordinator):
    campaign = make_campaign()

    url = coordinator.replace("http", "ws", 1) + f"/ws/campaigns/{campaign.pk}/"

    async def scenario():
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(url, origin="http://evil.example", open_timeout=10)
        assert refused.value.response.status_code == 403
        # The same socket from the coordinator's own origin opens: the origin was refused, not the URL.
        async with websockets.connect(url, origin=coordinator, open_timeout=10):
            pass

    asyncio.run(scenario())


def test_export_streams_through_the_real_server(coordinator):
    campaign = make_campaign()
    add_rows(campaign, "swarm", "tiny-1m", [f"node:{i}" for i in range(5)], range(1000), noisy)
    with urllib.request.urlopen(
        f"{coordinator}/api/campaigns/{campaign.pk}/metrics?format=csv", timeout=60
    ) as r:
        lines = r.read().decode().splitlines()
    assert len(lines) == 5001 and lines[0].startswith("campaign,arm,tier,agent,round,reward")
    with urllib.request.urlopen(
        f"{coordinator}/api/campaigns/{campaign.pk}/metrics?format=json", timeout=60
    ) as r:
        body = json.load(r)
    assert len(body["rows"]) == 5000
    with urllib.request.urlopen(f"{coordinator}/api/campaigns/{campaign.pk}/dashboard", timeout=60) as r:
        payload = json.load(r)
    assert len(payload["series"]["tiny-1m"]["swarm"]["round"]) == 500


def test_cached_tables_never_serve_a_stale_campaign_state(db):
    campaign = make_campaign()
    first = dashboard.cached_tables(campaign.pk)
    assert first["campaign"]["state"] == "running"
    Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.State.PAUSED)
    again = dashboard.cached_tables(campaign.pk)
    assert again["campaign"]["state"] == "paused"  # fresh, though the rest came from the cache
    assert again["summary"] is first["summary"]


def test_worker_status_says_finished_for_a_node_that_reached_the_rounds_and_left():
    assert status_tables.worker_status("healthy", False, 60, 60) == "finished"
    assert status_tables.worker_status("offline", False, 61, 60) == "finished"
    assert status_tables.worker_status("healthy", False, 12, 60) == "healthy (disconnected)"
    assert status_tables.worker_status("healthy", True, 60, 60) == "healthy"
    assert status_tables.worker_status("banned", False, 60, 60) == "banned"
    assert status_tables.worker_status("offline", False, 3, 60) == "offline"


def test_new_control_arms_and_their_mechanism_are_shown_with_intervals_and_n(db):
    """Self-replay (2 seeds) and over-generation (1 seed) beside the swarm: their own summary
    columns and gains, and the mechanism table per arm (rollups of the agents' metrics) with an
    interval over agents and n, or the words for one agent; over-generation's questions per
    round (its generation cost) beside its reward. Filtered is off and has no data: no column."""
    from worker.shared.campaign import ControlsConfig

    controls = ControlsConfig(isolated=True, filtered=False, seeds=2, self_replay=True, over_generation=True)
    campaign = make_campaign(controls=controls, replicates=2)
    swarm = {f"node:w{i}": 0.5 + 0.04 * i for i in range(4)}
    add_nodes(campaign, "tiny-1m", {agent: i % 2 for i, agent in enumerate(swarm)})  # w0+w2, w1+w3
    own = {"control:1": 0.4, "control:2": 0.5}
    add_rows(campaign, "swarm", "tiny-1m", list(swarm), range(6), lambda a, r: swarm[a])
    add_rows(campaign, "self", "tiny-1m", list(own), range(6), lambda a, r: own[a])
    add_rows(campaign, "dyn", "tiny-1m", ["control:3"], range(6), lambda a, r: 0.45)
    mechanism = {
        "node:w0": {
            "generation/questions": 8.0,
            "batch/external_from_others": 4.0,
            "batch/external_age": 0.5,
        },
        "node:w1": {
            "generation/questions": 8.0,
            "batch/external_from_others": 3.0,
            "batch/external_age": 1.5,
        },
        "node:w2": {
            "generation/questions": 8.0,
            "batch/external_from_others": 4.0,
            "batch/external_age": 0.5,
        },
        "node:w3": {
            "generation/questions": 8.0,
            "batch/external_from_others": 3.0,
            "batch/external_age": 1.5,
        },
        "control:1": {
            "generation/questions": 8.0,
            "batch/external_from_others": 0.0,
            "batch/external_age": 1.0,
        },
        "control:2": {
            "generation/questions": 8.0,
            "batch/external_from_others": 0.0,
            "batch/external_age": 2.0,
        },
    }
    for row in RoundMetrics.objects.filter(campaign=campaign):
        extra = mechanism.get(row.agent) or {"generation/questions": 10.0 + row.round % 2}
        row.metrics = {**row.metrics, **extra, "batch/informative_groups": 8.0, "grad_norm_clipped": 1.0}
        row.save()
    payload = dashboard.dashboard_payload(campaign)
    assert [a["arm"] for a in payload["arms"]] == ["swarm", "isolated", "self", "dyn"]
    assert payload["arms"][2]["label"] == "self-replay" and payload["arms"][3]["label"] == "over-generation"
    tier = payload["summary"]["tiny-1m"]
    assert tier["horizon"] == 6 and tier["arms"]["self"]["agents"] == 2
    assert tier["arms"]["self"]["cumulative"] == pytest.approx(0.45 * 6)
    assert tier["arms"]["self"]["low"] < 0.45 * 6 < tier["arms"]["self"]["high"]
    assert tier["arms"]["dyn"]["note"] == "no interval (1 node)" and tier["arms"]["dyn"]["low"] is None
    assert tier["gains"]["self"]["value"] == pytest.approx((0.56 / 0.45 - 1) * 100)
    assert tier["gains"]["self"]["n"] == [2, 2] and tier["gains"]["self"]["low"] is not None
    assert tier["gains"]["dyn"]["note"] == "no interval (1 node)"
    mech = payload["mechanism"]["tiny-1m"]["arms"]
    assert set(mech) == {"swarm", "self", "dyn"}
    cost = mech["dyn"]["generation/questions"]
    assert cost["mean"] == pytest.approx(10.5) and cost["agents"] == 1
    assert cost["low"] is None and cost["note"] == "no interval (1 node)"
    assert mech["swarm"]["generation/questions"]["mean"] == pytest.approx(8.0)
    others = mech["self"]["batch/external_from_others"]
    assert (others["mean"], others["agents"], others["note"]) == (0.0, 2, None)
    age = mech["self"]["batch/external_age"]
    assert age["mean"] == pytest.approx(1.5) and age["low"] < 1.5 < age["high"]
    # The swarm's mechanism per swarm: w0 + w2 took 4 from others, w1 + w3 took 3; the t interval
    # of 2 units, 3.5 -+ t_{0.975, 1} 0.5 (t = 12.706), is as wide as 2 units make it.
    others = mech["swarm"]["batch/external_from_others"]
    assert others["mean"] == pytest.approx(3.5) and others["agents"] == 2
    assert (others["low"], others["high"]) == pytest.approx(
        (3.5 - 12.7062 * 0.5, 3.5 + 12.7062 * 0.5), abs=1e-3
    )
    assert mech["swarm"]["grad_norm_clipped"]["mean"] == pytest.approx(1.0)
    # The per-round rollup equals the raw mean over agents.
    aggregate = RoundAggregate.objects.get(campaign=campaign, arm="dyn", tier="tiny-1m", round=3)
    assert aggregate.metric_means["generation/questions"] == pytest.approx(11.0)
    aggregate = RoundAggregate.objects.get(campaign=campaign, arm="swarm", tier="tiny-1m", round=3)
    assert aggregate.metric_means["batch/external_from_others"] == pytest.approx(3.5)
    assert "batch/external_age" in aggregate.metric_means
    # Controls say which arm they run.
    runs = [
        ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm=arm, seed=0)
        for arm in ("self", "dyn")
    ]
    names = {row["arm"]: row["arm_name"] for row in status_tables.control_rows(campaign)}
    assert names == {"self": "4/4-self", "dyn": "8/0-dyn"} and len(runs) == 2


def test_windows_are_thirds_of_the_horizon_cut_at_block_edges_once_it_holds_three_blocks():
    assert estimates.window_edges(55) == [0, 18, 36, 55]
    assert estimates.window_edges(149) == [0, 49, 99, 149]
    assert estimates.window_edges(150) == [0, 50, 100, 150]
    assert estimates.window_edges(599) == [0, 200, 400, 599]
    assert estimates.window_edges(2000) == [0, 650, 1350, 2000]
