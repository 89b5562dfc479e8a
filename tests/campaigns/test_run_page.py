"""The run section of a campaign's page (issue #26 item 6): swarm_app/web/run_info.py's
plain functions on constructed payloads, then the page and its JSON through Django's test client
on the real database (stored reports, the real rollups and dashboard payload).

* started, elapsed and, while running, the time left per tier and arm from the rate so far
  ("–" before an arm has a round);
* at the end, a verdict written from the numbers (issue #47): higher/lower only when the exact
  permutation test over units rejects at 5 % (windows: Holm-adjusted) with the interval on that
  side of 0, "no difference this campaign can detect" otherwise, and, for a design that cannot
  reach p < 0.05 at all (2 swarms against 3 seeds), the sentence saying so and the gain as a
  description; the gain per window, n and what is independent (control seeds and swarms are;
  one swarm's nodes, sharing its pool, are not);
* the settings as labelled fields, never a raw dict;
* no "running" words on the page of a campaign that is not running, in every state.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.campaigns.rollups import refresh_rollups
from swarm_app.coordinator.models import Evaluation, WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.web import held_out, run_info, status_tables
from worker.shared.campaign import CampaignConfig, ControlsConfig, cpu_demo_config, sapo_table_config

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
STATES = ("pending", "running", "paused", "completed", "failed", "stopped")
# What a campaign's control runs are doing in each of its states.
CONTROL_STATES = {
    "pending": "queued",
    "running": "running",
    "paused": "running",
    "completed": "completed",
    "failed": "failed",
    "stopped": "stopped",
}


# --- plain functions -------------------------------------------------------------------------------


def tables(state: str = "running", started: datetime | None = NOW - timedelta(minutes=10), **extra) -> dict:
    """A tables payload as dashboard.tables writes it, with what run_info reads."""
    payload = {
        "campaign": {
            "state": state,
            "rounds": 40,
            "tiers": ["tiny-1m"],
            "started_at": started.isoformat() if started else None,
            "finished_at": None,
        },
        "arms": [
            {"arm": "swarm", "label": "swarm"},
            {"arm": "isolated", "label": "isolated (J = 0)"},
            {"arm": "self", "label": "self-replay"},
        ],
        "reference": "self",
        "settled": {"tiny-1m": {"swarm": 10, "isolated": 20}},
        "controls": [{"arm": "self", "arm_name": "4/4-self"}, {"arm": "isolated", "arm_name": "8/0"}],
        "summary": {},
    }
    payload.update(extra)
    return payload


def gain(
    value: float | None,
    low: float | None,
    high: float | None,
    n: tuple[int, int] = (5, 5),
    p: float | None = 0.34,
    p_holm: float | None = None,
) -> dict:
    """A gain row as estimates.gain_row writes it; min_p = 2 / C(R + S, R), the exact two-sided
    permutation test's smallest p (5 vs 5: 2 / 252 = 0.0079)."""
    note = None
    if value is not None and min(n) < 2:
        note = "one swarm: no interval for the gain" if n[0] < 2 else "no interval (1 node)"
    row = {"value": value, "low": low, "high": high, "n": list(n), "note": note, "p": p}
    row["min_p"] = min(1.0, 2 / math.comb(n[0] + n[1], n[0]))
    if p_holm is not None:
        row["p_holm"] = p_holm
    return row


def test_time_left_per_arm_from_the_rate_so_far():
    info = run_info.run_info(tables(), NOW)
    rows = {row["arm"]: row for row in info["eta"]["rows"]}
    # 10 rounds in 10 minutes: 30 rounds left at 1 round/min; 20 in 10: 20 left at 2/min.
    assert rows["swarm"]["text"] == "10 of 40 rounds · about 30 min left (1 rounds/min so far)"
    assert rows["swarm"]["left_s"] == pytest.approx(1800)
    assert rows["isolated"]["text"] == "20 of 40 rounds · about 10 min left (2 rounds/min so far)"
    # No round yet: no rate, so no estimate, and no total for the campaign either.
    assert rows["self"]["text"] == "0 of 40 rounds · time left – (no round yet, so no rate)"
    assert rows["self"]["label"] == "self-replay (4/4-self)"
    assert info["eta"]["total"] is None
    assert "estimate from each arm's current rate" in info["eta"]["note"]
    assert info["started"] == "2026-12-03 09:50:00 UTC"
    assert info["elapsed"] == "10 min 00 s (pauses included)"
    assert info["verdict"] == [] and info["verdict_pending"]

    # Every arm has a rate: the campaign's time left is its slowest arm's.
    info = run_info.run_info(tables(settled={"tiny-1m": {"swarm": 10, "isolated": 20, "self": 40}}), NOW)
    assert info["eta"]["total"] == "The campaign: about 30 min left (its slowest arm; an estimate)."
    assert {row["arm"]: row["text"] for row in info["eta"]["rows"]}["self"] == "40 of 40 rounds · done"


