"""The campaign page's live feed, ``/ws/campaigns/<id>/``.

The socket joins the campaign's group (``campaign-<id>``), where every stored metrics report
is announced (``metrics.points``, a batch of them: swarm_app/campaigns/broadcast.py). It does not forward those
events: with a thousand workers that would be a thousand messages per round per viewer.
Instead it coalesces them and pushes, at most every FLUSH_SECONDS:

* ``points``: the current aggregates (mean, std, agents) of the rounds that changed, read from
  the rollups after refreshing them, plus the raw points of the (at most MAX_WATCHED) agents
  this viewer selected;
* ``tables``, at most every TABLES_SECONDS and at least every IDLE_TABLES_SECONDS: summary,
  pool, workers, controls;
* ``state`` at once when an organizer pauses, resumes, stops or the campaign ends.

A viewer selects agents by sending ``{"type": "watch", "agents": ["node:…", "control:…"]}``.
Only campaigns the viewer may see are served (public ones, or any for staff).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from swarm_app.campaigns import dashboard
from swarm_app.campaigns.broadcast import campaign_group
from swarm_app.campaigns.models import Campaign

FLUSH_SECONDS = 0.25  # at most four point pushes a second
TABLES_SECONDS = 3.0
IDLE_TABLES_SECONDS = 15.0
MAX_WATCHED = 8
log = logging.getLogger(__name__)


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    campaign_id: int
    pusher: asyncio.Task | None = None

    async def connect(self) -> None:
        self.campaign_id = int(self.scope["url_route"]["kwargs"]["campaign_id"])
        if not await database_sync_to_async(self._visible)():
            await self.close(code=4404)
            return
        self.keys: set[tuple[str, str, int]] = set()
        self.watched: set[str] = set()
        self.agent_points: list[dict[str, Any]] = []
        self.tables_due = False
        self.wake = asyncio.Event()
        await self.channel_layer.group_add(campaign_group(self.campaign_id), self.channel_name)
        await self.accept()
        self.pusher = asyncio.create_task(self._push_loop())

    async def disconnect(self, code: int) -> None:
        if self.pusher is not None:
            self.pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pusher
        await self.channel_layer.group_discard(campaign_group(self.campaign_id), self.channel_name)

    def _visible(self) -> bool:
        user = self.scope.get("user")
        campaigns = Campaign.objects.filter(pk=self.campaign_id)
        if not (user is not None and user.is_staff):
            campaigns = campaigns.filter(public=True)
        return campaigns.exists()

    # --- from the viewer -------------------------------------------------------------------
    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "watch":
            agents = content.get("agents") or []
            self.watched = {str(a)[:80] for a in agents if isinstance(a, str)}
            self.watched = set(sorted(self.watched)[:MAX_WATCHED])

    # --- group events ----------------------------------------------------------------------
    async def metrics_points(self, event: dict[str, Any]) -> None:
        for point in event["points"]:
            self.keys.add((point["tier"], point["arm"], int(point["round"])))
            if point["agent"] in self.watched:
                self.agent_points.append(
                    {"agent": point["agent"], "round": point["round"], "reward": point["reward"]}
                )
        self.tables_due = True
        self.wake.set()

    async def campaign_state(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "state", "state": event["state"], "reason": event.get("reason", "")})
        self.tables_due = True
        self.wake.set()

    async def dashboard_refresh(self, event: dict[str, Any]) -> None:
        self.tables_due = True
        self.wake.set()

    # --- the pusher ------------------------------------------------------------------------
    async def _push_loop(self) -> None:
        last_tables = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=TABLES_SECONDS)
            self.wake.clear()
            try:
                last_tables = await self._push(last_tables)
            except Exception:  # a failed query must not end the feed; the next push retries
                log.exception("dashboard push for campaign %s failed", self.campaign_id)
                await asyncio.sleep(1.0)
            await asyncio.sleep(FLUSH_SECONDS)

    async def _push(self, last_tables: float) -> float:
        keys, self.keys = self.keys, set()
        agent_points, self.agent_points = self.agent_points, []
        if keys or agent_points:
            try:
                points = await database_sync_to_async(self._points)(keys)
            except BaseException:
                # Keep what this push was for: the next one retries it (otherwise a failed query
                # would drop these rounds from the live chart until the next reload).
                self.keys |= keys
                self.agent_points[:0] = agent_points
                raise
            await self.send_json(
                {"type": "points", "points": points, "agents": agent_points, "sent_at": time.time()}
            )
        now = time.monotonic()
        since = now - last_tables
        if (self.tables_due and since >= TABLES_SECONDS) or since >= IDLE_TABLES_SECONDS:
            self.tables_due = False
            await self.send_json({"type": "tables", **await database_sync_to_async(self._tables)()})
            return now
        return last_tables

    def _points(self, keys: set[tuple[str, str, int]]) -> list[dict[str, Any]]:
        dashboard.refresh_rollups(rebuild=False)
        return dashboard.points(self.campaign_id, keys)

    def _tables(self) -> dict[str, Any]:
        return dashboard.cached_tables(self.campaign_id)
