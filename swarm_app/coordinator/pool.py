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

The same function runs inline in the websocket consumer (lowest latency, the default) and as
the Celery task ``sample_pool`` (settings.POOL_SAMPLING = "celery") to move the work off the
ASGI servers.
"""

from __future__ import annotations

import random
from typing import Any

from swarm_app.campaigns.models import Campaign, settings_from_text
from swarm_app.coordinator import sql
from swarm_app.coordinator.models import PoolRollout, WorkerNode
from worker.shared.sampling import check_strategy

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
    if sql.is_postgres():
        ((config_text, last, tier, replicate),) = sql.fetch(
            sql.SAMPLE_VIEW, {"campaign": campaign_id, "node": node_pk}
        )
        config = settings_from_text(config_text)
        strategy = check_strategy(strategy or config.external_strategy)
        rows = sql.fetch(
            sql.SAMPLE_CANDIDATES,
            {
                "campaign": campaign_id,
                "after": last - config.pool_window,
                "last": last,
                "node": node_pk,
                "replicate": replicate,
                "nonzero_only": strategy == "nonzero_advantage",
                "tier": tier if config.pool_within_tier else None,
            },
        )
        chosen = (rng or _rng).sample([row[0] for row in rows], min(count, len(rows)))
        records = {i: sql.from_json_text(text) for i, text in sql.fetch(sql.SAMPLE_RECORDS, {"ids": chosen})}
        return [records[i] for i in chosen]
    campaign = Campaign.objects.only("config", "rollout_sequence").get(pk=campaign_id)
    config = campaign.settings
    strategy = check_strategy(strategy or config.external_strategy)
    candidates = PoolRollout.objects.filter(
        campaign_id=campaign_id, sequence__gt=campaign.rollout_sequence - config.pool_window, in_pool=True
    ).exclude(node_id=node_pk)
    tier, replicate = WorkerNode.objects.values_list("tier", "replicate").get(pk=node_pk)
    candidates = candidates.filter(replicate=replicate)
    if strategy == "nonzero_advantage":
        candidates = candidates.filter(zero_advantage=False)
    if config.pool_within_tier:
        candidates = candidates.filter(tier=tier)
    ids = list(candidates.values_list("id", flat=True))
    chosen = (rng or _rng).sample(ids, min(count, len(ids)))
    records = dict(PoolRollout.objects.filter(id__in=chosen).values_list("id", "record"))
    return [records[i] for i in chosen]
