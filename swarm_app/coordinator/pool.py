"""Pool sampling: J verified rollouts of *other* nodes, by the campaign's strategy.

The pool is every rollout a campaign has accepted, numbered by arrival (``sequence``). A draw
looks only at the most recent ``pool_window`` of them:

    candidates = {r : r.sequence > last - window, r in pool, r.node != asking node,
                  r.replicate == node's replicate, [r not zero-advantage], [r.tier == node's tier]}
    draw       = uniform sample of J candidates without replacement

The window counts the campaign's rollouts, so a node of one of R swarms (replicates) sees about
window / R of them: the same span of rounds as with one swarm, its own swarm's part of it.

How: the window's numbers are visited in a uniformly random order (:class:`DrawOrder`: the
offsets 0 .. window - 1 below ``last`` shuffled, :func:`shuffled`, numbers under 1 left out), a
few at a time (:func:`chunks`: 4J at first, at least 16, then twice as many each time), and the
first J numbers whose rollout is a candidate are drawn. The first J candidates of a uniformly
random order of the window are a uniform sample of the candidates without replacement, so
this is the draw above; it looks at about J / (share of candidates in the window) numbers
instead of all ``window`` of them, and its cost depends on J and that share, not on the
window or the pool's size. Each visit of a chunk is one statement on PostgreSQL
(sql.DRAW_RECORDS: a probe of the (campaign, sequence) index per number, planned generically
so that the index is used even for a campaign the table's statistics do not know yet). When
fewer than J qualify, all of them are returned and the worker counts the shortfall
(worker/shared/sampling.py).

A draw that follows the node's own submission (protocol 2's submit_ack) visits its first chunk
in the submission's own statement (Store.store_submission), below the pool's last number as that
statement reads it (before the submission's rollouts, which are the node's own and never
drawn): one statement and one commit a round fewer (docs/coordinator-bench.md). Where the first
chunk gives fewer than J, the draw goes on from there (consumers.submit_and_draw). Otherwise a
draw is decided on one read (Store.draw_view).

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
from swarm_app.coordinator.storage.records import NO_DRAW, DrawView, FirstChunk
from worker.shared.campaign import CampaignConfig
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


class DrawOrder:
    """The order in which a draw of ``count`` visits a window of ``window`` numbers: offsets
    0 .. window - 1 below the pool's last number (number = last - offset) in a uniformly random
    order, in :func:`chunks`. Offsets rather than numbers, so that the first chunk can be chosen
    before ``last`` is known (the statement that stores a submission reads it)."""

    def __init__(self, window: int, count: int, rng: random.Random | None = None) -> None:
        self._chunks = chunks(shuffled(0, window - 1, rng or _rng), count)

    def next_offsets(self) -> list[int]:
        """The next chunk of offsets, or [] once the window is visited."""
        return next(self._chunks, [])

    def numbers(self, last: int) -> Iterator[list[int]]:
        """The chunks not visited yet, as the numbers they are below ``last`` (those under 1,
        beyond a pool shorter than the window, left out)."""
        for offsets in self._chunks:
            if numbers := [last - offset for offset in offsets if offset < last]:
                yield numbers


def nonzero_only(strategy: str) -> bool:
    """Whether a draw by this external strategy leaves out zero-advantage groups."""
    return check_strategy(strategy) == "nonzero_advantage"


def first_chunk(config: CampaignConfig, tier: str, count: int) -> tuple[DrawOrder | None, FirstChunk]:
    """The order of a draw of ``count`` that follows a submission, and its first chunk, for the
    write that stores the submission to visit (Store.store_submission); none for ``count`` 0."""
    if count <= 0:
        return None, NO_DRAW
    order = DrawOrder(config.pool_window, count)
    chunk = FirstChunk(
        order.next_offsets(),
        count,
        nonzero_only(config.external_strategy),
        tier if config.pool_within_tier else None,
    )
    return order, chunk


def sample_external(
    campaign_id: int,
    node_pk: int,
    count: int,
    strategy: str | None = None,
    rng: random.Random | None = None,
    view: DrawView | None = None,
    order: DrawOrder | None = None,
    drawn: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``count`` rollout records (verified) for node ``node_pk``; see the module docstring.
    ``strategy`` None: the campaign's external strategy; ``view`` None: read it. A draw whose
    first chunk was visited already (Store.store_submission) goes on with its ``order`` and the
    records ``drawn`` from it."""
    drawn = list(drawn or [])
    if len(drawn) >= count:
        return drawn
    storage = store()
    view = view or storage.draw_view(campaign_id, node_pk)
    informative = nonzero_only(strategy or view.config.external_strategy)
    order = order or DrawOrder(view.config.pool_window, count, rng)
    for numbers in order.numbers(view.last):
        drawn += storage.draw_at(campaign_id, node_pk, view, informative, numbers, count - len(drawn))
        if len(drawn) == count:
            break
    return drawn
