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
  mean reward per round over exactly rounds 0..H-1, with a 95% t interval over the same unit
  values (estimates.mean_interval): point and interval come from one set of numbers. A unit is
  a seed for a control and a *swarm* for the swarm arm (the mean over its nodes: one swarm's
  nodes share a pool, so they are one replicate of "sharing", not n). With one swarm (R = 1)
  the swarm has no interval, only its nodes' spread, labelled as such. It equals the sum of the
  per-round means when every agent reported every round below H. The gain of the swarm over
  each control arm, in %, is the ratio of the same two means, its interval the delta method's
  Welch t interval of swarms against seeds (estimates.gain_interval; none with one swarm), with
  the exact permutation test's p over the same units and the smallest p the design can give.
* **difference bands**: per tier, control and round, the swarm's mean over its units minus the
  control's, with Welch's 95% t interval (estimates.difference_bands): the chart draws them as
  they come, live ones included (:func:`point_bands`).
* **mechanism**: per tier and arm, over the same H, the mean over units of each unit's mean per
  round of rollups.MECHANISM_KEYS (questions generated, informative groups trained on, J
  from other agents, age of the J side, share of clipped steps), with the same t interval over
  units and n: over-generation's generation cost sits beside its reward.
* **held-out accuracy** (``held_out``, and ``summary[tier]["held_out"][arm]``): per tier, arm
  and evaluation, the share of fresh held-out questions the coordinator scored right, over the
  same units with the same t interval; nodes without a scored evaluation are counted as missing
  (held_out.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from swarm_app.campaigns.models import Arm, Campaign, ControlRun, RoundAggregate, RoundMetrics
from swarm_app.campaigns.rollups import MECHANISM_KEYS, refresh_rollups
from swarm_app.coordinator.models import WorkerNode
from swarm_app.core.names import control_label, node_label
from swarm_app.web.estimates import (
    agent_means,
    arms_shown,
    difference_band,
    difference_bands,
    horizons,
    mechanism,
    reference_control,
    summary,
)
from swarm_app.web.held_out import held_out, held_out_summary
from swarm_app.web.series import (
    BAND,
    GENERATED_COMPLETIONS,
    MAX_POINTS,
    MECHANISM_LABELS,
    by_tier,
    downsample_step,
    load_aggregates,
    reward_series,
    settled_only,
    settled_rounds,
)
from swarm_app.web.status_tables import (
    campaign_info,
    control_rows,
    pace,
    pool_stats,
    worker_counts,
    worker_rows,
    worker_status_counts,
)

# --- what the page and the socket send -------------------------------------------------------


def tables(campaign: Campaign, grouped: dict | None = None, step: int | None = None) -> dict[str, Any]:
    """The slowly changing part: summary, pool, workers, controls (pushed every few seconds)."""
    grouped = load_aggregates(campaign) if grouped is None else grouped
    if step is None:
        _, step = reward_series(campaign, grouped)
    # Every number below is over the rounds that every live agent has reported (settled_rounds).
    settled = settled_rounds(campaign, grouped)
    complete = settled_only(grouped, settled)
    means = agent_means(campaign, horizons(complete)[1])
    evaluations = held_out(campaign)
    result = summary(campaign, complete, means)
    for tier, row in result.items():
        row["held_out"] = held_out_summary(evaluations, tier)
    return {
        "campaign": campaign_info(campaign),
        "arms": arms_shown(campaign, grouped),
        "reference": reference_control(campaign),
        "settled": by_tier(settled),
        "pace": by_tier(pace(campaign, settled)),
        "mechanism_keys": [{"key": key, "label": MECHANISM_LABELS[key]} for key in MECHANISM_KEYS],
        "summary": result,
        "held_out": evaluations,
        "mechanism": mechanism(campaign, complete, means.metrics),
        "pool": pool_stats(campaign, complete, step),
        "workers": worker_rows(campaign),
        "worker_counts": worker_counts(campaign),
        "worker_status_counts": worker_status_counts(campaign),
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
    grouped = load_aggregates(campaign)
    series, step = reward_series(campaign, grouped, max_points)
    payload = {
        "band": BAND,
        "step": step,
        "max_points": max_points,
        "series": series,
        "difference_bands": difference_bands(series),
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
        .values_list(
            "tier",
            "arm",
            "round",
            "agents",
            "reward_mean",
            "reward_std",
            "completions",
            "units",
            "unit_mean",
            "unit_std",
        )
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
            "units": units,
            "unit_mean": unit_mean,
            "unit_std": unit_std,
        }
        for tier, arm, number, agents, mean, std, completions, units, unit_mean, unit_std in rows
        if (tier, arm, number) in keys
    ]


def point_bands(campaign_id: int, keys: set[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """The per-round difference bands (estimates.difference_band) that the touched (tier, arm,
    round) keys change: a swarm's round, its band against every control with that round; a
    control's, its band against the swarm. One row per (tier, control, round) with both arms:
    {"tier", "arm" (the control), "round", "difference", "low", "high"} (low, high None: no band)."""
    if not keys:
        return []
    rows = RoundAggregate.objects.filter(
        campaign_id=campaign_id,
        tier__in={key[0] for key in keys},
        round__in={key[2] for key in keys},
    ).values_list("tier", "arm", "round", "units", "unit_mean", "unit_std")
    units = {(tier, arm, number): (n, mean, std) for tier, arm, number, n, mean, std in rows}
    pairs = set()
    for tier, arm, number in keys:
        if arm == Arm.SWARM:
            pairs |= {(tier, other, number) for (t, other, r) in units if t == tier and r == number}
        else:
            pairs.add((tier, arm, number))
    out = []
    for tier, arm, number in sorted(pairs):
        swarm, control = units.get((tier, Arm.SWARM, number)), units.get((tier, arm, number))
        if arm == Arm.SWARM or swarm is None or control is None or swarm[1] is None or control[1] is None:
            continue
        band = difference_band(swarm, control)
        out.append(
            {
                "tier": tier,
                "arm": arm,
                "round": number,
                "difference": swarm[1] - control[1],
                "low": band["low"] if band else None,
                "high": band["high"] if band else None,
            }
        )
    return out


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

    nodes = (
        WorkerNode.objects.filter(arm=Arm.SWARM, campaign=campaign)
        .order_by("node_id")
        .values_list("node_id", "tier", "token__owner__volunteer__display_name")
    )
    runs = ControlRun.objects.filter(campaign=campaign).order_by("tier", "arm", "seed")
    # The names of core.names, as the workers table, the volunteers' pages and the export give them.
    choices = [
        {"agent": f"node:{node}", "label": f"{node_label(node, owner)} ({tier})"}
        for node, tier, owner in nodes[:limit]
    ]
    choices += [
        {"agent": f"control:{run.pk}", "label": control_label(run.arm, run.tier, run.seed)} for run in runs
    ]
    return choices
