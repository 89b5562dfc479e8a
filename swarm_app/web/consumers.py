"""The campaign page's live feed, ``/ws/campaigns/<id>/``.

The socket joins the campaign's group (``campaign-<id>``), where every stored metrics report
is announced (``metrics.points``, a batch of them: swarm_app/campaigns/broadcast.py). It does not forward those
events: with a thousand workers that would be a thousand messages per round per viewer.
Instead it coalesces them and pushes, at most every FLUSH_SECONDS:

* ``points``: the current aggregates (mean, std, agents) of the rounds that changed, read from
  the rollups after refreshing them, the per-round difference bands they change
  (``bands``: dashboard.point_bands, the server's intervals, which the page draws as they are),
  plus the raw points of the (at most messages.MAX_WATCHED) agents this viewer selected;
* ``tables``, at most every TABLES_SECONDS and at least every IDLE_TABLES_SECONDS: summary,
  pool, workers, controls;
* ``state`` at once when an organizer pauses, resumes, stops or the campaign ends.

A viewer selects agents by sending ``{"type": "watch", "agents": ["node:…", "control:…"]}``
(at most messages.MAX_WATCHED names of at most 80 characters; the only frame a viewer sends).

Every frame and group event is declared in swarm_app/core/messages.py (docs/messages.md): a
viewer's frame is decoded against its declaration, a group event read as its own, and what is
pushed is encoded from them.

Limits (docs/web.md): a frame over MAX_FRAME_BYTES is refused before it is parsed (close 4413);
more than FRAMES_PER_SECOND frames a second on average (bursts of FRAMES_BURST) close the socket
(4429); a frame that is not a valid ``watch`` is answered ``{"type": "error", "code":
"bad_frame", "message": …}`` and changes nothing.

Only campaigns the viewer may see are served (public ones, or any for staff), and that is
decided again, from the session store and the users table, at most AUTH_RECHECK_SECONDS before
anything is sent and at least every TABLES_SECONDS: a socket whose campaign was made private,
or whose viewer logged out, lost staff status or whose session expired, is closed with 4403.
A campaign the viewer may not see is refused at connect with 4404.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from importlib import import_module
from types import SimpleNamespace
from typing import Any

import msgspec
from autobahn.exception import Disconnected  # daphne's websocket protocol, this project's server
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user

from swarm_app.campaigns.broadcast import campaign_group
from swarm_app.campaigns.models import Campaign
from swarm_app.core import messages
from swarm_app.core.limits import TokenBucket
from swarm_app.web import dashboard

FLUSH_SECONDS = 0.25  # at most four point pushes a second
TABLES_SECONDS = 3.0
IDLE_TABLES_SECONDS = 15.0
# A watch of 8 names of 80 characters is about 800 bytes; nothing a page sends is larger.
MAX_FRAME_BYTES = 4096
# The page sends a watch when the viewer changes the selection: a person's clicks, far below this.
FRAMES_PER_SECOND = 2.0
FRAMES_BURST = 10.0
AUTH_RECHECK_SECONDS = 1.0
CLOSE_NOT_FOUND = 4404  # at connect: no such campaign, or not one this viewer may see
CLOSE_FORBIDDEN = 4403  # later: the campaign was made private, or the viewer's rights ended
CLOSE_TOO_BIG = (
    4413  # a frame over MAX_FRAME_BYTES (autobahn lets an application send only 1000 or 3000-4999)
)
CLOSE_RATE = 4429  # more frames than FRAMES_PER_SECOND
log = logging.getLogger(__name__)


def session_user(session_key: str | None) -> Any:
    """The user of a session as the session store and the users table say now (AnonymousUser
    once the session was flushed by a logout, has expired, or its user is inactive or changed
    password), not as they were when the socket connected."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]


def frame_bytes(text_data: str | None, bytes_data: bytes | None) -> int:
    """A frame's size in bytes, without encoding a long text (a character is at least a byte)."""
    if text_data is None:
        return len(bytes_data or b"")
    return len(text_data) if len(text_data) > MAX_FRAME_BYTES else len(text_data.encode())


def may_see(campaign_id: int, session_key: str | None) -> bool:
    """Public campaigns are for everyone; private ones for staff."""
    campaigns = Campaign.objects.filter(pk=campaign_id)
    if not session_user(session_key).is_staff:
        campaigns = campaigns.filter(public=True)
    return campaigns.exists()


