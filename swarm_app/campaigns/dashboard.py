"""What the campaign page shows, computed on the server from the rollups (rollups.py).

The browser gets per-round aggregates (at most MAX_POINTS per series), tables and a summary;
never raw rollouts, and never one row per agent and round except for the few agents a viewer
selects. Definitions (also in docs/web.md and on the page):

* **reward**: the coordinator's verified mean reward of an agent's own completions in a
  round (RoundMetrics.reward), never a worker's claim.
* **per-round mean**: the mean over agents of one arm and tier that reported that round:
  workers for the swarm, seeds for the controls. **Band**: mean ± 1 standard deviation across
  those agents (population std).
* **cumulative reward** (the SAPO paper's measure): the sum over rounds of the per-round mean.
* **summary**: per tier, cumulative reward of each arm over the first H rounds, H being the
  rounds every arm of the tier has reached: H x the mean over independent units of each unit's
  mean reward per round over exactly rounds 0..H-1, with a 95% percentile bootstrap interval
  over the same unit values (2,000 resamples, seed 0): point and interval come from one set of
  numbers. A unit is a seed for a control and a *swarm* for the swarm arm (the mean over its
  nodes: one swarm's nodes share a pool, so they are one replicate of "sharing", not n). With
  one swarm (R = 1) the swarm has no interval, only its nodes' spread, labelled as such. It
  equals the sum of the per-round means when every agent reported every round below H. The
  gain of the swarm over each control arm, in %, is the ratio of the same two means, its
  interval a bootstrap of swarms against seeds (none with one swarm).
* **mechanism**: per tier and arm, over the same H, the mean over units of each unit's mean per
  round of rollups.MECHANISM_KEYS (questions generated, informative groups trained on, J
  from other agents, age of the J side, share of clipped steps), with the same bootstrap
  interval over units and n: over-generation's generation cost sits beside its reward.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db.models import Avg, Count, FloatField, Max, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from swarm_app.campaigns.models import AgentBlock, Arm, Campaign, ControlRun, RoundAggregate, RoundMetrics
from swarm_app.campaigns.rollups import BLOCK_ROUNDS, MECHANISM_KEYS, blocks_between, refresh_rollups
from worker.shared import stats

MAX_POINTS = 500
# Fewer resamples than the study's report: the interval is recomputed on every page load.
BOOTSTRAP_RESAMPLES = 2000
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

    rows: [(round, agents, mean, std, mean generation/completions or None)] by round.
    """
    out: dict[str, list] = {
        "round": [],
        "mean": [],
        "std": [],
        "agents": [],
        "cumulative": [],
        "completions": [],
    }
    cumulative = 0.0
    completions: float | None = 0.0
    bucket: list[tuple] = []
    for index, row in enumerate(rows):
        cumulative += row[2]
        completions = None if completions is None or row[4] is None else completions + row[4]
        bucket.append((*row[:4], cumulative))
        last = index == len(rows) - 1
        if last or rows[index + 1][0] // step != row[0] // step:
            weight = sum(item[1] for item in bucket)
            out["completions"].append(completions)
            out["round"].append(bucket[-1][0])
            out["mean"].append(sum(item[1] * item[2] for item in bucket) / weight)
            out["std"].append(sum(item[1] * item[3] for item in bucket) / weight)
            out["agents"].append(round(weight / len(bucket), 2))
            out["cumulative"].append(bucket[-1][-1])
            bucket = []
    return out


def _load_aggregates(campaign: Campaign) -> dict[tuple[str, str], list[tuple]]:
    """{(tier, arm): [(round, agents, mean, std, zero_std, local_used, external_used,
    completions)]} by round (completions: the mean over agents of generation/completions)."""
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
        )
    )
    grouped: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for tier, arm, *rest in rows:
        grouped[(tier, arm)].append(tuple(rest))
    return grouped


