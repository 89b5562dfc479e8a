"""Pushes over the channel layer: a campaign's state to its workers and dashboards, and
"refresh" to its dashboards. Best effort by design: workers learn the state from their next
heartbeat and dashboards refresh on their own every few seconds, so a channel layer that is
down delays a push but never loses a fact."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from swarm_app.campaigns.models import Campaign
from swarm_app.core.messages import (
    CampaignStateEvent,
    DashboardRefresh,
    MetricsPoint,
    MetricsPoints,
    send_event,
)

log = logging.getLogger(__name__)


def campaign_group(campaign_id: int) -> str:
    """The channel group of a campaign's dashboards."""
    return f"campaign-{campaign_id}"


def worker_group(campaign_id: int) -> str:
    """The channel group of a campaign's connected workers (state pushes)."""
    return f"campaign-{campaign_id}-workers"


def push_state(campaign: Campaign) -> None:
    """Tell connected workers and dashboards about the new state (best effort)."""
    layer = get_channel_layer()
    if layer is None:
        return
    event = send_event(CampaignStateEvent(state=campaign.state, reason=campaign.failure_reason))
    for group in (worker_group(campaign.pk), campaign_group(campaign.pk)):
        try:
            async_to_sync(layer.group_send)(group, event)
        except Exception as error:  # the next heartbeat carries the state anyway
            log.warning(
                "could not push state of campaign %s to %s (channel layer: %s)", campaign.pk, group, error
            )


def broadcast_refresh(campaign_id: int) -> None:
    """Ask the campaign's dashboards to refresh their tables (a control started or ended)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(campaign_group(campaign_id), send_event(DashboardRefresh()))
    except Exception as error:  # dashboards also refresh on their own every few seconds
        log.warning(
            "could not ask dashboards of campaign %s to refresh (channel layer: %s)", campaign_id, error
        )


class PointBatcher:
    """Workers' new points, announced to each campaign's dashboards in one ``metrics.points``
    group send per FLUSH_SECONDS (best effort, as every push here).

    A group send per report held a database thread for a hop back to the event loop and several
    Redis operations, 33 times a second at 1,000 volunteers; dashboards coalesce what they
    receive over the same 0.25 s anyway (web/consumers.py), so a viewer sees no difference.
    """

    FLUSH_SECONDS = 0.25

    def __init__(self) -> None:
        self.pending: dict[int, list[MetricsPoint]] = {}
        self._flusher: asyncio.Task | None = None
        self.failing = False  # the last send failed: log again only once one succeeds

    def add(self, campaign_id: int, point: MetricsPoint) -> None:
        self.pending.setdefault(campaign_id, []).append(point)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        # Until nothing is left: a point added while a flush awaits its group send finds this
        # task not done, so add() schedules no other; it must go in this task's next batch
        # (a campaign's last report was otherwise never announced).
        while True:
            await asyncio.sleep(self.FLUSH_SECONDS)
            await self.flush()
            if not self.pending:
                return

    async def flush(self) -> None:
        batch, self.pending = self.pending, {}
        layer = get_channel_layer()
        if layer is None:
            return
        for campaign_id, points in batch.items():
            try:
                await layer.group_send(campaign_group(campaign_id), send_event(MetricsPoints(points=points)))
            except Exception as error:  # the dashboard catches up on its next table refresh
                if not self.failing:  # one line per outage, not four a second
                    log.warning(
                        "could not announce %d points of campaign %s (channel layer: %s); "
                        "dashboards catch up on their next refresh",
                        len(points),
                        campaign_id,
                        error,
                    )
                self.failing = True
            else:
                self.failing = False


POINTS = PointBatcher()
