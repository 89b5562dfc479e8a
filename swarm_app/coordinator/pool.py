"""Pool sampling: J verified rollouts of *other* nodes, by the campaign's strategy.

The pool is every rollout a campaign has accepted, numbered by arrival (``sequence``). A draw
looks only at the most recent ``pool_window`` of them:

    candidates = {r : r.sequence > last - window, r in pool, r.node != asking node,
                  r.replicate == node's replicate, [r not zero-advantage], [r.tier == node's tier]}
    draw       = uniform sample of J candidates without replacement

The window counts the campaign's rollouts, so a node of one of R swarms (replicates) sees about
window / R of them: the same span of rounds as with one swarm, its own swarm's part of it.

How: the window's numbers are visited in a uniformly random order (:func:`shuffled`), a few
at a time (:func:`chunks`: 4J at first, at least 16, then twice as many each time), and the
first J numbers whose rollout is a candidate are drawn. The first J candidates of a uniformly
random order of the window are a uniform sample of the candidates without replacement, so
this is the draw above; it looks at about J / (share of candidates in the window) numbers
instead of all ``window`` of them, and its cost depends on J and that share, not on the
window or the pool's size. Each visit of a chunk is one statement on PostgreSQL
(sql.DRAW_RECORDS: a probe of the (campaign, sequence) index per number, planned generically
so that the index is used even for a campaign the table's statistics do not know yet). When
fewer than J qualify, all of them are returned and the worker counts the shortfall
(worker/shared/sampling.py).

A draw that follows the node's own submission (protocol 2's submit_ack) is decided on what the
submission read and stored: the campaign's settings and the pool's last number just after its
rollouts went in (consumers.submit_and_draw); otherwise on one read (Store.draw_view).

Each draw credits the nodes whose groups it gave (their ``groups_drawn`` and, for a group with a
non-zero advantage, ``groups_drawn_informative``; docs/volunteers.md), in the statement or
transaction that reads the records, up to the asking node's ``draw_allowance``: its last accepted
round's J. A worker that asks again and again gets rollouts, but credits nobody beyond that.

The same function runs inline in the websocket consumer (lowest latency, the default) and as
the Celery task ``sample_pool`` (settings.POOL_SAMPLING = "celery") to move the work off the
ASGI servers.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from swarm_app.coordinator.storage import store
from swarm_app.coordinator.storage.records import DrawView
from worker.shared.sampling import check_strategy

_rng = random.SystemRandom()


def shuffled(first: int, last: int, rng: random.Random) -> Iterator[int]:
    """``first .. last`` in a uniformly random order, one number at a time: Fisher-Yates with the
    swaps kept in a dict, so that taking k numbers costs O(k), not O(last - first)."""
    n = last - first + 1
    swapped: dict[int, int] = {}
    for i in range(n):
        j = rng.randrange(i, n)
        yield first + swapped.get(j, j)
        swapped[j] = swapped.get(i, i)


def chunks(numbers: Iterator[int], count: int) -> Iterator[list[int]]:
    """``numbers`` in lists of 4 x ``count`` (at least 16), then twice as many each time."""
    size = max(16, 4 * count)
    while chunk := [number for _, number in zip(range(size), numbers, strict=False)]:
        yield chunk
        size *= 2


def sample_external(
    campaign_id: int,
    node_pk: int,
    count: int,
    strategy: str | None = None,
    rng: random.Random | None = None,
    view: DrawView | None = None,
) -> list[dict[str, Any]]:
    """Up to ``count`` rollout records (verified) for node ``node_pk``; see the module docstring.
    ``strategy`` None: the campaign's external strategy; ``view`` None: read it."""
    if count <= 0:
        return []
    storage = store()
    view = view or storage.draw_view(campaign_id, node_pk)
    nonzero_only = check_strategy(strategy or view.config.external_strategy) == "nonzero_advantage"
    first = max(1, view.last - view.config.pool_window + 1)
    drawn: list[dict[str, Any]] = []
    for chunk in chunks(shuffled(first, view.last, rng or _rng), count):
        drawn += storage.draw_at(campaign_id, node_pk, view, nonzero_only, chunk, count - len(drawn))
        if len(drawn) == count:
            break
    return drawn
