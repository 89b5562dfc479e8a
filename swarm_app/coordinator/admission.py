"""Which worker requests a coordinator process takes when it is behind, and how long it tells the
rest to wait.

A request that needs the database (consumers.DATABASE_WORK) waits in two queues before it is
answered, and each is measured:

* **the event loop**: a frame read from its socket waits for the process's one event loop to
  reach it. ``LoopLag`` schedules a timer every ``PERIOD`` seconds and records how late it runs:
  the time the loop takes to get through what was ready before it, which is what a frame read
  now will wait too. Past ``WORKER_BUSY_LOOP_LAG_MS`` the request is refused.
* **the database threads**: calls in flight (database.in_flight); past queue_limit() the request
  is refused.

A refused request is answered ``busy`` with a ``retry_after`` that grows with how many were
turned away per one taken over the last second: at 3x overload a fixed wait brought every
refused worker back at once, and the server spent its CPU refusing the same resent submissions
(bench/capacity.py, docs/coordinator-bench.md).
"""

from __future__ import annotations

import asyncio
import time

from django.conf import settings

from swarm_app.coordinator.database import in_flight, queue_limit
from worker.shared.protocol import ErrorCode, ProtocolError


class LoopLag:
    """How late this process's event loop runs a timer due every PERIOD seconds (seconds).

    ``lag()`` is the larger of the last tick's lateness, decayed by DECAY per tick since (so one
    slow iteration is remembered for a few ticks, not forever), and how overdue the next tick is
    now (a loop that is behind has not run it yet).
    """

    PERIOD = 0.05
    DECAY = 0.7

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.due = 0.0
        self.late = 0.0

    def _tick(self) -> None:
        assert self.loop is not None
        now = self.loop.time()
        self.late = max(now - self.due, self.late * self.DECAY)
        self.due = now + self.PERIOD
        self.loop.call_at(self.due, self._tick)

    def lag(self) -> float:
        """Seconds; starts the timer on the running loop at the first call."""
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            self.loop, self.late = loop, 0.0
            self.due = loop.time() + self.PERIOD
            loop.call_at(self.due, self._tick)
        return max(self.late, loop.time() - self.due)


class Admission:
    """The requests this process takes (``admit``), from the two measured queues above."""

    WINDOW = 1.0
    MAX_WAIT = 30.0

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.taken = self.refused = 0
        self.ratio = 0.0  # refused per taken, in the last full window
        self.loop_lag = LoopLag()

    def _roll(self) -> None:
        now = time.monotonic()
        if now - self.started >= self.WINDOW:
            self.ratio = self.refused / max(1, self.taken)
            self.started, self.taken, self.refused = now, 0, 0

    def admit(self) -> None:
        """Take the request, or raise ``busy`` (a ProtocolError) with its ``retry_after``."""
        self._roll()
        lag_limit = settings.WORKER_BUSY_LOOP_LAG_MS / 1000
        behind = lag_limit > 0 and self.loop_lag.lag() >= lag_limit
        if not behind and in_flight() < queue_limit():
            self.taken += 1
            return
        self.refused += 1
        wait = min(self.MAX_WAIT, 1.0 + 2.0 * self.ratio)
        raise ProtocolError(
            ErrorCode.BUSY,
            "the coordinator is busy; send this request again shortly",
            {"retry_after": round(wait, 2)},
        )


ADMISSION = Admission()
