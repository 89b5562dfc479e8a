"""The production channel layer: channels-redis, made best effort for what the workers need.

No request of a worker needs Redis (hello, lease, submit, sample, metrics and heartbeat are
database work); Redis carries only pushes (a campaign's state, the end of a revoked token's or a
banned node's sessions) and the dashboard's live points. With the stock layer a Redis outage
took every worker offline: each consumer's read of its channel raised, the consumer died and its
socket closed with 1011, and a hello's ``group_add`` raised ``internal_error``. Here:

* ``receive`` waits out an outage (retrying every ``retry_seconds``) instead of raising, so the
  consumer and its socket live on; pushes sent meanwhile are lost (at-most-once, as the channel
  layer spec allows: every push has a database fallback, see coordinator/groups.py).
* ``group_add`` and ``group_discard`` never raise: a failed one is logged (once per outage) and
  remembered. Memberships are kept in memory too, and when Redis answers again every live
  membership of this process is added again (a restarted Redis has lost them all) and every
  discard Redis has not taken is made (else a closed socket stays a member). A connection error
  is retried once at once first: a pooled connection fails once after a Redis restart.
* At most ``max_concurrent`` Redis operations of this process run at once (the rest queue), so
  a mass disconnect or a reconnect storm never asks the connection pool for more connections
  than it holds (channels-redis on redis-py 8 raised MaxConnectionsError past its 100, in the
  disconnect handler, before the node was marked disconnected).

``group_send`` and ``send`` still raise: their callers (coordinator/groups.py, the campaigns'
broadcast) already treat a push as best effort and say so.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

OUTAGE_ERRORS = (RedisError, OSError, asyncio.TimeoutError)


class ResilientRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args: Any, max_concurrent: int = 64, retry_seconds: float = 1.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_concurrent = max_concurrent
        self.retry_seconds = retry_seconds
        self.memberships: dict[str, set[str]] = defaultdict(set)  # group -> channels of this process
        self.pending_discards: set[tuple[str, str]] = set()  # (group, channel) Redis has not taken
        self.down = False  # an operation failed and Redis has not answered since
        self._limit: asyncio.Semaphore | None = None
        self._limit_loop: asyncio.AbstractEventLoop | None = None
        self._repair: asyncio.Task | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._limit is None or self._limit_loop is not loop:  # one per event loop, as the pools
            self._limit, self._limit_loop = asyncio.Semaphore(self.max_concurrent), loop
        return self._limit

    def _outage(self, what: str, error: BaseException) -> None:
        if not self.down:
            log.warning("channel layer unavailable (%s: %s); pushes are lost until it is back", what, error)
        self.down = True
        if self._repair is None or self._repair.done():
            self._repair = asyncio.ensure_future(self._repair_when_back())

    async def _call(self, what: str, operation: Any, *args: Any) -> Any:
        """One Redis operation, tried once more at once on a connection error: a connection
        pooled before a Redis restart fails on its next use ("Connection closed by server"),
        then the pool connects afresh (CI saw a worker's last group_discard lost that way). The
        failure still counts as an outage, so the repair runs: a restarted Redis lost every
        membership."""
        try:
            async with self._semaphore():
                return await operation(*args)
        except OUTAGE_ERRORS as error:
            self._outage(what, error)
        async with self._semaphore():
            return await operation(*args)

    async def _repair_when_back(self) -> None:
        """Ping until Redis answers, add every live membership of this process again, and
        discard what was left while Redis was away (a Redis that only lost the connection, not
        its data, still holds those members; one that restarted holds what this loop re-added
        before the socket closed). The last check of pending discards and ``down = False``
        share one step of the event loop: no discard can fall between them."""
        while True:
            await asyncio.sleep(self.retry_seconds)
            try:
                async with self._semaphore():
                    await self.connection(0).ping()
                for group, channels in list(self.memberships.items()):
                    for channel in list(channels):
                        if channel in self.memberships.get(group, ()):
                            async with self._semaphore():
                                await super().group_add(group, channel)
                while self.pending_discards:
                    for group, channel in list(self.pending_discards):
                        if channel not in self.memberships.get(group, ()):
                            async with self._semaphore():
                                await super().group_discard(group, channel)
                        self.pending_discards.discard((group, channel))
            except OUTAGE_ERRORS:
                continue
            self.down = False
            log.warning("channel layer is back; %d group memberships restored", self.membership_count)
            return

    @property
    def membership_count(self) -> int:
        return sum(len(channels) for channels in self.memberships.values())

    async def receive(self, channel: str) -> dict[str, Any]:
        while True:
            try:
                return await super().receive(channel)
            except OUTAGE_ERRORS as error:
                self._outage("receive", error)
                await asyncio.sleep(self.retry_seconds)

    async def group_add(self, group: str, channel: str) -> None:
        self.memberships[group].add(channel)
        if self.down:  # do not wait on a Redis known to be away: the repair adds it
            return
        try:
            await self._call("group_add", super().group_add, group, channel)
        except OUTAGE_ERRORS as error:
            self._outage("group_add", error)  # restored by the repair

    async def group_discard(self, group: str, channel: str) -> None:
        members = self.memberships.get(group)
        if members is not None:
            members.discard(channel)
            if not members:
                del self.memberships[group]
        self.pending_discards.add((group, channel))  # until Redis has taken it
        if self.down:  # the repair discards it
            return
        try:
            await self._call("group_discard", super().group_discard, group, channel)
        except OUTAGE_ERRORS as error:
            self._outage("group_discard", error)
            return
        self.pending_discards.discard((group, channel))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if self.down:  # fail fast (callers treat pushes as best effort) rather than wait to connect
            raise RedisConnectionError("the channel layer's Redis is unavailable")
        async with self._semaphore():
            await super().group_send(group, message)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        async with self._semaphore():
            await super().send(channel, message)