def test_time_left_follows_each_arms_current_rate():
    """An arm that sped up: its time left is at its last rounds' pace, not the average since the
    start (a swarm held back early by its controls, issue #46)."""
    # 10 rounds in 10 minutes on average, but its last 5 rounds took 1 minute: 5 rounds a minute.
    paced = tables(pace={"tiny-1m": {"swarm": {"rounds": 5, "seconds": 60.0}}})
    rows = {row["arm"]: row for row in run_info.run_info(paced, NOW)["eta"]["rows"]}
    assert rows["swarm"]["text"] == "10 of 40 rounds · about 6 min left (5 rounds/min now)"
    assert rows["swarm"]["left_s"] == pytest.approx(30 / 5 * 60)
    assert rows["isolated"]["text"].endswith("(2 rounds/min so far)")  # no pace yet: the average


@pytest.mark.django_db
def test_pace_is_the_last_settled_rounds_over_the_time_they_took():
    campaign = seed("running", rounds=20, reported={"swarm": 8, "self": 1})
    rows = RoundMetrics.objects.filter(campaign=campaign, arm="swarm")
    base = timezone.now() - timedelta(minutes=5)
    for number in range(8):  # round r reported at 10 s x r
        rows.filter(round=number).update(created_at=base + timedelta(seconds=10 * number))
    # round 7 settles when its last agent reports, at 75 s
    late = rows.filter(round=7).first()
    rows.filter(pk=late.pk).update(created_at=base + timedelta(seconds=75))
    settled = {("tiny-1m", "swarm"): 8, ("tiny-1m", "self"): 1}
    # rounds 2..7: 5 rounds between the settling of round 2 (20 s) and of round 7 (75 s, its
    # latest report)
    assert status_tables.pace(campaign, settled) == {("tiny-1m", "swarm"): {"rounds": 5, "seconds": 55.0}}


def test_no_estimate_unless_running():
    paused = run_info.run_info(tables("paused"), NOW)
    assert paused["eta"]["rows"][0]["text"] == "10 of 40 rounds · paused"
    assert paused["eta"]["note"] is None and paused["eta"]["total"] is None
    pending = run_info.run_info(tables("pending", started=None, settled={}), NOW)
    assert pending["started"] == "not launched yet" and pending["elapsed"] == "–"
    stopped = run_info.run_info(tables("stopped"), NOW)
    assert stopped["eta"]["rows"][0]["text"] == "10 of 40 rounds"
    assert stopped["elapsed"] == "10 min 00 s"  # no finish time stored: until now, no pauses note


@pytest.mark.parametrize("state", STATES)
def test_no_running_words_unless_running(state):
    info = run_info.run_info(tables(state), NOW)
    words = " ".join(
        [info["state_text"], *(row["text"] for row in info["eta"]["rows"]), info["eta"]["note"] or ""]
    )
    assert ("running" in words.lower()) == (state == "running"), words
    assert bool(info["verdict"]) == (state in ("completed", "stopped", "failed"))


def summary(headline: dict, windows: list[dict] | None = None, nodes: int = 4, family: int = 3) -> dict:
    """tiny-1m's summary; ``family``: the windows Holm adjusted over (estimates.adjust_windows)."""
    arms = {"swarm": {"agents": headline["n"][0], "nodes": nodes}}
    return {
        "tiny-1m": {
            "horizon": 40,
            "reference": "self",
            "gain": headline,
            "windows": windows or [],
            "windows_family": {"self": family},
            "arms": arms,
        }
    }


