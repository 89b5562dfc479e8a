"""What preparing the coordinator's statements saves (swarm_app/coordinator/sql.py).

The reads of a worker's round (sql.LEASE_VIEW, SUBMISSION_VIEW, SAMPLE_VIEW and DRAW_RECORDS on a
chunk of 16 window numbers, for a node with no draw allowance left, so that it writes nothing),
on a campaign with a pool of ``--rollouts`` rollouts and as many leases as rounds, each run
either as a prepared statement (parsed and planned once on the connection: what the coordinator
does) or unprepared (parsed and planned on every run: what it did while Django's
``prepare_threshold=None`` made ``prepare=True`` a no-op). The two alternate in blocks of
``--per-block`` rounds on one connection, so that a drift of the machine's speed falls on both
alike. Prints the CPU per round of the statements of PostgreSQL's backend (from /proc, 10 ms
ticks) and of this process (psycopg's side), and the ratio:

    mode=unprepared rounds=... postgres_ms=... self_ms=...
    mode=prepared rounds=... postgres_ms=... self_ms=...
    prepared_ratio=... (PostgreSQL's CPU per round, unprepared over prepared)

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench SECRET_KEY=$(openssl rand -hex 32) \\
        .venv/bin/python bench/prepared.py [--rollouts 20000] [--blocks 10] [--per-block 250]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import alternated_blocks, setup_django

QUESTIONS = 8


def populate(rollouts: int):
    """A campaign, one node per 80 rollouts, a submitted lease per node and round, the pool."""
    from django.utils import timezone

    from bench.coordinator import make_campaign
    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode, WorkerToken

    campaign, _ = make_campaign(f"bench-prepared-{time.time():.0f}")
    token = WorkerToken.objects.filter(campaign=campaign).first()
    nodes = WorkerNode.objects.bulk_create(
        WorkerNode(campaign=campaign, node_id=f"p{i}", token=token, tier="tiny-1m")
        for i in range(max(2, rollouts // 80))
    )
    now = timezone.now()
    rounds = rollouts // QUESTIONS
    leases = Lease.objects.bulk_create(
        Lease(
            lease_id=f"bench-{campaign.pk}-{r}",
            campaign=campaign,
            node=nodes[r % len(nodes)],
            round=r // len(nodes),
            questions=[],
            deadline=now + timedelta(minutes=5),
            state=Lease.State.SUBMITTED,
            submission_id=f"s{r}",
        )
        for r in range(rounds)
    )
    record = {"rollout_id": "", "completions": ["x" * 400] * 8, "rewards": [1.0, 0.0] * 4}
    PoolRollout.objects.bulk_create(
        (
            PoolRollout(
                campaign=campaign,
                sequence=s + 1,
                rollout_id=f"{campaign.pk}-{s}",
                node=leases[s // QUESTIONS].node,
                lease=leases[s // QUESTIONS],
                tier="tiny-1m",
                round=leases[s // QUESTIONS].round,
                task="chain_sum",
                question_seed=0,
                question_index=s,
                record={**record, "rollout_id": f"{campaign.pk}-{s}"},
                mean_reward=0.5,
                zero_advantage=False,
            )
            for s in range(rollouts)
        ),
        batch_size=2000,
    )
    Campaign.objects.filter(pk=campaign.pk).update(rollout_sequence=rollouts)
    return campaign, nodes, leases


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--blocks", type=int, default=10, help="blocks of each mode, alternating")
    parser.add_argument("--per-block", type=int, default=250, help="rounds of the four statements a block")
    args = parser.parse_args()
    setup_django()
    from django.db import connection
    from django.utils import timezone

    from swarm_app.coordinator import sql

    if connection.vendor != "postgresql":
        raise SystemExit("bench/prepared.py measures PostgreSQL: set DATABASE_URL")
    campaign, nodes, leases = populate(args.rollouts)
    rng = random.Random(0)
    window = 256
    node = nodes[0]

    def one_round(prepare: bool) -> None:
        lease = leases[rng.randrange(len(leases))]
        now = timezone.now()
        params = {"campaign": campaign.pk, "node": lease.node_id, "lease_round": lease.round + 1, "now": now}
        sql.fetch(sql.LEASE_VIEW, params, prepare)
        sql.fetch(
            sql.SUBMISSION_VIEW,
            {"node": lease.node_id, "lease_id": lease.lease_id, "submission_id": "none"},
            prepare,
        )
        sql.fetch(sql.SAMPLE_VIEW, {"campaign": campaign.pk, "node": node.pk}, prepare)
        last = args.rollouts
        sql.fetch(
            sql.DRAW_RECORDS,
            {
                "sequences": rng.sample(range(last - window + 1, last + 1), 16),
                "count": 4,
                "campaign": campaign.pk,
                "node": node.pk,
                "replicate": 0,
                "nonzero_only": False,
                "tier": None,
            },
            prepare,
        )

    spent = alternated_blocks(
        {"unprepared": lambda: partial(one_round, False), "prepared": lambda: partial(one_round, True)},
        args.blocks,
        args.per_block,
        warm=50,
    )
    for name, (pg_s, own_s, rounds) in spent.items():
        print(
            f"mode={name} rounds={rounds} postgres_ms={1000 * pg_s / rounds:.3f} self_ms={1000 * own_s / rounds:.3f}"
        )
    ratio = spent["unprepared"][0] / spent["prepared"][0] if spent["prepared"][0] else float("nan")
    print(f"prepared_ratio={ratio:.2f} (PostgreSQL's CPU per round, unprepared over prepared)")


if __name__ == "__main__":
    main()
