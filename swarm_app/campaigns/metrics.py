"""Per-round metrics of the controls (stored and pushed live), and the point every dashboard
event lists.

Every node's ``reward`` is the coordinator's own, the mean verified reward of the rollouts the
node submitted for that round; its report supplies the rest (loss, entropy, clip ratios,
lengths, external fraction...), under TRL's names. A swarm node's report is stored by the
coordinator's hot path (coordinator/consumers.report_and_lease through its storage), a control
node's here, with the reward its coordinator re-scored (coordinator/control_nodes.py).
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db.models.functions import Greatest

from swarm_app.campaigns.broadcast import campaign_group
from swarm_app.campaigns.models import ControlRun, RoundMetrics
from swarm_app.core.messages import MetricsPoint, MetricsPoints, send_event
from worker.shared.protocol import clean_metrics

log = logging.getLogger(__name__)


def point(row: RoundMetrics) -> MetricsPoint:
    """A stored report as the dashboards' ``metrics.points`` event lists it."""
    return MetricsPoint(arm=row.arm, tier=row.tier, agent=row.agent, round=row.round, reward=row.reward)


def broadcast(campaign_id: int, row: RoundMetrics) -> None:
    """Tell the campaign's dashboards about a control's new point, from sync code (best effort:
    never fails a report). Swarm nodes' reports are announced in batches by the coordinator
    instead (broadcast.PointBatcher)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            campaign_group(campaign_id), send_event(MetricsPoints(points=[point(row)]))
        )
    except Exception as error:  # the dashboard catching up on reload is fine; losing the report is not
        log.warning("could not broadcast metrics of campaign %s (channel layer: %s)", campaign_id, error)


def record_control_metrics(
    run: ControlRun,
    round: int,
    metrics: dict[str, float],
    *,
    reward: float | None = None,
    node_id: int | None = None,
) -> RoundMetrics:
    """A control's report of ``round`` (one row per round: a report again replaces it), pushed
    to the dashboards. ``reward``: the coordinator's verified reward of the round (its node's
    report's ``reward`` when none is given: a report stored by hand)."""
    row, _ = RoundMetrics.objects.update_or_create(
        campaign_id=run.campaign_id,
        agent=f"control:{run.pk}",
        round=round,
        defaults={
            "arm": run.arm,
            "tier": run.tier,
            "control_run": run,
            "node_id": node_id,
            "reward": metrics["reward"] if reward is None else reward,
            "metrics": clean_metrics(metrics),
        },
    )
    ControlRun.objects.filter(pk=run.pk).update(round=Greatest("round", round + 1))
    broadcast(run.campaign_id, row)
    return row