def live_agents(campaign: Campaign) -> dict[str, tuple[str, str]]:
    """{agent: (tier, arm)} of the agents still running: connected swarm nodes and running
    control runs (an agent that left or finished is expected to report nothing more)."""
    from swarm_app.coordinator.models import WorkerNode

    agents = {
        f"node:{node_id}": (tier, Arm.SWARM.value)
        for node_id, tier in WorkerNode.objects.filter(campaign=campaign, connected=True).values_list(
            "node_id", "tier"
        )
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
    tiers = list(campaign.config.get("tiers", []))
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
        series[tier][arm] = _series([(r[0], r[1], r[2], r[3], r[7]) for r in rows], step)
    return series, step


# --- summary -----------------------------------------------------------------------------------


class AgentMeans(NamedTuple):
    """Per (tier, arm), each independent unit's mean per round over the same rounds: a control
    seed for a control, a swarm (the mean over its nodes) for the swarm arm, whose nodes share a
    pool and are not independent of each other; ``metrics``: the same per mechanism key;
    ``nodes``: the swarm arm's per-node values (a descriptive spread, never an interval)."""

    units: dict[tuple[str, str], list[float]]
    metrics: dict[tuple[str, str], dict[str, list[float]]]
    nodes: dict[tuple[str, str], list[float]]


def replicate_of(campaign: Campaign) -> dict[str, int]:
    """{agent ("node:<id>"): the swarm it trains in (0..R-1)} for the campaign's swarm nodes."""
    from swarm_app.coordinator.models import WorkerNode

    rows = WorkerNode.objects.filter(campaign=campaign).values_list("node_id", "replicate")
    return {f"node:{node_id}": replicate for node_id, replicate in rows}


def _unit_means(per_agent: dict[tuple[str, str, str], float], replicates: dict[str, int]) -> dict:
    """{(tier, arm, agent): value} -> {(tier, arm): [value per independent unit]}: a control's
    agents are its seeds; the swarm's nodes count once per swarm (the mean over its nodes; a
    node the coordinator does not know counts in swarm 0)."""
    units: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for (tier, arm, agent), value in per_agent.items():
        unit = f"swarm:{replicates.get(agent, 0)}" if arm == Arm.SWARM else agent
        units[(tier, arm, unit)].append(value)
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (tier, arm, _unit), values in sorted(units.items()):
        out[(tier, arm)].append(sum(values) / len(values))
    return out


def _agent_means(
    campaign: Campaign,
    horizon: dict[str, int],
    start: dict[str, int] | None = None,
    with_metrics: bool = True,
) -> AgentMeans:
    """Each unit's mean reward per round over rounds start..H-1 (start 0 by default) and its
    mean per reporting round of each mechanism key, over exactly those rounds
    (rollups.blocks_between), so that a point and its interval come from the same numbers: an
    agent's mean first, then the mean over the agents of a unit (AgentMeans)."""
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    metric_sums: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0.0, 0])
    )
    for tier, end in horizon.items():
        for block in blocks_between(campaign.pk, tier, (start or {}).get(tier, 0), end, with_metrics):
            entry = sums[(tier, block.arm, block.agent)]
            entry[0] += block.reward_sum
            entry[1] += block.rounds
            for key, (total, count) in (block.metric_sums or {}).items():
                metric = metric_sums[(tier, block.arm, block.agent)][key]
                metric[0] += total
                metric[1] += count
    replicates = replicate_of(campaign) if any(arm == Arm.SWARM for _, arm, _ in sums) else {}
    per_agent = {key: total / rounds for key, (total, rounds) in sums.items() if rounds}
    nodes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (tier, arm, _agent), value in per_agent.items():
        if arm == Arm.SWARM:
            nodes[(tier, arm)].append(value)
    by_key: dict[str, dict[tuple[str, str, str], float]] = defaultdict(dict)
    for agent_key, key_sums in metric_sums.items():
        for key, (total, count) in key_sums.items():
            if count:
                by_key[key][agent_key] = total / count
    metrics: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(dict)
    for key, values in by_key.items():
        for tier_arm, unit_values in _unit_means(values, replicates).items():
            metrics[tier_arm][key] = unit_values
    return AgentMeans(_unit_means(per_agent, replicates), metrics, nodes)


def estimate(values: Sequence[float], arm: str = "") -> dict[str, Any]:
    """Mean over independent units (seeds; swarms for the swarm arm) with its 95% bootstrap
    interval (none from fewer than 2) and n."""
    interval = stats.bootstrap_interval(values, BOOTSTRAP_RESAMPLES) if len(values) >= 2 else None
    return {
        "mean": sum(values) / len(values) if values else None,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
        "agents": len(values),
        "note": interval_note(len(values), arm),
    }


