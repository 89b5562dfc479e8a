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
    horizons,
    mechanism,
    reference_control,
    summary,
)
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
    return {
        "campaign": campaign_info(campaign),
        "arms": arms_shown(campaign, grouped),
        "reference": reference_control(campaign),
        "settled": by_tier(settled),
        "pace": by_tier(pace(campaign, settled)),
        "mechanism_keys": [{"key": key, "label": MECHANISM_LABELS[key]} for key in MECHANISM_KEYS],
        "summary": summary(campaign, complete, means),
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