def test_verdict_no_difference_when_the_test_does_not_reject():
    """5 swarms against 5 seeds (smallest p 0.0079; 3 windows x 0.0079 = 0.024, so the windows
    can reach a verdict too): the headline's p = 0.34, no difference; each window judged on its
    Holm-adjusted p and its interval."""
    windows = [
        {"start": 0, "end": 13, "gains": {"self": gain(6.0, 1.0, 11.0, p=0.008, p_holm=0.024)}},
        {"start": 13, "end": 26, "gains": {"self": gain(1.0, -3.0, 5.0, p=0.6, p_holm=0.6)}},
        {"start": 26, "end": 40, "gains": {"self": gain(-4.0, -8.0, -0.5, p=0.016, p_holm=0.032)}},
    ]
    info = run_info.run_info(tables("completed", summary=summary(gain(1.5, -4.4, 7.5), windows)), NOW)
    (verdict,) = info["verdict"]
    assert verdict["judgement"] == "none"
    first, by_window, n, held_out = verdict["lines"]
    assert first.startswith(
        "No difference this campaign can detect between the swarm and self-replay (4/4-self)"
    )
    assert "+1.5 % [-4.4 %, +7.5 %]" in first and "rounds 0–39" in first
    assert "exact permutation test over swarms and seeds, p = 0.34" in first
    # The time course, each window judged by its Holm-adjusted p and its own interval.
    assert by_window == (
        "By window (thirds of the rounds; Holm-adjusted over 3 windows of every model size): "
        "rounds 0–12: +6.0 % [+1.0 %, +11.0 %], higher (Holm p = 0.024); "
        "rounds 13–25: +1.0 % [-3.0 %, +5.0 %], no difference shown (Holm p = 0.6); "
        "rounds 26–39: -4.0 % [-8.0 %, -0.5 %], lower (Holm p = 0.032)."
    )
    # n, and what is independent: seeds and swarms are, a swarm's nodes count once.
    assert n.startswith("n = 5 swarms of 4 nodes in all vs 5 self-replay (4/4-self) seeds.")
    assert "seeds and the swarms are independent runs" in n and "each swarm counts once" in n
    assert "each swarm counts once, whatever its nodes" in info["independence"]
    assert (
        held_out
        == "Held-out accuracy: no evaluation both the swarm and self-replay (4/4-self) were scored on."
    )
    assert verdict["held_out_judgement"] == "unknown"
    assert info["verdict_title"] == "Verdict"
    (headline,) = info["headlines"]
    assert headline == {
        "tier": "tiny-1m",
        "what": "swarm vs self-replay (4/4-self), rounds 0–39",
        "value": "+1.5 %",
        "interval": "[-4.4 %, +7.5 %]",
        "n": "n = 5 swarms vs 5 seeds",
        "note": None,
        "design": None,
    }


@pytest.mark.parametrize(("n", "smallest"), [((2, 3), "0.2"), ((3, 3), "0.1"), ((3, 4), "0.057")])
def test_a_design_that_cannot_decide_says_so_and_only_describes(n, smallest):
    """2 vs 3, 3 vs 3, 3 vs 4: the exact test's smallest p (2 / C(R + S, R)) is above 0.05, so
    neither the headline nor a window reads higher or lower, whatever the intervals; the page
    says why in words, from the numbers."""
    windows = [
        {"start": 0, "end": 13, "gains": {"self": gain(4.7, 1.6, 7.9, n, p=0.2, p_holm=0.6)}},
        {"start": 13, "end": 40, "gains": {"self": gain(-5.5, -9.3, -0.5, n, p=0.2, p_holm=0.6)}},
    ]
    head = gain(7.7, 3.8, 11.7, n, p=float(smallest))
    info = run_info.run_info(tables("completed", summary=summary(head, windows, family=6)), NOW)
    (verdict,) = info["verdict"]
    assert verdict["judgement"] == "cannot decide"
    swarms, seeds = n
    sentence = (
        f"{swarms} swarms against {seeds} seeds: no difference can be shown at the 5 % level; "
        f"the smallest p possible is {smallest}"
    )
    assert verdict["lines"][0] == (
        f"{sentence}. As a description, not a finding: over rounds 0–39 the swarm's cumulative "
        "reward is +7.7 % [+3.8 %, +11.7 %] against self-replay (4/4-self) (95 % t interval)."
    )
    assert verdict["lines"][1].startswith("By window (thirds of the rounds; a description, not a finding: ")
    assert (
        "rounds 0–12: +4.7 % [+1.6 %, +7.9 %]; rounds 13–39: -5.5 % [-9.3 %, -0.5 %]." in verdict["lines"][1]
    )
    (headline,) = info["headlines"]
    assert headline["design"] == f"{sentence}; the gain above is a description, not a finding."
    words = " ".join([*verdict["lines"], *(str(v) for v in headline.values())]).lower()
    assert "higher" not in words and "lower" not in words


