"""Liveness that costs (almost) nothing: every message of a welcomed connection proves its node
alive, and is noted in memory; the notes are written in one statement every FLUSH_SECONDS.

Before, each heartbeat was a database round trip (an UPDATE and two reads: ~3.9 ms of server
CPU and 0.9 ms of PostgreSQL's, more than a whole round's share at the protocol's pace of three
heartbeats per round). Now a heartbeat is answered from memory: its ``campaign_state`` is the
campaign's state as this process last read it (at most STATE_SECONDS old, and replaced at once
by the organizer's ``campaign_state`` push where the channel layer delivers it).

What readers see is unchanged in kind: ``WorkerNode.last_seen`` lags the last message by at
most FLUSH_SECONDS, far below the liveness beat's thresholds (liveness.py: stale after 30 s,
offline after 120 s); a node that the beat marked stale or offline and that still talks is
healthy (and, if offline, connected) again at the next flush. ``connected`` is otherwise set by
hello and cleared by the disconnect handler only, so a flush racing a disconnect cannot mark a
closed node connected.
"""

from __future__ import annotations

import asyncio
import logging
import time

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.database import db
from swarm_app.coordinator.leases import expire_overdue
from swarm_app.coordinator.storage import store

log = logging.getLogger(__name__)

FLUSH_SECONDS = 5.0
STATE_SECONDS = 2.0


def flush_seen(seen: dict[int, float]) -> int:
    """Write last-seen times (node pk -> POSIX seconds); returns how many nodes were updated."""
    if not seen:
        return 0
    return store().flush_seen(seen)


def read_campaign_state(campaign_pk: int) -> str:
    return Campaign.objects.values_list("state", flat=True).get(pk=campaign_pk)


class Presence:
    """This process's notes of which nodes spoke when, and of its campaigns' states."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}  # node pk -> time of its last message, not yet written
        self.states: dict[int, tuple[float, str]] = {}  # campaign pk -> (read at, state)
        self._flusher: asyncio.Task | None = None

    def touch(self, node_pk: int) -> None:
        self.seen[node_pk] = time.time()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_forever())

    def forget(self, node_pk: int) -> None:
        """The node's connection closed: its pending note is dropped (the disconnect writes)."""
        self.seen.pop(node_pk, None)

    async def flush(self) -> int:
        batch, self.seen = self.seen, {}
        try:
            return await db(flush_seen)(batch)
        except Exception:
            # Keep the notes for the next try (newer notes win): liveness lags, nothing is lost.
            self.seen = {**batch, **self.seen}
            log.warning("could not write %d nodes' last-seen times; retrying", len(batch), exc_info=True)
            return 0

    async def _flush_forever(self) -> None:
        """The notes, and the sweep that puts overdue leases back in line (leases.py)."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()
            try:
                await db(expire_overdue)()
            except Exception:
                log.warning("could not expire overdue leases; retrying", exc_info=True)

    async def campaign_state(self, campaign_pk: int) -> str:
        cached = self.states.get(campaign_pk)
        if cached is not None and time.monotonic() - cached[0] < STATE_SECONDS:
            return cached[1]
        state = await db(read_campaign_state)(campaign_pk)
        self.states[campaign_pk] = (time.monotonic(), state)
        return state

    def pushed_state(self, campaign_pk: int, state: str) -> None:
        self.states[campaign_pk] = (time.monotonic(), state)


PRESENCE = Presence()
