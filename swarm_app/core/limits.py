"""Per-connection limits both websockets apply (the workers' and the browsers'): a token bucket
for the message rate, and a traceback log that a client cannot turn into a flood."""

from __future__ import annotations

import logging
import time

UNEXPECTED_LOG_SECONDS = 60.0  # a connection's internal errors log one traceback per window


class TokenBucket:
    """At most ``rate`` messages a second on average, bursts of ``burst``."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class UnexpectedErrorLog:
    """A bug's traceback, at most once a minute per connection (each says how many failed so
    far): a client that finds a failing input must not fill the disks at its message rate."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log, self.what = log, what
        self.count = 0  # internal errors on this connection
        self.logged_at = float("-inf")  # when the last traceback was logged

    def exception(self) -> None:
        """Call from an ``except`` block."""
        now = time.monotonic()
        self.count += 1
        if now - self.logged_at >= UNEXPECTED_LOG_SECONDS:
            self.logged_at = now
            self.log.exception("%s failed (%d on this connection so far)", self.what, self.count)