def test_verdict_higher_lower_and_no_interval():
    higher = run_info.verdict(tables("completed", summary=summary(gain(12.0, 3.0, 20.0, p=0.008))), "tiny-1m")
    assert higher["judgement"] == "higher"
    assert higher["lines"][0] == (
        "The swarm's cumulative reward over rounds 0–39 is higher than self-replay (4/4-self)'s: "
        "+12.0 % [+3.0 %, +20.0 %], a 95 % interval above 0 (exact permutation test over swarms "
        "and seeds, p = 0.008)."
    )
    lower = run_info.verdict(tables("completed", summary=summary(gain(-9.0, -15.0, -2.0, p=0.03))), "tiny-1m")
    assert lower["judgement"] == "lower" and "below 0" in lower["lines"][0]
    # The interval alone is not enough: the test must reject too (and the other way round).
    untested = run_info.verdict(
        tables("completed", summary=summary(gain(12.0, 3.0, 20.0, p=0.06))), "tiny-1m"
    )
    assert untested["judgement"] == "none"
    wide = run_info.verdict(tables("completed", summary=summary(gain(12.0, -3.0, 20.0, p=0.008))), "tiny-1m")
    assert wide["judgement"] == "none"
    single = run_info.verdict(tables("completed", summary=summary(gain(42.9, None, None, (1, 3)))), "tiny-1m")
    assert (
        single["judgement"] == "no interval"
        and "there is one swarm, so there is no interval" in single["lines"][0]
    )
    assert single["lines"][-2] == (
        "n = 1 swarm of 4 nodes in all vs 3 self-replay (4/4-self) seeds. The seeds are independent "
        "runs; the swarm's nodes share one pool, so it is one replicate of sharing: one swarm, no "
        "interval for the gain."
    )
    seed = run_info.verdict(tables("completed", summary=summary(gain(42.9, None, None, (3, 1)))), "tiny-1m")
    assert "there is one control seed, so there is no interval" in seed["lines"][0]
    empty = run_info.verdict(tables("completed", summary=summary(gain(None, None, None))), "tiny-1m")
    assert empty["lines"] == [
        "No verdict: the swarm and self-replay (4/4-self) have no rounds in common.",
        "Held-out accuracy: no evaluation both the swarm and self-replay (4/4-self) were scored on.",
    ]
    alone = run_info.verdict(tables("completed", reference=None, summary={}), "tiny-1m")
    assert alone["lines"] == ["No control ran, so there is nothing to compare the swarm with."]


def held_out_summary(swarms: list[float], seeds: list[float], missing: int = 0) -> dict:
    """summary[tier]["held_out"] as held_out.held_out_summary writes it, the difference computed
    by held_out.difference from the swarms' and the seeds' accuracies after round 39."""

    def entry(values: list[float], low: float | None, high: float | None, nodes: int) -> dict:
        mean = sum(values) / len(values)
        return {"accuracy": mean, "low": low, "high": high, "n": len(values), "nodes": nodes}

    swarm = entry(swarms, None, None, 2 * len(swarms)) | {"round": 39, "questions": 128, "missing": missing}
    control = entry(seeds, None, None, len(seeds)) | {"round": 39, "questions": 128, "missing": 0}
    control["difference"] = held_out.difference(swarms, seeds)
    return {"swarm": swarm, "self": control}


