"""The campaign page's numbers with their intervals: the summary over the settled horizon, the gain
of the swarm over each control (swarms against seeds), the windows of the time course, the
per-round difference's band and the mechanism table (the definitions: swarm_app/web/dashboard.py).

Every interval the page shows comes from this module, and every one is t-based, so that it holds
its 95 % at the campaign's own n (2 to 8 units an arm; issue #47, docs/web.md "Intervals"):

* an arm's mean over its units: :func:`mean_interval` (Student's t, n - 1 df);
* the gain over a control, headline and windows: :func:`gain_interval` (delta method, Welch's
  df rounded down: stats.welch_gain_interval);
* the per-round difference swarm - control: :func:`difference_band` (Welch's t interval from
  the round's unit means and spreads).

The tests are exact permutation tests over units (stats.permutation_test): a gain row carries
its p and the smallest p its design can give; the windows' p are Holm-adjusted per control over
the windows of every tier. The coverage these intervals reach (and the percentile bootstrap they
replace did not) is measured by tests/campaigns/test_interval_coverage.py."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

from swarm_app.campaigns.models import Arm, Campaign
from swarm_app.campaigns.rollups import BLOCK_ROUNDS, MECHANISM_KEYS, blocks_between
from swarm_app.coordinator.models import WorkerNode
from swarm_app.web.series import (
    ARM_LABELS,
    ARMS,
    CONTROL_ARMS,
    NO_INTERVAL,
    NODE_SPREAD,
    ONE_SWARM,
    ONE_SWARM_GAIN,
    gain_percent,
    tiers_of,
)
from worker.shared import stats

# --- summary -----------------------------------------------------------------------------------


class AgentMeans(NamedTuple):
    """Per (tier, arm), each independent unit's mean per round over the same rounds: a control
    seed for a control, a swarm (the mean over its nodes) for the swarm arm, whose nodes share a
    pool and are not independent of each other; ``metrics``: the same per mechanism key;
    ``nodes``: the swarm arm's per-node values (a descriptive spread, never an interval);
    ``replicates``: each swarm node's swarm (replicate_of), read once and reused by the windows."""

    units: dict[tuple[str, str], list[float]]
    metrics: dict[tuple[str, str], dict[str, list[float]]]
    nodes: dict[tuple[str, str], list[float]]
    replicates: dict[str, int]


def replicate_of(campaign: Campaign) -> dict[str, int]:
    """{agent ("node:<id>"): the swarm it trains in (0..R-1)} for the campaign's swarm nodes."""

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