def interval_note(n: int, arm: str = "") -> str | None:
    """What the page shows instead of an interval computed from ``n`` units (None: a real one)."""
    if n == 0:
        return "-"
    if n >= 2:
        return None
    return ONE_SWARM if arm == Arm.SWARM else NO_INTERVAL


def gain_row(
    value: float | None, a: Sequence[float], b: Sequence[float], n_a: int, n_b: int
) -> dict[str, Any]:
    """The swarm's gain in %, its 95% interval (independent bootstrap of the swarms ``a`` against
    the control seeds ``b``: stats.ratio_interval) and both n; with one swarm, or one seed, no
    interval and a note saying why."""
    interval = stats.ratio_interval(a, b, BOOTSTRAP_RESAMPLES) if value is not None else None
    note = None
    if value is not None and n_a < 2:
        note = ONE_SWARM_GAIN
    elif value is not None and n_b < 2:
        note = NO_INTERVAL
    return {
        "value": value,
        "low": interval[0] * 100 if interval and not note else None,
        "high": interval[1] * 100 if interval and not note else None,
        "n": [n_a, n_b],
        "note": note,
    }


def node_spread(nodes: Sequence[float], h: int) -> dict[str, Any] | None:
    """One swarm's nodes, described (not an interval: they share a pool): H x (mean ± 1
    population std across its nodes), None from fewer than 2 nodes."""
    if len(nodes) < 2:
        return None
    mean = sum(nodes) / len(nodes)
    std = math.sqrt(sum((v - mean) ** 2 for v in nodes) / len(nodes))
    return {"low": h * (mean - std), "high": h * (mean + std), "nodes": len(nodes), "note": NODE_SPREAD}


