"""The campaign page's per-round series and the names it shows (swarm_app/web/dashboard.py
states the definitions): arms, labels, the notes that replace an interval, and the rounds every
live agent has reported (settled)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from django.db.models import FloatField, Max
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from swarm_app.campaigns.models import AgentBlock, Arm, Campaign, ControlRun, RoundAggregate
from swarm_app.coordinator.models import WorkerNode

MAX_POINTS = 500
# Fewer resamples than the study's reports (stats.BOOTSTRAP_RESAMPLES, 10,000): a page's
# intervals are recomputed on every load.
PAGE_BOOTSTRAP_RESAMPLES = 2000
# The swarm and the control kinds, in the order the page shows them (worker.shared.arms.CONTROL_KINDS).
ARMS = (Arm.SWARM, Arm.ISOLATED, Arm.FILTERED, Arm.SELF, Arm.DYN)
CONTROL_ARMS = ARMS[1:]
# What the page calls each arm (legends, table headers); one definition, sent with the tables.
ARM_LABELS = {
    Arm.SWARM: "swarm",
    Arm.ISOLATED: "isolated (J = 0)",
    Arm.FILTERED: "filtered isolated",  # a sanity arm: it cannot differ much from isolated
    Arm.SELF: "self-replay",
    Arm.DYN: "over-generation",
}
MECHANISM_LABELS = {
    "generation/questions": "questions generated / round",
    "batch/informative_groups": "informative groups trained on",
    "batch/external_from_others": "J groups from other agents",
    "batch/external_age": "age of the J groups (rounds)",
    "grad_norm_clipped": "steps clipped (share)",
    "generation/completions": "completions generated / round",
    "generation/tokens": "tokens generated / round",
    "train/completions": "completions trained on / round",
    "train/tokens": "tokens trained on / round",
    "batch/external_requested": "external groups asked of the pool",
}
BAND = (
    "mean ± 1 std across agents (workers for the swarm, seeds for the controls); "
    "an arm with one agent has no band"
)
# Shown instead of an interval computed from fewer than 2 agents (a point is not an interval).
NO_INTERVAL = "no interval (1 node)"
# The swarm arm counts once per swarm (its nodes share a pool: issue #26 item 2).
ONE_SWARM = "one swarm: no interval"
ONE_SWARM_GAIN = "one swarm: no interval for the gain"
NODE_SPREAD = "spread across nodes of one swarm, not independent"
GIB = 1024**3
# A round's mean over agents of the completions each generated (the chart's compute axis).
GENERATED_COMPLETIONS = Cast(KT("metric_means__generation/completions"), FloatField())


# --- statistics --------------------------------------------------------------------------------


def gain_percent(value: float | None, baseline: float | None) -> float | None:
    """(value - baseline) / baseline in percent; None when undefined."""
    if value is None or baseline is None or baseline == 0:
        return None
    return (value - baseline) / abs(baseline) * 100


def downsample_step(rounds: int, max_points: int = MAX_POINTS) -> int:
    """Rounds per chart point so that ``rounds`` rounds give at most ``max_points`` points."""
    return max(1, math.ceil(rounds / max_points))


# --- series ------------------------------------------------------------------------------------


def _series(rows: list[tuple], step: int) -> dict[str, list]:
    """Per-round aggregates of one (tier, arm), bucketed by ``step`` rounds.

    A bucket's mean and std are agent-weighted means of its rounds'; its cumulative value is
    the running sum of per-round means up to the bucket's last round (computed at full
    resolution, then sampled). The x value is the bucket's last round; ``completions`` is the
    other x the page offers: completions generated per agent up to the bucket's last round (the
    running sum of the per-round mean of ``generation/completions``; None from the first round
    without it: agents older than the metric).

    ``units``, ``unit_mean`` and ``unit_std`` are the arm's independent units (a control's
    seeds, the swarm's swarms: RoundAggregate.units), from which the page draws the interval of
    the per-round difference between arms; a bucket's are the fewest units of its rounds and the
    means of its rounds' unit mean and std.

    rows: [(round, agents, mean, std, mean generation/completions or None, units, unit mean,
    unit std)] by round.
    """
    out: dict[str, list] = {
        "round": [],
        "mean": [],
        "std": [],
        "agents": [],
        "cumulative": [],
        "completions": [],
        "units": [],
        "unit_mean": [],
        "unit_std": [],
    }
    cumulative = 0.0
    completions: float | None = 0.0
    bucket: list[tuple] = []
    for index, row in enumerate(rows):
        cumulative += row[2]
        completions = None if completions is None or row[4] is None else completions + row[4]
        bucket.append(row)
        last = index == len(rows) - 1
        if last or rows[index + 1][0] // step != row[0] // step:
            weight = sum(item[1] for item in bucket)
            out["completions"].append(completions)
            out["round"].append(bucket[-1][0])
            out["mean"].append(sum(item[1] * item[2] for item in bucket) / weight)
            out["std"].append(sum(item[1] * item[3] for item in bucket) / weight)
            out["agents"].append(round(weight / len(bucket), 2))
            out["cumulative"].append(cumulative)
            out["units"].append(min(item[5] for item in bucket))
            out["unit_mean"].append(sum(item[6] for item in bucket) / len(bucket))
            out["unit_std"].append(sum(item[7] for item in bucket) / len(bucket))
            bucket = []
    return out


def load_aggregates(campaign: Campaign) -> dict[tuple[str, str], list[tuple]]:
    """{(tier, arm): [(round, agents, mean, std, zero_std, local_used, external_used,
    completions, units, unit_mean, unit_std)]} by round (completions: the mean over agents of
    generation/completions; units: RoundAggregate.units)."""
    rows = (
        RoundAggregate.objects.filter(campaign=campaign)
        .annotate(completions=GENERATED_COMPLETIONS)
        .order_by("tier", "arm", "round")
        .values_list(
            "tier",
            "arm",
            "round",
            "agents",
            "reward_mean",
            "reward_std",
            "zero_std_share",
            "local_used",
            "external_used",
            "completions",
            "units",
            "unit_mean",
            "unit_std",
        )
    )
    grouped: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for tier, arm, *rest in rows:
        grouped[(tier, arm)].append(tuple(rest))
    return grouped


def live_agents(campaign: Campaign) -> dict[str, tuple[str, str]]:
    """{agent: (tier, arm)} of the agents still running: connected swarm nodes and running
    control runs (an agent that left or finished is expected to report nothing more)."""

    agents = {
        f"node:{node_id}": (tier, Arm.SWARM.value)
        for node_id, tier in WorkerNode.objects.filter(
            campaign=campaign, arm=Arm.SWARM, connected=True
        ).values_list("node_id", "tier")
    }
    running = ControlRun.objects.filter(campaign=campaign, state=ControlRun.State.RUNNING)
    for pk, tier, arm in running.values_list("pk", "tier", "arm"):
        agents[f"control:{pk}"] = (tier, arm)
    return agents


def settled_rounds(campaign: Campaign, grouped: dict) -> dict[tuple[str, str], int]:
    """{(tier, arm): S}: rounds 0..S-1 of the arm have been reported by every live agent of it
    that has reported anything (S = 1 + the smallest newest round among them; every round with
    data when no agent of the arm is live). A newer round is the mean of only the agents ahead
    (often one node): the page draws it apart, with its n, and nothing sums it (issue #26 item
    5)."""
    live = live_agents(campaign)
    newest: dict[tuple[str, str], int] = {}
    if live:
        blocks = AgentBlock.objects.filter(campaign=campaign, agent__in=list(live))
        for agent, last in (
            blocks.values("agent").annotate(last=Max("last_round")).values_list("agent", "last")
        ):
            key = live[agent]
            newest[key] = min(newest.get(key, last), last)
    settled = {}
    for key, rows in grouped.items():
        reached = rows[-1][0] + 1 if rows else 0
        settled[key] = min(reached, newest[key] + 1) if key in newest else reached
    return settled


def by_tier(values: dict[tuple[str, str], Any]) -> dict[str, dict[str, Any]]:
    """{(tier, arm): v} as {tier: {arm: v}} (JSON's keys are strings)."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (tier, arm), value in values.items():
        out[tier][arm] = value
    return dict(out)


def settled_only(grouped: dict, settled: dict[tuple[str, str], int]) -> dict[tuple[str, str], list[tuple]]:
    """``grouped`` without the rounds that not every live agent has reported yet."""
    return {
        key: [row for row in rows if row[0] < settled.get(key, row[0] + 1)] for key, rows in grouped.items()
    }


def tiers_of(campaign: Campaign, grouped: dict[tuple[str, str], list] | None = None) -> list[str]:
    tiers = list(campaign.settings.tiers)
    for tier, _ in grouped or {}:
        if tier not in tiers:
            tiers.append(tier)
    return tiers


def reward_series(campaign: Campaign, grouped: dict, max_points: int = MAX_POINTS) -> tuple[dict, int]:
    """{tier: {arm: series}} and the common downsampling step (so arms share x values)."""
    longest = max((rows[-1][0] + 1 for rows in grouped.values() if rows), default=0)
    step = downsample_step(longest, max_points)
    series: dict[str, dict[str, Any]] = {tier: {} for tier in tiers_of(campaign, grouped)}
    for (tier, arm), rows in grouped.items():
        series[tier][arm] = _series([(*r[0:4], *r[7:11]) for r in rows], step)
    return series, step