@pytest.mark.parametrize(
    ("swarms", "seeds", "judgement", "words"),
    [
        # 2 swarms against 3 seeds: p cannot reach 0.05, whatever the difference
        (
            [0.50, 0.52],
            [0.30, 0.31, 0.29],
            "cannot decide",
            "2 swarms against 3 seeds: no difference can be shown at the 5 % level; the smallest p "
            "possible is 0.2: a description, not a finding.",
        ),
        # 4 against 4, every swarm above every seed: p = 2 / C(8, 4) = 0.029, interval above 0
        (
            [0.50, 0.52, 0.51, 0.53],
            [0.30, 0.31, 0.29, 0.32],
            "higher",
            ": the swarm's held-out accuracy is higher than self-replay (4/4-self)'s, a 95 % "
            "interval above 0 (exact permutation test over swarms and seeds, p = 0.029).",
        ),
        (
            [0.30, 0.31, 0.29, 0.32],
            [0.50, 0.52, 0.51, 0.53],
            "lower",
            "is lower than self-replay (4/4-self)'s, a 95 % interval below 0",
        ),
        # 4 against 4, mixed: no difference shown
        (
            [0.50, 0.30, 0.52, 0.31],
            [0.30, 0.50, 0.51, 0.29],
            "none",
            ": no difference this campaign can detect (exact permutation test over swarms and seeds, p = ",
        ),
        ([0.5], [0.3, 0.31, 0.29], "no interval", ": one swarm: no interval for the gain, so no verdict."),
    ],
)
def test_the_verdict_gives_held_out_accuracy_judged_as_the_reward(swarms, seeds, judgement, words):
    """The held-out line: both arms' accuracy with n, the difference with its interval, judged by
    the same rules as the training reward (higher or lower only at p <= 0.05 with the interval on
    that side of 0; "cannot decide" where the design cannot reach it)."""
    tier_summary = summary(gain(1.5, -4.4, 7.5))
    tier_summary["tiny-1m"]["held_out"] = held_out_summary(swarms, seeds, missing=1)
    verdict = run_info.verdict(tables("completed", summary=tier_summary), "tiny-1m")
    line = verdict["lines"][-1]
    assert verdict["held_out_judgement"] == judgement, line
    assert line.startswith(
        "Held-out accuracy after round 39 (128 fresh questions none of them trained on, answered "
        "greedily, scored by the coordinator; 1 node skipped it, left out, not counted as zero): the swarm "
    ), line
    assert f"({len(swarms)} swarm{'s' if len(swarms) > 1 else ''} of {2 * len(swarms)} nodes)" in line
    assert f"against self-replay (4/4-self) {sum(seeds) / len(seeds):.3f} ({len(seeds)} seeds)" in line
    assert words in line, line
    difference = held_out.difference(swarms, seeds)
    assert f"difference {difference['value']:+.3f}" in line
    if difference["low"] is not None:
        assert f"[{difference['low']:+.3f}, {difference['high']:+.3f}] (95 % t interval)" in line
    if judgement in ("cannot decide", "none", "no interval"):
        assert "higher" not in line and "lower" not in line


def test_durations_and_estimates_in_words():
    assert [run_info.duration_text(s) for s in (None, 5, 65, 3725, 2 * 86400 + 7200)] == [
        "–",
        "5 s",
        "1 min 05 s",
        "1 h 02 min",
        "2 d 2 h",
    ]
    assert [run_info.eta_text(s) for s in (30, 1790, 3 * 3600 + 300, 3 * 86400)] == [
        "under a minute",
        "about 30 min",
        "about 3 h 05 min",
        "about 3 d 0 h",
    ]


@pytest.mark.parametrize("preset", [cpu_demo_config, sapo_table_config])
def test_settings_are_labelled_readable_fields(preset):
    fields = run_info.settings_fields(preset().to_json())
    labels = [field["label"] for field in fields]
    for label in ("Model sizes (tiers)", "Rounds per node", "Swarm arm", "Tasks", "Isolated controls"):
        assert label in labels
    for field in fields:  # words, never a dict or a list as Python or JSON prints it
        assert isinstance(field["value"], str) and not re.search(r"[{}\[\]]|': ", field["value"]), field
    values = {field["label"]: field["value"] for field in fields}
    assert values["Swarm arm"] == (
        "4/4: generates 8; trains on 4 informative own + 4 informative external from the pool"
    )
    assert values["Swarms"].startswith(f"{preset().replicates} independent swarms per model size")
    if preset is cpu_demo_config:
        assert values["Isolated controls"] == "plain isolated (8/0), self-replay (4/4-self)"
        assert values["Headline control"] == "self-replay (4/4-self): the headline gain is against it"
        assert values["Control seeds"] == "3 per tier and control (seeds 0–2); each an independent run"
        assert values["Tasks"].startswith("chain_sum (weight 1; min terms 2, max terms 2")