def horizons(grouped: dict) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Per tier: rounds reached by each arm, and H, the rounds every arm reached."""
    reached: dict[str, dict[str, int]] = defaultdict(dict)
    for (tier, arm), rows in grouped.items():
        if rows:
            reached[tier][arm] = rows[-1][0] + 1
    return reached, {tier: min(arms.values()) for tier, arms in reached.items()}


def reference_control(campaign: Campaign) -> str | None:
    """The control kind the headline gain is against (ControlsConfig.reference_kind)."""
    try:
        return campaign.settings.controls.reference_kind()
    except ValueError:  # an unreadable stored config
        return None


def arms_shown(campaign: Campaign, grouped: dict) -> list[dict[str, str]]:
    """The arms the page has columns for: the swarm, the campaign's enabled controls, and any
    other arm with data (an older campaign's), in ARMS' order."""
    try:
        enabled = set(campaign.settings.control_kinds())
    except ValueError:  # an unreadable stored config: show what has data
        enabled = set()
    present = {arm for (_tier, arm), rows in grouped.items() if rows}
    return [
        {"arm": arm.value, "label": ARM_LABELS[arm]}
        for arm in ARMS
        if arm == Arm.SWARM or arm in enabled or arm in present
    ]


def summary(campaign: Campaign, grouped: dict, means: AgentMeans | None = None) -> dict[str, Any]:
    """Per tier: cumulative reward per arm over the common horizon, intervals, gains, n."""
    reached, horizon = horizons(grouped)
    if means is None:
        means = _agent_means(campaign, horizon)
    reference = reference_control(campaign)
    result: dict[str, Any] = {}
    for tier in tiers_of(campaign, grouped):
        h = horizon.get(tier, 0)
        arms: dict[str, Any] = {}
        for arm in ARMS:
            rows = grouped.get((tier, arm), [])
            if not rows:
                arms[arm] = None
                continue
            values = means.units.get((tier, arm), [])
            # The point from the values the interval resamples (not from the per-round means).
            cumulative = h * sum(values) / len(values) if values else 0.0
            # One unit has no spread to resample: no interval (not a zero-width one).
            interval = stats.bootstrap_interval(values, BOOTSTRAP_RESAMPLES) if len(values) >= 2 else None
            arms[arm] = {
                "cumulative": cumulative,
                "low": interval[0] * h if interval else None,
                "high": interval[1] * h if interval else None,
                "agents": len(values),
                "note": interval_note(len(values), arm),
                "reached": reached[tier].get(arm, 0),
            }
            if arm == Arm.SWARM:
                nodes = means.nodes.get((tier, arm), [])
                arms[arm]["nodes"] = len(nodes)
                arms[arm]["spread"] = node_spread(nodes, h) if len(values) == 1 else None

        def gain(baseline: str, arms: dict[str, Any] = arms, tier: str = tier) -> dict[str, Any]:
            swarm, base = arms.get(Arm.SWARM), arms.get(baseline)
            value = gain_percent(swarm["cumulative"] if swarm else None, base["cumulative"] if base else None)
            return gain_row(
                value,
                means.units.get((tier, Arm.SWARM), []),
                means.units.get((tier, baseline), []),
                swarm["agents"] if swarm else 0,
                base["agents"] if base else 0,
            )

        gains = {arm.value: gain(arm) for arm in CONTROL_ARMS}
        result[tier] = {
            "horizon": h,
            "arms": arms,
            # the headline: the swarm's gain over the campaign's reference control
            "reference": reference,
            "gain": gains[reference] if reference else None,
            "gain_vs_isolated": gains[Arm.ISOLATED]["value"],
            "gain_vs_filtered": gains[Arm.FILTERED]["value"],
            "gains": gains,
            "windows": [],
        }
    for start, end, window_means in _windows(campaign, horizon):
        for tier, row in result.items():
            if end.get(tier) is not None:
                row["windows"].append(window_row(start[tier], end[tier], window_means, tier))
    return result


WINDOWS = 3  # the time course: the gain in thirds of the horizon


def window_edges(h: int) -> list[int]:
    """[0, ..., h]: thirds of H, cut at the nearest BLOCK_ROUNDS edge once H holds WINDOWS
    blocks, so that only the last window reads raw rows (the cut block the summary reads too);
    exact thirds below that, where the raw rows are few."""
    if h >= WINDOWS * BLOCK_ROUNDS:
        cuts = [round(h * i / WINDOWS / BLOCK_ROUNDS) * BLOCK_ROUNDS for i in range(1, WINDOWS)]
    else:
        cuts = [h * i // WINDOWS for i in range(1, WINDOWS)]
    return [0, *cuts, h]


def _windows(campaign: Campaign, horizon: dict[str, int]) -> list[tuple[dict, dict, dict]]:
    """[(start, end, agent means)] per window of each tier's horizon (tiers whose H has at least
    WINDOWS rounds; window_edges), each window's per-unit reward means over exactly its rounds."""
    edges = {tier: window_edges(h) for tier, h in horizon.items() if h >= WINDOWS}
    out = []
    for index in range(WINDOWS):
        start = {tier: cut[index] for tier, cut in edges.items()}
        end = {tier: cut[index + 1] for tier, cut in edges.items()}
        out.append((start, end, _agent_means(campaign, end, start, with_metrics=False).units))
    return out


def window_row(start: int, end: int, means: dict[tuple[str, str], list[float]], tier: str) -> dict[str, Any]:
    """One window of rounds start..end-1: each arm's mean reward per round (the mean over its
    agents, 95% bootstrap interval, n) and the swarm's gain over each control arm in % (ratio of
    the same means, stats.ratio_interval over the same per-unit values)."""
    arms = {arm.value: estimate(means[(tier, arm)], arm) for arm in ARMS if means.get((tier, arm))}
    gains = {}
    for arm in CONTROL_ARMS:
        swarm, base = means.get((tier, Arm.SWARM), []), means.get((tier, arm), [])
        if swarm and base:
            value = gain_percent(sum(swarm) / len(swarm), sum(base) / len(base))
            gains[arm.value] = gain_row(value, swarm, base, len(swarm), len(base))
    return {"start": start, "end": end, "arms": arms, "gains": gains}


def mechanism(
    campaign: Campaign,
    grouped: dict,
    metric_means: dict[tuple[str, str], dict[str, list[float]]] | None = None,
) -> dict[str, Any]:
    """Per tier and arm with data, over the summary's H: each of MECHANISM_KEYS as the mean over
    units (seeds, swarms) of their per-round means, with a 95% bootstrap interval over units and n."""
    _, horizon = horizons(grouped)
    if metric_means is None:
        metric_means = _agent_means(campaign, horizon).metrics
    result: dict[str, Any] = {}
    for tier in tiers_of(campaign, grouped):
        arms = {}
        for arm in ARMS:
            if not grouped.get((tier, arm)):
                continue
            by_key = metric_means.get((tier, arm), {})
            arms[arm.value] = {key: estimate(by_key[key], arm) for key in MECHANISM_KEYS if by_key.get(key)}
        result[tier] = {"horizon": horizon.get(tier, 0), "arms": arms}
    return result