def agent_means(
    campaign: Campaign,
    horizon: dict[str, int],
    start: dict[str, int] | None = None,
    with_metrics: bool = True,
    replicates: dict[str, int] | None = None,
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
    if replicates is None:
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
    return AgentMeans(_unit_means(per_agent, replicates), metrics, nodes, replicates)


CONFIDENCE = 0.95
# Random splits of a permutation test too large to enumerate (more than stats.EXACT_MAX_SPLITS:
# about 8 units a side and more), fewer than the study's: the page recomputes it on every push.
PAGE_PERMUTATIONS = 10_000


def mean_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % t interval of the mean of independent units: mean -+ t_{0.975, n - 1} s / sqrt(n)
    (stats.t_interval); none from fewer than 2."""
    return stats.t_interval(values, CONFIDENCE)


def gain_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % interval of the relative gain (mean(a) - mean(b)) / |mean(b)| of the swarms ``a``
    against the control seeds ``b`` (a fraction, not %): the delta method's t interval with
    Welch's degrees of freedom rounded down (stats.welch_gain_interval); none with fewer than 2
    units on a side."""
    return stats.welch_gain_interval(a, b, CONFIDENCE)


def difference_band(
    a: tuple[int, float, float] | None, b: tuple[int, float, float] | None
) -> dict[str, float] | None:
    """One round's swarm - control difference and its 95 % band, from each arm's (units, mean over
    the units, population std across them): Welch's t interval (stats.welch_interval) with the
    sample variances s^2 = std^2 n / (n - 1); none when an arm has fewer than 2 units."""
    if a is None or b is None or a[1] is None or b[1] is None:
        return None
    (n_a, mean_a, std_a), (n_b, mean_b, std_b) = a, b
    if n_a < 2 or n_b < 2:
        return None
    var_a, var_b = (std_a or 0.0) ** 2 * n_a / (n_a - 1), (std_b or 0.0) ** 2 * n_b / (n_b - 1)
    interval = stats.welch_interval(mean_a, var_a, n_a, mean_b, var_b, n_b, CONFIDENCE)
    if interval is None:
        return None
    return {"difference": mean_a - mean_b, "low": interval[0], "high": interval[1]}


def difference_bands(series: dict[str, dict[str, dict[str, list]]]) -> dict[str, dict[str, dict[str, list]]]:
    """{tier: {control arm: {"round", "difference", "low", "high"}}}: per round both series have
    (series.reward_series' points, downsampled alike), the swarm's unit mean minus the control's
    and its band (:func:`difference_band`; low and high None where there is none). The chart of
    the swarm minus each control draws exactly these (static/campaigns/dashboard.js)."""
    out: dict[str, dict[str, dict[str, list]]] = {}
    for tier, arms in series.items():
        swarm = arms.get(Arm.SWARM)
        if not swarm:
            continue
        at = {r: i for i, r in enumerate(swarm["round"])}
        for arm, control in arms.items():
            if arm == Arm.SWARM:
                continue
            rows: dict[str, list] = {"round": [], "difference": [], "low": [], "high": []}
            for j, number in enumerate(control["round"]):
                i = at.get(number)
                if i is None:
                    continue
                a = (swarm["units"][i], swarm["unit_mean"][i], swarm["unit_std"][i])
                b = (control["units"][j], control["unit_mean"][j], control["unit_std"][j])
                band = difference_band(a, b)
                rows["round"].append(number)
                rows["difference"].append(a[1] - b[1] if a[1] is not None and b[1] is not None else None)
                rows["low"].append(band["low"] if band else None)
                rows["high"].append(band["high"] if band else None)
            out.setdefault(tier, {})[str(arm)] = rows
    return out


def estimate(values: Sequence[float], arm: str = "") -> dict[str, Any]:
    """Mean over independent units (seeds; swarms for the swarm arm) with its 95% t interval
    (:func:`mean_interval`; none from fewer than 2) and n."""
    interval = mean_interval(values)
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
    """The swarm's gain in %, its 95% interval (:func:`gain_interval` of the swarms ``a`` against
    the control seeds ``b``), both n, the exact permutation test's two-sided p over the same
    units (stats.permutation_test) and ``min_p``, the smallest p that test can give with n_a
    against n_b units (stats.permutation_min_p: 0.2 for 2 vs 3); with one swarm, or one seed, no
    interval and a note saying why."""
    interval = gain_interval(a, b) if value is not None else None
    note = None
    if value is not None and n_a < 2:
        note = ONE_SWARM_GAIN
    elif value is not None and n_b < 2:
        note = NO_INTERVAL
    test = stats.permutation_test(a, b, PAGE_PERMUTATIONS) if value is not None and a and b else None
    return {
        "value": value,
        "low": interval[0] * 100 if interval and not note else None,
        "high": interval[1] * 100 if interval and not note else None,
        "n": [n_a, n_b],
        "note": note,
        "p": test.p_value if test else None,
        "min_p": stats.permutation_min_p(n_a, n_b),
    }


def adjust_windows(result: dict[str, Any]) -> None:
    """Holm's adjustment of the windows' p (stats.holm), per control over the windows of every
    tier (m = windows x tiers with a p): each window's gain row gets ``p_holm``, each tier
    ``windows_family``, the m its windows were adjusted over (the smallest adjusted p they can
    reach is min(1, m x min_p))."""
    for arm in CONTROL_ARMS:
        rows = [
            row["gains"][arm.value]
            for tier_row in result.values()
            for row in tier_row["windows"]
            if row["gains"].get(arm.value, {}).get("p") is not None
        ]
        for row, adjusted in zip(rows, stats.holm([row["p"] for row in rows]), strict=True):
            row["p_holm"] = adjusted
        for tier_row in result.values():
            tier_row.setdefault("windows_family", {})[arm.value] = len(rows)


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
        means = agent_means(campaign, horizon)
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
            # The point from the values the interval resamples (not from the per-round means),
            # both scaled to H rounds; one unit has no interval (not a zero-width one).
            unit = estimate(values, arm)
            arms[arm] = {
                "cumulative": h * unit["mean"] if values else 0.0,
                "low": unit["low"] * h if unit["low"] is not None else None,
                "high": unit["high"] * h if unit["high"] is not None else None,
                "agents": unit["agents"],
                "note": unit["note"],
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
    for start, end, window_means in _windows(campaign, horizon, means.replicates):
        for tier, row in result.items():
            if end.get(tier) is not None:
                row["windows"].append(window_row(start[tier], end[tier], window_means, tier))
    adjust_windows(result)
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


def _windows(
    campaign: Campaign, horizon: dict[str, int], replicates: dict[str, int]
) -> list[tuple[dict, dict, dict]]:
    """[(start, end, agent means)] per window of each tier's horizon (tiers whose H has at least
    WINDOWS rounds; window_edges), each window's per-unit reward means over exactly its rounds."""
    edges = {tier: window_edges(h) for tier, h in horizon.items() if h >= WINDOWS}
    out = []
    for index in range(WINDOWS):
        start = {tier: cut[index] for tier, cut in edges.items()}
        end = {tier: cut[index + 1] for tier, cut in edges.items()}
        window = agent_means(campaign, end, start, with_metrics=False, replicates=replicates)
        out.append((start, end, window.units))
    return out


def window_row(start: int, end: int, means: dict[tuple[str, str], list[float]], tier: str) -> dict[str, Any]:
    """One window of rounds start..end-1: each arm's mean reward per round (the mean over its
    units, 95% t interval, n) and the swarm's gain over each control arm in % (ratio of the same
    means; :func:`gain_row` over the same per-unit values: interval, p, smallest p)."""
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
    units (seeds, swarms) of their per-round means, with a 95% t interval over units and n."""
    _, horizon = horizons(grouped)
    if metric_means is None:
        metric_means = agent_means(campaign, horizon).metrics
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
