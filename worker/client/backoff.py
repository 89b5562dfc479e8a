"""How long the worker waits before trying again: reconnection backoff, and ``busy``'s delay."""

from __future__ import annotations

import math
import random
from typing import Any


def busy_delay(data: dict[str, Any] | None, cap: float = 60.0) -> float:
    """How long to wait after ``busy``: the coordinator's ``retry_after`` (capped), stretched by a
    random 0-50% so that the workers it turned away do not all come back at once."""
    try:
        wait = float((data or {}).get("retry_after", 1.0))
    except (TypeError, ValueError):
        wait = 1.0
    wait = min(max(wait, 0.1), cap) if math.isfinite(wait) else 1.0
    return wait * random.uniform(1.0, 1.5)


class Backoff:
    """Exponential backoff with full jitter: attempt k waits uniform(0, min(cap, base * 2**k))."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None) -> None:
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.attempt = 0
        self.rng = rng or random.Random()

    def ceiling(self, attempt: int | None = None) -> float:
        k = self.attempt if attempt is None else attempt
        return min(self.cap, self.base * 2 ** min(k, 64))

    def next_delay(self) -> float:
        delay = self.rng.uniform(0.0, self.ceiling())
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0