# --- pool, workers, controls -----------------------------------------------------------------


def _pool_series(rows: list[tuple], step: int) -> dict[str, list]:
    """One tier's swarm rows -> per (downsampled) round: the share of zero-advantage groups
    among what it generated, and of external rollouts in what it actually trained on."""
    buckets: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, -1])
    for number, agents, _mean, _std, zero, local_used, external_used, _completions in rows:
        bucket = buckets[number // step]
        if zero is not None:
            bucket[0] += zero * agents
            bucket[1] += agents
        if local_used is not None and external_used is not None:
            bucket[2] += external_used * agents
            bucket[3] += (local_used + external_used) * agents
        bucket[4] = max(bucket[4], number)
    series: dict[str, list] = {"round": [], "zero_advantage": [], "external": []}
    for key in sorted(buckets):
        zero_sum, zero_w, external, used, last = buckets[key]
        series["round"].append(int(last))
        series["zero_advantage"].append(zero_sum / zero_w if zero_w else None)
        series["external"].append(external / used if used else None)
    return series


def pool_stats(campaign: Campaign, grouped: dict, step: int) -> dict[str, Any]:
    """The pool now (its sampling window) and, per tier and round, the swarm's share of
    zero-advantage groups and of external rollouts in what it trained on (tiers apart: their
    models differ, so do their shares)."""
    from swarm_app.coordinator.models import PoolRollout

    window = int(campaign.config.get("pool_window", 256))
    sequence = campaign.rollout_sequence
    current = PoolRollout.objects.filter(
        campaign=campaign, sequence__gt=sequence - window, in_pool=True
    ).aggregate(size=Count("id"), zero=Count("id", filter=Q(zero_advantage=True)))
    swarm = {tier: rows for (tier, arm), rows in sorted(grouped.items()) if arm == Arm.SWARM}
    series = {tier: _pool_series(rows, step) for tier, rows in swarm.items()}
    # The headline share: the latest round trained with a known batch, over all tiers (kept
    # for API clients; the page shows the per-tier shares below).
    latest: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for rows in swarm.values():
        for number, agents, _mean, _std, _zero, local_used, external_used, _completions in rows:
            if local_used is not None and external_used is not None:
                latest[number][0] += external_used * agents
                latest[number][1] += (local_used + external_used) * agents
    last = max((n for n, (_, used) in latest.items() if used), default=None)
    return {
        "shared": sequence,
        "window": window,
        "size": current["size"],
        "zero_advantage_share": current["zero"] / current["size"] if current["size"] else None,
        "external_share": latest[last][0] / latest[last][1] if last is not None else None,
        "external_by_tier": {tier: external_share(campaign, tier, rows) for tier, rows in swarm.items()},
        "series": series,
    }


def external_share(campaign: Campaign, tier: str, rows: list[tuple]) -> dict[str, Any] | None:
    """One tier's share of external rollouts in what its swarm nodes trained on, in the latest
    round with a known batch: sum of external_used / sum of (local_used + external_used) over
    the nodes that reported that round, with a 95% bootstrap interval over those nodes
    (stats.paired_ratio_interval: a node's two counts stay together) and their n."""
    known = [row for row in rows if row[5] is not None and row[6] is not None and row[5] + row[6] > 0]
    if not known:
        return None
    number = known[-1][0]
    external: list[float] = []
    used: list[float] = []
    reports = RoundMetrics.objects.filter(campaign=campaign, arm=Arm.SWARM, tier=tier, round=number)
    for metrics in reports.values_list("metrics", flat=True):
        local, ext = metrics.get("batch/local_used"), metrics.get("batch/external_used")
        if isinstance(local, int | float) and isinstance(ext, int | float):
            external.append(float(ext))
            used.append(float(local) + float(ext))
    if not used or sum(used) == 0:
        return None
    interval = stats.paired_ratio_interval(external, used, BOOTSTRAP_RESAMPLES) if len(used) >= 2 else None
    return {
        "round": number,
        "share": sum(external) / sum(used),
        "low": interval[0] + 1 if interval else None,
        "high": interval[1] + 1 if interval else None,
        "agents": len(used),
        "note": interval_note(len(used)),
    }


def hardware_label(hardware: dict[str, Any]) -> str:
    device = hardware.get("device", "?")
    name = hardware.get("device_name", "")
    if hardware.get("vram_bytes"):
        return f"{device} {name} · {hardware['vram_bytes'] / GIB:.0f} GiB".strip()
    ram = hardware.get("ram_bytes")
    return f"{device} {name}".strip() + (f" · {ram / GIB:.0f} GiB RAM" if ram else "")


def worker_status(state: str, connected: bool, round_: int, rounds: int) -> str:
    """What the workers table says: a node that reached the campaign's rounds and left is
    "finished", not "healthy (disconnected)"."""
    if round_ >= rounds > 0 and not connected and state in ("healthy", "stale", "offline"):
        return "finished"
    return state if connected or state in ("offline", "banned") else f"{state} (disconnected)"


def worker_rows(campaign: Campaign, node_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    from swarm_app.coordinator.models import WorkerNode

    rounds = int(campaign.config.get("rounds", 0))
    nodes = WorkerNode.objects.filter(campaign=campaign).order_by("-round", "node_id")
    if node_ids is not None:
        nodes = nodes.filter(node_id__in=list(node_ids))
    return [
        {
            "agent": f"node:{n.node_id}",
            "node": n.node_id,
            "state": n.state,
            "connected": n.connected,
            "status": worker_status(n.state, n.connected, n.round, rounds),
            "tier": n.tier,
            "hardware": hardware_label(n.hardware or {}),
            "backend": n.backend,
            "round": n.round,
            "reward": n.last_reward,
            "rejected": n.rejected_submissions,
        }
        for n in nodes.only(
            "node_id",
            "state",
            "connected",
            "tier",
            "hardware",
            "backend",
            "round",
            "last_reward",
            "rejected_submissions",
        )
    ]


def worker_counts(campaign: Campaign) -> dict[str, int]:
    from swarm_app.coordinator.models import WorkerNode

    counts = dict(
        WorkerNode.objects.filter(campaign=campaign).values_list("state").annotate(n=Count("id")).order_by()
    )
    counts["connected"] = WorkerNode.objects.filter(campaign=campaign, connected=True).count()
    rounds = int(campaign.config.get("rounds", 0))
    finished = WorkerNode.objects.filter(campaign=campaign, connected=False, round__gte=max(rounds, 1))
    if finished.exists():
        counts["finished"] = finished.exclude(state="banned").count()
    return counts


def arm_names(campaign: Campaign) -> dict[str, str]:
    """{control kind: the arm it runs, by the study's name} for this campaign, e.g. 4/4-self."""
    try:
        config = campaign.settings
    except ValueError:
        return {}
    names = {}
    for arm in CONTROL_ARMS:
        try:
            names[arm.value] = config.control_arm(arm.value).name
        except ValueError:  # self-replay of a J = 0 campaign: refused at creation, no such runs
            continue
    return names


def control_status(state: str, campaign_state: str) -> str:
    """A control run's state as the page shows it: a run still marked running under a paused
    campaign waits (its task holds its slot between rounds), under a finished one it is ending
    the round it was in; never "running" under a badge that says otherwise."""
    if state == ControlRun.State.RUNNING:
        if campaign_state == Campaign.State.PAUSED:
            return "waiting (campaign paused)"
        if campaign_state in Campaign.FINISHED:
            return "finishing its round"
    return state


def control_rows(campaign: Campaign) -> list[dict[str, Any]]:
    rounds = int(campaign.config.get("rounds", 0))
    names = arm_names(campaign)
    return [
        {
            "id": run.pk,
            "agent": f"control:{run.pk}",
            "tier": run.tier,
            "arm": run.arm,
            "arm_name": names.get(run.arm, run.arm),
            "seed": run.seed,
            "state": run.state,
            "status": control_status(run.state, campaign.state),
            "round": run.round,
            "rounds": rounds,
            "attempts": run.attempts,
            "resumed_from": run.resumed_from,
            "error": run.error.strip().splitlines()[-1] if run.error.strip() else "",
            "updated_at": run.updated_at.isoformat(),
        }
        for run in ControlRun.objects.filter(campaign=campaign).order_by("tier", "arm", "seed")
    ]


def campaign_info(campaign: Campaign) -> dict[str, Any]:
    return {
        "id": campaign.pk,
        "name": campaign.name,
        "state": campaign.state,
        "failure_reason": campaign.failure_reason,
        "rounds": int(campaign.config.get("rounds", 0)),
        "tiers": tiers_of(campaign),
        "public": campaign.public,
        "started_at": campaign.started_at.isoformat() if campaign.started_at else None,
        "finished_at": campaign.finished_at.isoformat() if campaign.finished_at else None,
    }


# --- what the page and the socket send -------------------------------------------------------


def tables(campaign: Campaign, grouped: dict | None = None, step: int | None = None) -> dict[str, Any]:
    """The slowly changing part: summary, pool, workers, controls (pushed every few seconds)."""
    grouped = _load_aggregates(campaign) if grouped is None else grouped
    if step is None:
        _, step = reward_series(campaign, grouped)
    # Every number below is over the rounds that every live agent has reported (settled_rounds).
    settled = settled_rounds(campaign, grouped)
    complete = settled_only(grouped, settled)
    means = _agent_means(campaign, horizons(complete)[1])
    return {
        "campaign": campaign_info(campaign),
        "arms": arms_shown(campaign, grouped),
        "reference": reference_control(campaign),
        "settled": by_tier(settled),
        "mechanism_keys": [{"key": key, "label": MECHANISM_LABELS[key]} for key in MECHANISM_KEYS],
        "summary": summary(campaign, complete, means),
        "mechanism": mechanism(campaign, complete, means.metrics),
        "pool": pool_stats(campaign, complete, step),
        "workers": worker_rows(campaign),
        "worker_counts": worker_counts(campaign),
        "controls": control_rows(campaign),
    }


_tables_cache: dict[int, tuple[float, dict[str, Any]]] = {}
_tables_lock = threading.Lock()


def cached_tables(campaign_id: int, ttl: float = 2.0) -> dict[str, Any]:
    """:func:`tables` shared for ``ttl`` seconds by every viewer this process serves (the
    summary's bootstrap and the workers table are the costly part of a push)."""
    now = time.monotonic()
    campaign = Campaign.objects.get(pk=campaign_id)
    with _tables_lock:
        hit = _tables_cache.get(campaign_id)
    if hit is not None and now - hit[0] < ttl:
        # The campaign's state is always read fresh: a cached one could undo a pushed pause.
        return {**hit[1], "campaign": campaign_info(campaign)}
    value = tables(campaign)
    with _tables_lock:
        _tables_cache[campaign_id] = (now, value)
        for key in [k for k, (at, _) in _tables_cache.items() if now - at > 60]:
            del _tables_cache[key]
    return value


def dashboard_payload(
    campaign: Campaign, refresh: bool = True, max_points: int = MAX_POINTS
) -> dict[str, Any]:
    """Everything the campaign page loads first (GET /api/campaigns/<id>/dashboard)."""
    started = time.perf_counter()
    refreshed = refresh_rollups(rebuild=False) if refresh else {}
    campaign.refresh_from_db()
    grouped = _load_aggregates(campaign)
    series, step = reward_series(campaign, grouped, max_points)
    payload = {
        "band": BAND,
        "step": step,
        "max_points": max_points,
        "series": series,
        "backlog": refreshed.get("backlog", 0),
        **tables(campaign, grouped, step),
    }
    payload["server_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return payload


def points(campaign_id: int, keys: set[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Current aggregates of the touched (tier, arm, round) keys: the live increments."""
    if not keys:
        return []
    rounds = {key[2] for key in keys}
    rows = (
        RoundAggregate.objects.filter(campaign_id=campaign_id, round__in=rounds)
        .annotate(completions=GENERATED_COMPLETIONS)
        .values_list("tier", "arm", "round", "agents", "reward_mean", "reward_std", "completions")
    )
    return [
        {
            "tier": tier,
            "arm": arm,
            "round": number,
            "agents": agents,
            "mean": mean,
            "std": std,
            "completions": completions,
        }
        for tier, arm, number, agents, mean, std, completions in rows
        if (tier, arm, number) in keys
    ]


def agent_series(campaign: Campaign, agent: str, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """One agent's verified reward per round (downsampled), for a viewer's selected curve."""
    rows = list(
        RoundMetrics.objects.filter(campaign=campaign, agent=agent)
        .order_by("round")
        .values_list("round", "reward", "arm", "tier")
    )
    if not rows:
        return {"agent": agent, "round": [], "reward": [], "arm": None, "tier": None}
    step = downsample_step(rows[-1][0] + 1, max_points)
    out: dict[str, Any] = {"agent": agent, "round": [], "reward": [], "arm": rows[-1][2], "tier": rows[-1][3]}
    bucket: list[float] = []
    for index, (number, reward, _arm, _tier) in enumerate(rows):
        bucket.append(reward)
        if index == len(rows) - 1 or rows[index + 1][0] // step != number // step:
            out["round"].append(number)
            out["reward"].append(sum(bucket) / len(bucket))
            bucket = []
    out["step"] = step
    return out


def agent_choices(campaign: Campaign, limit: int = 2000) -> list[dict[str, str]]:
    """Agents a viewer can pick a curve for: workers and control runs."""
    from swarm_app.coordinator.models import WorkerNode

    nodes = WorkerNode.objects.filter(campaign=campaign).order_by("node_id").values_list("node_id", "tier")
    runs = ControlRun.objects.filter(campaign=campaign).order_by("tier", "arm", "seed")
    choices = [
        {"agent": f"node:{node}", "label": f"worker {node[:10]} ({tier})"} for node, tier in nodes[:limit]
    ]
    choices += [
        {"agent": f"control:{run.pk}", "label": f"{run.arm} {run.tier} seed {run.seed}"} for run in runs
    ]
    return choices


def control_summary(total: int, running: int, mean_round: float, rounds: int) -> str:
    """The status page's controls cell, e.g. "2 of 4 training · round 12.0 / 60"."""
    if not total:
        return "none"
    state = f"{running} of {total} training" if running else f"{total} done"
    return f"{state} · round {mean_round:.1f} / {rounds}"


def status_rows(campaigns: Sequence[Campaign]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The status page: per campaign live worker counts and progress, and totals."""
    from swarm_app.coordinator.models import WorkerNode

    ids = [c.pk for c in campaigns]
    live = dict(
        WorkerNode.objects.filter(campaign_id__in=ids, connected=True, state=WorkerNode.State.HEALTHY)
        .values_list("campaign_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    total = dict(
        WorkerNode.objects.filter(campaign_id__in=ids)
        .values_list("campaign_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    progress = dict(
        WorkerNode.objects.filter(campaign_id__in=ids)
        .values_list("campaign_id")
        .annotate(r=Avg("round"))
        .order_by()
    )
    active = (ControlRun.State.QUEUED, ControlRun.State.RUNNING)
    controls = {
        campaign_id: (runs, running, mean_round)
        for campaign_id, runs, running, mean_round in ControlRun.objects.filter(campaign_id__in=ids)
        .values_list("campaign_id")
        .annotate(n=Count("id"), running=Count("id", filter=Q(state__in=active)), r=Avg("round"))
        .order_by()
    }
    rows = []
    for c in campaigns:
        runs, running, control_round = controls.get(c.pk, (0, 0, 0))
        rows.append(
            {
                "id": c.pk,
                "name": c.name,
                "state": c.state,
                "public": c.public,
                "tiers": c.config.get("tiers", []),
                "rounds": c.config.get("rounds", 0),
                "live_workers": live.get(c.pk, 0),
                "workers": total.get(c.pk, 0),
                "mean_round": round(progress.get(c.pk) or 0, 1),
                # The swarm may be done while its isolated controls still train (on Celery).
                "controls_running": running,
                "controls": control_summary(runs, running, control_round or 0, c.config.get("rounds", 0)),
                "shared_rollouts": c.rollout_sequence,
                "url": c.get_absolute_url(),
            }
        )
    totals = {
        "campaigns": len(rows),
        "running": sum(1 for r in rows if r["state"] == Campaign.State.RUNNING),
        "live_workers": sum(r["live_workers"] for r in rows),
        "controls_running": sum(r["controls_running"] for r in rows),
        "workers": sum(r["workers"] for r in rows),
        "shared_rollouts": sum(r["shared_rollouts"] for r in rows),
    }
    return rows, totals
