"""The campaign page's and the status page's tables of things rather than numbers: the pool, the
workers, the controls and the campaign's own state."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db.models import Avg, BooleanField, Count, ExpressionWrapper, F, Max, Q

from swarm_app.campaigns.models import Arm, Campaign, ControlRun, RoundMetrics
from swarm_app.coordinator.models import PoolRollout, WorkerNode
from swarm_app.core.names import node_label
from swarm_app.web.estimates import (
    interval_note,
)
from swarm_app.web.series import (
    CONTROL_ARMS,
    GIB,
    PAGE_BOOTSTRAP_RESAMPLES,
    tiers_of,
)
from worker.shared import stats

# --- pool, workers, controls -----------------------------------------------------------------


def _pool_series(rows: list[tuple], step: int) -> dict[str, list]:
    """One tier's swarm rows -> per (downsampled) round: the share of zero-advantage groups
    among what it generated, and of external rollouts in what it actually trained on."""
    buckets: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, -1])
    for number, agents, _mean, _std, zero, local_used, external_used, *_ in rows:
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

    window = campaign.settings.pool_window
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
        for number, agents, _mean, _std, _zero, local_used, external_used, *_ in rows:
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
    interval = (
        stats.paired_ratio_interval(external, used, PAGE_BOOTSTRAP_RESAMPLES) if len(used) >= 2 else None
    )
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

    rounds = campaign.settings.rounds
    nodes = WorkerNode.objects.filter(arm=Arm.SWARM, campaign=campaign).order_by("-round", "node_id")
    if node_ids is not None:
        nodes = nodes.filter(node_id__in=list(node_ids))
    return [
        {
            "agent": f"node:{n.node_id}",
            "node": n.node_id,
            "name": node_label(n.node_id, n.owner_name),
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
        # owner_name: the display name of the volunteer whose token runs the node (swarm_app/
        # volunteers/, by relation: this module does not import that app).
        for n in nodes.annotate(owner_name=F("token__owner__volunteer__display_name")).only(
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


# The order the workers box lists the statuses in (worker_status's words).
STATUS_ORDER = [
    "healthy",
    "stale",
    "healthy (disconnected)",
    "stale (disconnected)",
    "finished",
    "offline",
    "banned",
]


def worker_status_counts(campaign: Campaign) -> dict[str, int]:
    """The campaign's nodes by what the workers table says of each (worker_status): every node
    in exactly one status, so the counts add up to ``total`` (the workers box's words). One
    grouped read of the node table."""

    rounds = campaign.settings.rounds
    rows = (
        WorkerNode.objects.filter(arm=Arm.SWARM, campaign=campaign)
        .annotate(done=ExpressionWrapper(Q(round__gte=max(rounds, 1)), output_field=BooleanField()))
        .values_list("state", "connected", "done")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict[str, int] = {}
    for state, connected, done, n in rows:
        status = worker_status(state, connected, rounds if done else 0, rounds)
        counts[status] = counts.get(status, 0) + n
    ordered = {key: counts.pop(key) for key in STATUS_ORDER if key in counts}
    ordered.update(sorted(counts.items()))
    return {"total": sum(ordered.values()), **ordered}


def worker_counts(campaign: Campaign) -> dict[str, int]:

    counts = dict(
        WorkerNode.objects.filter(arm=Arm.SWARM, campaign=campaign)
        .values_list("state")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts["connected"] = WorkerNode.objects.filter(arm=Arm.SWARM, campaign=campaign, connected=True).count()
    rounds = campaign.settings.rounds
    finished = WorkerNode.objects.filter(
        arm=Arm.SWARM, campaign=campaign, connected=False, round__gte=max(rounds, 1)
    )
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
    rounds = campaign.settings.rounds
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
            # its node's liveness (coordinator/liveness.py), as the workers table shows a node's
            "node_state": run.node.state if hasattr(run, "node") else None,
            "error": run.error.strip().splitlines()[-1] if run.error.strip() else "",
            "updated_at": run.updated_at.isoformat(),
        }
        for run in ControlRun.objects.filter(campaign=campaign)
        .select_related("node")
        .order_by("tier", "arm", "seed")
    ]


PACE_ROUNDS = 5  # an arm's current rate: over its last settled rounds, at most this many


def pace(campaign: Campaign, settled: dict[tuple[str, str], int]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (tier, arm) with two settled rounds or more, its current rate: the rounds between
    its last settled round and the one up to PACE_ROUNDS before it, and the seconds between
    their settling (a round settles when its last live agent reports it: the latest report's
    time). The run page's time left follows it (run_info.estimates)."""
    out = {}
    for (tier, arm), done in settled.items():
        last, first = done - 1, max(0, done - 1 - PACE_ROUNDS)
        if last <= first:
            continue
        times = dict(
            RoundMetrics.objects.filter(campaign=campaign, arm=arm, tier=tier, round__in=[first, last])
            .values_list("round")
            .annotate(at=Max("created_at"))
            .order_by()
        )
        # Under a second apart: reports that arrived together (a resumed or replayed batch), no pace.
        if len(times) == 2 and (times[last] - times[first]).total_seconds() >= 1.0:
            out[(tier, arm)] = {
                "rounds": last - first,
                "seconds": (times[last] - times[first]).total_seconds(),
            }
    return out


def campaign_info(campaign: Campaign) -> dict[str, Any]:
    return {
        "id": campaign.pk,
        "name": campaign.name,
        "state": campaign.state,
        "failure_reason": campaign.failure_reason,
        "rounds": campaign.settings.rounds,
        "tiers": tiers_of(campaign),
        "public": campaign.public,
        "started_at": campaign.started_at.isoformat() if campaign.started_at else None,
        "finished_at": campaign.finished_at.isoformat() if campaign.finished_at else None,
    }


def control_summary(total: int, running: int, mean_round: float, rounds: int) -> str:
    """The status page's controls cell, e.g. "2 of 4 training · round 12.0 / 60"."""
    if not total:
        return "none"
    state = f"{running} of {total} training" if running else f"{total} done"
    return f"{state} · round {mean_round:.1f} / {rounds}"


def status_rows(campaigns: Sequence[Campaign]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The status page: per campaign live worker counts and progress, and totals."""

    ids = [c.pk for c in campaigns]
    live = dict(
        WorkerNode.objects.filter(
            arm=Arm.SWARM, campaign_id__in=ids, connected=True, state=WorkerNode.State.HEALTHY
        )
        .values_list("campaign_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    total = dict(
        WorkerNode.objects.filter(arm=Arm.SWARM, campaign_id__in=ids)
        .values_list("campaign_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    progress = dict(
        WorkerNode.objects.filter(arm=Arm.SWARM, campaign_id__in=ids)
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
        config = c.settings
        rows.append(
            {
                "id": c.pk,
                "name": c.name,
                "state": c.state,
                "public": c.public,
                "tiers": list(config.tiers),
                "rounds": config.rounds,
                "live_workers": live.get(c.pk, 0),
                "workers": total.get(c.pk, 0),
                "mean_round": round(progress.get(c.pk) or 0, 1),
                # The swarm may be done while its isolated controls still train (on Celery).
                "controls_running": running,
                "controls": control_summary(runs, running, control_round or 0, config.rounds),
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