# --- the page and its JSON, on the real database ---------------------------------------------------


def seed(
    state: str,
    swarm: tuple[float, ...] = (0.40, 0.45, 0.50, 0.55),
    self_replay: tuple[float, ...] = (0.44, 0.50, 0.46),
    rounds: int = 9,
    reported: dict[str, int] | None = None,
    started_ago: timedelta | None = timedelta(minutes=10),
    replicates: int = 2,
    held_out: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> Campaign:
    """tiny-1m: len(swarm) nodes in ``replicates`` swarms (node i in swarm i mod R) and
    len(self_replay) self-replay seeds (the reference), each agent at a constant reward, having
    reported ``reported[arm]`` rounds; with ``held_out`` (each swarm node's and each seed's
    accuracy), each evaluated after its last round, the seeds as their control nodes."""
    reported = reported or {"swarm": rounds, "self": rounds}
    controls = ControlsConfig(isolated=False, filtered=False, seeds=len(self_replay), self_replay=True)
    config = CampaignConfig(tiers=["tiny-1m"], rounds=rounds, controls=controls, replicates=replicates)
    config = config.validate().to_json()
    now = timezone.now()
    campaign = Campaign.objects.create(
        name="run page",
        state=state,
        public=True,
        config=config,
        started_at=now - started_ago if started_ago and state != "pending" else None,
        finished_at=now if state in Campaign.FINISHED else None,
    )
    token, _ = create_token(campaign)
    agents = []
    for i, reward in enumerate(swarm):
        node = WorkerNode.objects.create(
            campaign=campaign,
            node_id=f"node{i}",
            token=token,
            tier="tiny-1m",
            round=reported["swarm"],
            replicate=i % replicates,
        )
        agents.append(("swarm", f"node:{node.node_id}", reward))
        if held_out:
            scored(node, reported["swarm"] - 1, held_out[0][i])
    for seed_, reward in enumerate(self_replay):
        run = ControlRun.objects.create(
            campaign=campaign,
            tier="tiny-1m",
            arm="self",
            seed=seed_,
            round=reported["self"],
            state=CONTROL_STATES[state],
        )
        agents.append(("self", f"control:{run.pk}", reward))
        if held_out:
            control = WorkerNode.objects.create(
                campaign=campaign,
                node_id=f"control{seed_}",
                token=token,
                tier="tiny-1m",
                arm="self",
                control_run=run,
                round=reported["self"],
            )
            scored(control, reported["self"] - 1, held_out[1][seed_])
    RoundMetrics.objects.bulk_create(
        RoundMetrics(campaign=campaign, arm=arm, tier="tiny-1m", agent=agent, round=number, reward=reward)
        for arm, agent, reward in agents
        for number in range(reported[arm])
    )
    if campaign.started_at is not None:  # each arm's rounds reported at an even pace since the start
        for arm, done in reported.items():
            for number in range(done):
                at = campaign.started_at + (now - campaign.started_at) * (number + 1) / done
                RoundMetrics.objects.filter(campaign=campaign, arm=arm, round=number).update(created_at=at)
    refresh_rollups()
    return campaign


def scored(node: WorkerNode, after: int, accuracy: float) -> None:
    """A held-out evaluation of ``node`` after round ``after``, scored at ``accuracy`` (of 64)."""
    Evaluation.objects.create(
        campaign=node.campaign,
        node=node,
        round=after,
        eval_id=f"{node.pk:016d}{after:016d}",
        questions=[],
        submission_id="s",
        n=64,
        correct=round(accuracy * 64),
        accuracy=accuracy,
        reward=accuracy,
    )


class Text(HTMLParser):
    """The words a reader sees: no script, nothing inside an element marked hidden."""

    VOID = {"br", "hr", "img", "input", "link", "meta", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []  # per open element: is it (or an ancestor) hidden?
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        names = dict(attrs)
        hidden = (self.stack[-1] if self.stack else False) or "hidden" in names or tag in ("script", "head")
        self.stack.append(hidden)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not (self.stack and self.stack[-1]) and data.strip():
            self.parts.append(" ".join(data.split()))


def visible_text(html: str, element_id: str | None = None) -> str:
    if element_id is not None:
        match = re.search(rf'<(\w+)[^>]* id="{element_id}"', html)
        assert match, element_id
        html = html[match.start() :]
    parser = Text()
    parser.feed(html)
    return re.sub(r" ([:;,.])", r"\1", " ".join(parser.parts))  # "tier: 5" as read, not "tier : 5"


def section(html: str, element_id: str) -> str:
    """The visible text of the element with that id (its first closing tag of the same name)."""
    match = re.search(rf'<(\w+)([^>]*) id="{element_id}"[^>]*>', html)
    assert match, element_id
    tag = match.group(1)
    end = html.index(f"</{tag}>", match.end())
    if "hidden" in re.sub(r'"[^"]*"', "", match.group(0)):
        return ""
    return visible_text(html[match.end() : end])


def page(client: Client, campaign: Campaign) -> str:
    response = client.get(campaign.get_absolute_url())
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_completed_page_says_no_detectable_difference_with_n_and_readable_settings(anonymous):
    html = page(anonymous, seed("completed", replicates=4, self_replay=(0.44, 0.50, 0.46, 0.42)))
    assert section(html, "run-state") == "Completed: every arm ran its 9 rounds; the numbers below are final."
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", section(html, "run-started"))
    assert section(html, "run-elapsed") == "10 min 00 s"
    verdict = visible_text(html[html.index('id="verdict"') - 5 : html.index('id="verdict-pending"')])
    assert verdict.startswith("Verdict tiny-1m No difference this campaign can detect"), verdict
    assert "n = 4 swarms of 4 nodes in all vs 4 self-replay (4/4-self) seeds." in verdict
    assert "each swarm counts once, whatever its nodes" in verdict
    # The same per window: three thirds of H = 9.
    assert "rounds 0–2:" in verdict and "rounds 3–5:" in verdict and "rounds 6–8:" in verdict
    assert section(html, "verdict-pending") == ""
    # The headline gain as one line of text, not a table cell.
    headline = visible_text(html[html.index('class="headline"') - 3 :]).split(" Rounds done")[0]
    assert re.match(
        r"tiny-1m swarm vs self-replay \(4/4-self\), rounds 0–8: \+4\.4 % \[[^]]+\] n = 4 swarms vs 4 seeds$",
        headline,
    )
    # Settings: labelled fields.
    settings = section(html, "settings-fields")
    assert "Rounds per node 9" in settings and "Isolated controls self-replay (4/4-self)" in settings
    assert not re.search(r"[{}\[\]]|': ", settings), settings
    # Nothing on the page says it is still going.
    text = visible_text(html).lower()
    assert "running" not in text and "live." not in text and "time left" not in text


@pytest.mark.django_db
def test_completed_page_says_which_arm_is_higher(anonymous):
    """4 swarms against 4 seeds and a large true difference: every swarm above every seed, the
    exact test's p = 2 / C(8, 4) = 0.029, and the interval above 0: the verdict reads higher."""
    swarm, seeds = (0.60, 0.62, 0.64, 0.66), (0.40, 0.42, 0.44, 0.38)
    accuracy = ((0.5, 0.55, 0.52, 0.56), (0.3, 0.25, 0.31, 0.28))  # the same, held out
    html = page(anonymous, seed("completed", swarm=swarm, self_replay=seeds, replicates=4, held_out=accuracy))
    assert 'data-judgement="higher"' in html and 'data-held-out-judgement="higher"' in html
    verdict = section(html, "verdict-tiers")
    assert (
        "The swarm's cumulative reward over rounds 0–8 is higher than self-replay (4/4-self)'s: +53.7 % ["
        in verdict
    )
    assert "(exact permutation test over swarms and seeds, p = 0.029)" in verdict
    assert (
        "Held-out accuracy after round 8 (64 fresh questions none of them trained on, answered greedily, "
        "scored by the coordinator): the swarm 0.532 [" in verdict
    )
    assert "(4 swarms of 4 nodes) against self-replay (4/4-self) 0.285 [" in verdict
    assert "the swarm's held-out accuracy is higher than self-replay (4/4-self)'s" in verdict
    assert section(html, "headlines").endswith("n = 4 swarms vs 4 seeds")  # no sentence on the design


@pytest.mark.django_db
def test_two_swarms_against_three_seeds_cannot_decide_and_the_page_says_so(anonymous):
    """The demo's design with a true difference of +5 %: the swarms' means 0.42 against the seeds'
    0.40, every swarm above every seed, so p is the smallest 2 vs 3 allows, 0.2. Nothing on the
    page reads higher or lower, neither the headline nor a window; the page says why, in words."""
    swarm, seeds = (0.415, 0.42, 0.425, 0.42), (0.40, 0.41, 0.39)  # swarms (0, 2) and (1, 3): 0.42, 0.42
    accuracy = ((0.5, 0.6, 0.7, 0.6), (0.2, 0.25, 0.3))  # every swarm above every seed, held out too
    html = page(anonymous, seed("completed", swarm=swarm, self_replay=seeds, replicates=2, held_out=accuracy))
    sentence = (
        "2 swarms against 3 seeds: no difference can be shown at the 5 % level; the smallest p "
        "possible is 0.2"
    )
    assert 'data-judgement="cannot decide"' in html
    verdict = section(html, "verdict-tiers")
    assert verdict.startswith(f"tiny-1m {sentence}. As a description, not a finding:"), verdict
    assert "+5.0 % [" in verdict and "rounds 0–2: +5.0 % [" in verdict
    assert sentence in section(html, "headlines")
    assert 'data-held-out-judgement="cannot decide"' in html
    assert "against self-replay (4/4-self) 0.250 [0.126, 0.374] (3 seeds); difference +0.350 [" in verdict
    assert f"{sentence}: a description, not a finding." in verdict.split("Held-out accuracy")[1]
    text = visible_text(html).lower()
    assert "higher" not in text and "lower" not in text, text


@pytest.mark.django_db
def test_running_page_shows_elapsed_and_time_left(anonymous):
    campaign = seed("running", rounds=20, reported={"swarm": 5, "self": 10})
    html = page(anonymous, campaign)
    assert section(html, "run-state").startswith("Running:")
    assert re.fullmatch(r"10 min 0\d s \(pauses included\)", section(html, "run-elapsed"))
    assert section(html, "run-finished") == ""
    eta = section(html, "run-eta")
    # 5 rounds in 10 minutes, 15 to go: about 30 minutes; self-replay: 10 in 10, 10 to go.
    assert "tiny-1m · swarm: 5 of 20 rounds · about 30 min left" in eta, eta
    assert "tiny-1m · self-replay (4/4-self): 10 of 20 rounds · about 10 min left" in eta, eta
    assert section(html, "run-eta-total") == "The campaign: about 30 min left (its slowest arm; an estimate)."
    assert "estimate from each arm's current rate" in section(html, "run-eta-note")
    assert section(html, "verdict") == ""
    assert section(html, "verdict-pending") == "The verdict is written here when the campaign completes."
    # Provisional headline: "so far".
    assert "rounds 0–4 so far" in section(html, "headlines")


@pytest.mark.django_db
@pytest.mark.parametrize("state", STATES)
def test_every_state_says_only_what_is_true(anonymous, state):
    html = page(anonymous, seed(state))
    assert f'id="state" class="state state-{state}">{state}<' in html
    assert section(html, "run-state") == run_info.state_text(state, 9)
    text = visible_text(html).lower()
    assert ("running" in text) == (state == "running"), text
    finished = state in ("completed", "failed", "stopped")
    assert bool(section(html, "verdict")) == finished
    assert bool(section(html, "verdict-pending")) != finished
    if state == "pending":
        assert section(html, "run-started") == "not launched yet" and section(html, "run-progress") == ""


@pytest.mark.django_db
def test_run_json_follows_the_page_and_its_visibility(anonymous, staff):
    campaign = seed("completed")
    info = anonymous.get(f"/api/campaigns/{campaign.pk}/run").json()
    assert info["state"] == "completed" and info["verdict"][0]["judgement"] == "cannot decide"
    assert info["headlines"][0]["value"] == "+1.8 %"
    assert info["headlines"][0]["design"].startswith("2 swarms against 3 seeds: no difference can be shown")
    Campaign.objects.filter(pk=campaign.pk).update(public=False)
    assert anonymous.get(f"/api/campaigns/{campaign.pk}/run").status_code == 404
    assert staff.get(f"/api/campaigns/{campaign.pk}/run").status_code == 200
