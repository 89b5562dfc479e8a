"""Pool sampling: J verified rollouts of *other* nodes, by the campaign's strategy.

The pool is every rollout a campaign has accepted, numbered by arrival (``sequence``). A draw
looks only at the most recent ``pool_window`` of them:

    candidates = {r : r.sequence > last - window, r in pool, r.node != asking node,
                  r.replicate == node's replicate, [r not zero-advantage], [r.tier == node's tier]}
    draw       = uniform sample of J candidates without replacement

The window counts the campaign's rollouts, so a node of one of R swarms (replicates) sees about
window / R of them: the same span of rounds as with one swarm, its own swarm's part of it.

The candidate scan walks the (campaign, sequence) index over at most ``window`` rows and
fetches only ids, then loads the J chosen records; so the cost depends on the window and J,
not on the pool's size (no ORDER BY RANDOM() over the table). On PostgreSQL the three reads
are prepared statements (sql.SAMPLE_*), planned generically so that the window's index is used
even for a campaign the table's statistics do not know yet. When fewer than J qualify, all
of them are returned and the worker counts the shortfall (worker/shared/sampling.py).

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
from typing import Any

from swarm_app.coordinator.storage import store

_rng = random.SystemRandom()


def sample_external(
    campaign_id: int,
    node_pk: int,
    count: int,
    strategy: str | None = None,
    rng: random.Random | None = None,
) -> list[dict[str, Any]]:
    """Up to ``count`` rollout records (verified) for node ``node_pk``; see the module docstring."""
    if count <= 0:
        return []
    return store().draw(campaign_id, node_pk, count, strategy, rng or _rng)
