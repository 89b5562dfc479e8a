"""The campaign page's live feed, ``/ws/campaigns/<id>/``.

Every stored metrics report is announced to the campaign's group (``campaign-<id>``:
``metrics.points``, a batch of them: swarm_app/campaigns/broadcast.py). The socket does not
forward those events: with a thousand workers that would be a thousand messages per round per
viewer. Instead they are coalesced and pushed, at most every FLUSH_SECONDS:

* ``points``: the current aggregates (mean, std, agents) of the rounds that changed, read from
  the rollups after refreshing them, the per-round difference bands they change
  (``bands``: dashboard.point_bands, the server's intervals, which the page draws as they are),
  plus the raw points of the (at most messages.MAX_WATCHED) agents this viewer selected;
* ``tables``, at most every TABLES_SECONDS and at least every IDLE_TABLES_SECONDS: summary,
  pool, workers, controls;
* ``state`` at once when an organizer pauses, resumes, stops or the campaign ends.

**The shared push.** What is the same for every viewer of a campaign is computed once per
ASGI process, not once per viewer: a CampaignFeed per campaign and process is the group's only
member here (one channel-layer message per batch reaches the process, whatever the number of
viewers), refreshes the rollups and reads the touched rounds' aggregates and bands once per
flush, encodes that points frame once, reads and encodes the tables frame at most once per
FLUSH_SECONDS, and answers "is the campaign public" at most once per AUTH_RECHECK_SECONDS.
Each viewer's own task (DashboardConsumer._push_loop) keeps what is its own: its watched
agents' points (a viewer with some gets its own encoding of the frame), its rights' recheck
(of its session, when the campaign is not public) and its tables' timing. A viewer holds at
most one pending points value: a flush offered before it sent the last one is merged into it
(the newer value of a round wins), so a slow viewer costs a bounded amount of memory here;
what daphne has already written for it but the network has not taken is bounded by daphne's
keepalive: daphne pings every --ping-interval (20 s) and drops a socket whose pong has not
come back within --ping-timeout (30 s), so at most about 50 s of a stuck viewer's frames.

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
import random
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


def campaign_is_public(campaign_id: int) -> bool:
    """Whether anyone may see the campaign (whoever the viewer is)."""
    return Campaign.objects.filter(pk=campaign_id, public=True).exists()


def may_see(campaign_id: int, session_key: str | None) -> bool:
    """Public campaigns are for everyone; private ones for staff."""
    campaigns = Campaign.objects.filter(pk=campaign_id)
    if not session_user(session_key).is_staff:
        campaigns = campaigns.filter(public=True)
    return campaigns.exists()


class SharedPoints:
    """One flush's aggregates and bands of a campaign, computed once for all of this process's
    viewers of it; ``text`` is the points frame of a viewer that watches no new point (most
    viewers), encoded once too."""

    __slots__ = ("_text", "bands", "points", "sent_at")

    def __init__(
        self, points: list[messages.AggregatePoint], bands: list[messages.Band], sent_at: float
    ) -> None:
        self.points, self.bands, self.sent_at = points, bands, sent_at
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            frame = messages.PointsFrame(
                points=self.points, bands=self.bands, agents=[], sent_at=self.sent_at
            )
            self._text = messages.encode_frame(frame)
        return self._text

    def frame(self, agents: list[messages.AgentPoint]) -> str:
        """The points frame of a viewer with these new points of its watched agents."""
        if not agents:
            return self.text
        frame = messages.PointsFrame(
            points=self.points, bands=self.bands, agents=agents, sent_at=self.sent_at
        )
        return messages.encode_frame(frame)

    def then(self, newer: SharedPoints) -> SharedPoints:
        """This flush followed by a newer one, as one: what a viewer that has not sent this one
        yet gets instead of both (the newer value of a round wins; bounded by the rounds)."""
        points = {(p.tier, p.arm, p.round): p for p in self.points} | {
            (p.tier, p.arm, p.round): p for p in newer.points
        }
        bands = {(b.tier, b.arm, b.round): b for b in self.bands} | {
            (b.tier, b.arm, b.round): b for b in newer.bands
        }
        return SharedPoints(list(points.values()), list(bands.values()), newer.sent_at)


class CampaignFeed:
    """A campaign's live feed in this process, shared by every viewer of it here.

    The feed is the campaign group's only member in this process: one channel-layer message per
    ``metrics.points`` batch reaches the process, not one per viewer. At most every
    FLUSH_SECONDS it refreshes the rollups and reads the touched rounds' aggregates and bands
    once, and offers the result to each viewer (DashboardConsumer.offer), which sends it from
    its own task: a viewer adds only its watched agents' points, its rights' recheck and its
    tables. A viewer's pending points are one merged value, never a queue.
    """

    feeds: dict[tuple[asyncio.AbstractEventLoop, int], CampaignFeed] = {}

    def __init__(self, campaign_id: int, layer: Any) -> None:
        self.campaign_id = campaign_id
        self.layer = layer
        self.viewers: set[DashboardConsumer] = set()
        self.keys: set[tuple[str, str, int]] = set()
        self.wake = asyncio.Event()
        self.started = asyncio.get_running_loop().create_future()
        self.tasks: list[asyncio.Task] = []
        self.pending_states: set[asyncio.Task] = set()
        self.public: tuple[float, bool] = (float("-inf"), False)  # (when asked, the answer)
        self.public_lock = asyncio.Lock()
        self.tables: tuple[float, str] = (float("-inf"), "")  # (when read, the encoded frame)
        self.tables_lock = asyncio.Lock()
        self.states = 0  # state changes seen: a tables frame read before one is not kept
        self.flushes = 0  # the points computed (tests count them)

    @classmethod
    async def join(cls, viewer: DashboardConsumer) -> CampaignFeed:
        key = (asyncio.get_running_loop(), viewer.campaign_id)
        feed = cls.feeds.get(key)
        if feed is None:
            feed = cls.feeds[key] = cls(viewer.campaign_id, viewer.channel_layer)
            try:
                await feed.start()
            except BaseException as error:
                del cls.feeds[key]
                feed.started.set_exception(error)
                feed.started.exception()  # retrieved: the viewers that wait on it get it too
                raise
            feed.started.set_result(None)
        else:
            await asyncio.shield(feed.started)
        feed.viewers.add(viewer)
        return feed

    async def leave(self, viewer: DashboardConsumer) -> None:
        self.viewers.discard(viewer)
        key = (asyncio.get_running_loop(), self.campaign_id)
        if self.viewers or self.feeds.get(key) is not self:
            return
        del self.feeds[key]
        await self.stop()

    async def start(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(campaign_group(self.campaign_id), self.channel)
        self.tasks = [asyncio.create_task(self._receive_loop()), asyncio.create_task(self._push_loop())]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.layer.group_discard(campaign_group(self.campaign_id), self.channel)

    async def is_public(self) -> bool:
        """Whether the campaign is public, asked of the database at most every
        AUTH_RECHECK_SECONDS for all of this process's viewers of it."""
        async with self.public_lock:
            asked, answer = self.public
            if time.monotonic() - asked >= AUTH_RECHECK_SECONDS:
                asked = time.monotonic()
                answer = await database_sync_to_async(campaign_is_public)(self.campaign_id)
                self.public = (asked, answer)
            return answer

    async def tables_text(self) -> str:
        """The tables frame, read and encoded at most once per FLUSH_SECONDS for all of this
        process's viewers of the campaign (dashboard.cached_tables shares its costly part for
        longer; the campaign's state in it is read with each frame, and a frame read before a
        state change is not reused after it)."""
        async with self.tables_lock:
            at, text = self.tables
            if time.monotonic() - at >= FLUSH_SECONDS:
                at, states = time.monotonic(), self.states
                tables = await database_sync_to_async(dashboard.cached_tables)(self.campaign_id)
                text = messages.encode_frame(messages.TablesFrame(**tables))
                if states == self.states:
                    self.tables = (at, text)
            return text

    # --- group events ----------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        while True:
            event = await self.layer.receive(self.channel)
            try:
                self.dispatch(event)
            except Exception:  # one bad event must not end the feed
                log.exception(
                    "dashboard feed of campaign %s: event %s failed", self.campaign_id, event.get("type")
                )

    def dispatch(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "metrics.points":
            batch = messages.receive_event(event, messages.MetricsPoints)
            if batch is None:
                return
            for point in batch.points:
                self.keys.add((point.tier, point.arm, point.round))
            for viewer in self.viewers:
                viewer.metrics_points(batch)
            self.wake.set()
        elif kind == "campaign.state":
            change = messages.receive_event(event, messages.CampaignStateEvent)
            if change is None:
                return
            self.public = (float("-inf"), False)  # a change of state is rare: always asked again
            self.states += 1
            self.tables = (float("-inf"), "")
            for viewer in self.viewers:
                task = asyncio.ensure_future(viewer.campaign_state(change))
                self.pending_states.add(task)
                task.add_done_callback(self.pending_states.discard)
        elif kind == "dashboard.refresh":
            if messages.receive_event(event, messages.DashboardRefresh) is None:
                return
            for viewer in self.viewers:
                viewer.dashboard_refresh()
        else:
            log.warning("dashboard feed of campaign %s: dropped an unknown event %r", self.campaign_id, kind)

    # --- the shared push -------------------------------------------------------------------
    async def _push_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            keys, self.keys = self.keys, set()
            if keys:
                try:
                    points, bands = await database_sync_to_async(self._points)(keys)
                except Exception:  # a failed query must not end the feed; the next push retries
                    self.keys |= keys  # kept: the next push retries them
                    self.wake.set()
                    log.exception("dashboard push for campaign %s failed", self.campaign_id)
                    await asyncio.sleep(1.0)
                    continue
                shared = SharedPoints(points, bands, time.time())
                for viewer in self.viewers:
                    viewer.offer(shared)
            await asyncio.sleep(FLUSH_SECONDS)

    def _points(
        self, keys: set[tuple[str, str, int]]
    ) -> tuple[list[messages.AggregatePoint], list[messages.Band]]:
        """The touched rounds' aggregates and the per-round difference bands they change, as
        their declarations (a shape that does not match raises here, not in the browser)."""
        self.flushes += 1
        dashboard.refresh_rollups(rebuild=False)
        points = msgspec.convert(dashboard.points(self.campaign_id, keys), list[messages.AggregatePoint])
        bands = msgspec.convert(dashboard.point_bands(self.campaign_id, keys), list[messages.Band])
        return points, bands


class DashboardConsumer(AsyncWebsocketConsumer):
    campaign_id: int
    pusher: asyncio.Task | None = None
    feed: CampaignFeed | None = None
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
        self.pending: SharedPoints | None = None
        self.watched: set[str] = set()
        self.agent_points: list[messages.AgentPoint] = []
        self.tables_due = False
        self.wake = asyncio.Event()
        self.feed = await CampaignFeed.join(self)
        await self.accept()
        self.pusher = asyncio.create_task(self._push_loop())

    async def disconnect(self, code: int) -> None:
        if self.pusher is not None:
            self.pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pusher
        if self.feed is not None:
            await self.feed.leave(self)

    async def _still_allowed(self) -> bool:
        """Whether the viewer may still see the campaign (asked again at most every
        AUTH_RECHECK_SECONDS); if not, the socket is closed with CLOSE_FORBIDDEN. A public
        campaign is for everyone: that answer is the feed's, shared by this process's viewers;
        a private one is asked of this viewer's session."""
        now = time.monotonic()
        if now - self.checked_at < AUTH_RECHECK_SECONDS:
            return True
        self.checked_at = now
        if self.feed is not None and await self.feed.is_public():
            return True
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

    # --- from the campaign's feed (CampaignFeed.dispatch) ----------------------------------
    def metrics_points(self, batch: messages.MetricsPoints) -> None:
        """New reports: keep the watched agents' points; they go with the feed's next offer."""
        if not self.watched:
            return
        for point in batch.points:
            if point.agent in self.watched:
                self.agent_points.append(
                    messages.AgentPoint(agent=point.agent, round=point.round, reward=point.reward)
                )

    def offer(self, shared: SharedPoints) -> None:
        """The feed's flush: sent by this viewer's pusher (merged into one if it has not sent
        the last one yet: a slow viewer holds one value, not a queue)."""
        self.pending = shared if self.pending is None else self.pending.then(shared)
        self.tables_due = True
        self.wake.set()

    async def campaign_state(self, change: messages.CampaignStateEvent) -> None:
        self.checked_at = float("-inf")  # a change of state is rare: always asked again
        if self.closing or not await self._still_allowed():
            return
        with contextlib.suppress(Disconnected):  # the viewer went meanwhile
            await self.send(
                text_data=messages.encode_frame(messages.StateFrame(state=change.state, reason=change.reason))
            )
        self.tables_due = True
        self.wake.set()

    def dashboard_refresh(self) -> None:
        self.tables_due = True
        self.wake.set()

    # --- the pusher ------------------------------------------------------------------------
    async def _push_loop(self) -> None:
        """Sends what the feed offered, the tables when due, as soon as woken: the feed paces
        the points (at most one offer per FLUSH_SECONDS), so no wait of this viewer's own adds
        to their latency."""
        # A random phase: pages that connect together (every page after a restart of the
        # server) do not all get their tables in the same flush, every TABLES_SECONDS.
        last_tables = time.monotonic() - random.uniform(0.0, TABLES_SECONDS)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TABLES_SECONDS):  # no task per wait, as wait_for makes
                    await self.wake.wait()
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

    async def _push(self, last_tables: float) -> float:
        shared, self.pending = self.pending, None
        agent_points, self.agent_points = self.agent_points, []
        if shared is not None:
            await self.send(text_data=shared.frame(agent_points))
        elif agent_points:  # kept for the feed's next offer (they always come with one)
            self.agent_points[:0] = agent_points
        now = time.monotonic()
        since = now - last_tables
        if (self.tables_due and since >= TABLES_SECONDS) or since >= IDLE_TABLES_SECONDS:
            self.tables_due = False
            assert self.feed is not None  # connected
            await self.send(text_data=await self.feed.tables_text())
            return now
        return last_tables