class DashboardConsumer(AsyncWebsocketConsumer):
    campaign_id: int
    pusher: asyncio.Task | None = None
    closing = False  # this side closed the socket

    async def connect(self) -> None:
        self.campaign_id = int(self.scope["url_route"]["kwargs"]["campaign_id"])
        session = self.scope.get("session")
        self.session_key = session.session_key if session is not None else None
        self.bucket = TokenBucket(FRAMES_PER_SECOND, FRAMES_BURST)
        self.checked_at = time.monotonic()
        if not await database_sync_to_async(may_see)(self.campaign_id, self.session_key):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.keys: set[tuple[str, str, int]] = set()
        self.watched: set[str] = set()
        self.agent_points: list[messages.AgentPoint] = []
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

    async def _still_allowed(self) -> bool:
        """Whether the viewer may still see the campaign (asked again at most every
        AUTH_RECHECK_SECONDS); if not, the socket is closed with CLOSE_FORBIDDEN."""
        now = time.monotonic()
        if now - self.checked_at < AUTH_RECHECK_SECONDS:
            return True
        self.checked_at = now
        if await database_sync_to_async(may_see)(self.campaign_id, self.session_key):
            return True
        await self.close(code=CLOSE_FORBIDDEN)
        return False

    # --- from the viewer -------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closing:  # frames that were queued behind our close
            return
        if frame_bytes(text_data, bytes_data) > MAX_FRAME_BYTES:
            await self.close(code=CLOSE_TOO_BIG)
            return
        if not self.bucket.take():
            await self.close(code=CLOSE_RATE)
            return
        try:
            watch = messages.decode_viewer_frame(text_data if text_data is not None else bytes_data or b"")
        except msgspec.DecodeError as error:  # not JSON, or not a watch (ValidationError is one)
            # The viewer may have gone while its frames were queued: a reply to nobody is dropped.
            with contextlib.suppress(Disconnected):
                await self.send(text_data=messages.bad_frame(error))
            return
        self.watched = set(watch.agents)

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        self.closing = True
        await super().close(code=code, reason=reason)

    # --- group events ----------------------------------------------------------------------
    async def metrics_points(self, event: dict[str, Any]) -> None:
        batch = messages.receive_event(event, messages.MetricsPoints)
        if batch is None:
            return
        for point in batch.points:
            self.keys.add((point.tier, point.arm, point.round))
            if point.agent in self.watched:
                self.agent_points.append(
                    messages.AgentPoint(agent=point.agent, round=point.round, reward=point.reward)
                )
        self.tables_due = True
        self.wake.set()

    async def campaign_state(self, event: dict[str, Any]) -> None:
        change = messages.receive_event(event, messages.CampaignStateEvent)
        if change is None:
            return
        self.checked_at = float("-inf")  # a change of state is rare: always asked again
        if not await self._still_allowed():
            return
        await self.send(
            text_data=messages.encode_frame(messages.StateFrame(state=change.state, reason=change.reason))
        )
        self.tables_due = True
        self.wake.set()

    async def dashboard_refresh(self, event: dict[str, Any]) -> None:
        if messages.receive_event(event, messages.DashboardRefresh) is None:
            return
        self.tables_due = True
        self.wake.set()

    # --- the pusher ------------------------------------------------------------------------
    async def _push_loop(self) -> None:
        last_tables = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=TABLES_SECONDS)
            self.wake.clear()
            if self.closing:  # this side closed the socket (a limit, a lost right): nobody to feed
                return
            try:
                if not await self._still_allowed():
                    return  # the socket is closed
                last_tables = await self._push(last_tables)
            except Disconnected:
                # The socket was not open for this push (the viewer went while it was under way,
                # seen in the fuzz test's flood of sockets). Not a failure of the server: no
                # traceback; the loop goes on as after any failed push, and disconnect() cancels
                # a closed socket's loop. (Ending the loop here once stopped a live page's
                # updates in test_live_intervals_browser, 1 run of 1; not understood, so not done.)
                log.debug("dashboard push for campaign %s: the socket was closed", self.campaign_id)
                await asyncio.sleep(1.0)
            except Exception:  # a failed query must not end the feed; the next push retries
                log.exception("dashboard push for campaign %s failed", self.campaign_id)
                await asyncio.sleep(1.0)
            await asyncio.sleep(FLUSH_SECONDS)

    async def _push(self, last_tables: float) -> float:
        keys, self.keys = self.keys, set()
        agent_points, self.agent_points = self.agent_points, []
        if keys or agent_points:
            try:
                points, bands = await database_sync_to_async(self._points)(keys)
            except BaseException:
                # Keep what this push was for: the next one retries it (otherwise a failed query
                # would drop these rounds from the live chart until the next reload).
                self.keys |= keys
                self.agent_points[:0] = agent_points
                raise
            frame = messages.PointsFrame(points=points, bands=bands, agents=agent_points, sent_at=time.time())
            await self.send(text_data=messages.encode_frame(frame))
        now = time.monotonic()
        since = now - last_tables
        if (self.tables_due and since >= TABLES_SECONDS) or since >= IDLE_TABLES_SECONDS:
            self.tables_due = False
            tables = await database_sync_to_async(self._tables)()
            await self.send(text_data=messages.encode_frame(messages.TablesFrame(**tables)))
            return now
        return last_tables

    def _points(
        self, keys: set[tuple[str, str, int]]
    ) -> tuple[list[messages.AggregatePoint], list[messages.Band]]:
        """The touched rounds' aggregates and the per-round difference bands they change, as
        their declarations (a shape that does not match raises here, not in the browser)."""
        dashboard.refresh_rollups(rebuild=False)
        points = msgspec.convert(dashboard.points(self.campaign_id, keys), list[messages.AggregatePoint])
        bands = msgspec.convert(dashboard.point_bands(self.campaign_id, keys), list[messages.Band])
        return points, bands

    def _tables(self) -> dict[str, Any]:
        return dashboard.cached_tables(self.campaign_id)
