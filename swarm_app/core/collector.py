"""The cyclic garbage collector of a serving process, tuned once the application is loaded.

Reference counting frees almost everything a request allocates; the cyclic collector only finds
cycles. With CPython's defaults it still ran every 700 net container allocations and, every few
young collections, traversed every object of the process (Django, reasoning-gym, a thousand
connections' state: about 470,000 objects). In a daphne process holding 1,000 volunteers at the
protocol's pace (bench/capacity.py), ``gc.callbacks`` timed with ``time.thread_time`` counted
about 0.33 ms of collector CPU per round in the steady window: a full collection of 300-380 ms
about once a minute plus young ones of 2-8 ms each (docs/coordinator-bench.md, fourth pass).

Two changes, made after the application's modules are imported:

* :func:`gc.freeze` moves every object that exists then (the loaded code, settings, caches) to a
  permanent generation that no collection traverses again;
* the young generation's threshold goes from 700 to :data:`YOUNG_THRESHOLD`: a collection then
  meets the cycles of some 2,000 rounds at once (about 650 new objects a second at that pace)
  and cost 38-137 ms of CPU about once a minute, next to 0.33 ms every round before. The
  garbage waiting for it is a few megabytes at most.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def settle_for_serving() -> None:
    """Freeze what is loaded and collect young cycles less often (module docstring)."""
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD)
