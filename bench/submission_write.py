"""What the write of a protocol-2 submission costs, before and after 2026-12-07 (issue #31 item 4).

Before, a submission's write was sql.STORE_SUBMISSION with the pool records inside one JSON array
of rows (PostgreSQL parsed them three times: the ``::json`` cast, json_to_recordset, each
record's json input), then the round's draw as a statement of its own (sql.DRAW_RECORDS on a
chunk of 16 window numbers, J = 4). Now the records arrive as a binary array of texts and the
draw's first chunk is visited by the submission's own statement (sql.STORE_SUBMISSION as it is).
``BEFORE_STORE`` below is the statement as it was (git 14f3919), the baseline.

Both run on one connection, the same campaign and pool, the same canned rollouts of realistic
size (bench/coordinator.py's: 8 questions x G = 8, 36 KB a submission), alternating in blocks of
``--per-block`` rounds so that a drift of the machine's speed falls on both alike; each round first
inserts the lease it claims (not counted). Prints the CPU per round of PostgreSQL's backend and of
this process (building the parameters, psycopg), from /proc, and the ratio:

    mode=before rounds=... postgres_ms=... self_ms=...
    mode=after rounds=... postgres_ms=... self_ms=...
    write_ratio=... (PostgreSQL's + this process's CPU per round, before over after)

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench SECRET_KEY=$(openssl rand -hex 32) \\
        .venv/bin/python bench/submission_write.py [--rollouts 20000] [--blocks 8] [--per-block 100]
"""

from __future__ import annotations

import argparse
import random
import sys
import uuid
from datetime import timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import alternated_blocks, setup_django

BEFORE_STORE = """
WITH claimed AS (
    UPDATE coordinator_lease l SET state = 'submitted', submission_id = %(submission_id)s,
                                   ack = %(ack)s::jsonb
    WHERE l.lease_id = %(lease_id)s AND l.node_id = %(node)s AND l.round = %(round)s
      AND (l.state = 'active' AND l.deadline >= %(now)s) IS TRUE
      AND NOT EXISTS (SELECT 1 FROM coordinator_lease p
                      WHERE p.node_id = %(node)s AND p.submission_id = %(submission_id)s AND p.submission_id <> '')
      AND NOT EXISTS (SELECT 1 FROM coordinator_workernode n JOIN coordinator_workertoken t ON t.id = n.token_id
                      WHERE n.id = %(node)s AND (n.state = 'banned' OR t.banned_at IS NOT NULL))
    RETURNING l.id
), counted AS (
    UPDATE coordinator_workernode SET accepted_submissions = accepted_submissions + 1,
                                      accepted_rollouts = accepted_rollouts + %(groups)s,
                                      draw_allowance = %(allowance)s
    WHERE id = %(node)s AND state <> 'banned' AND EXISTS (SELECT 1 FROM claimed)
    RETURNING id
), credit_row AS (
    INSERT INTO coordinator_nodecredit (node_id, groups_drawn, groups_drawn_informative)
    SELECT id, 0, 0 FROM counted
    ON CONFLICT (node_id) DO NOTHING
), numbered AS (
    UPDATE campaigns_campaign SET rollout_sequence = rollout_sequence + %(groups)s
    WHERE id = %(campaign)s AND EXISTS (SELECT 1 FROM counted)
    RETURNING rollout_sequence AS last
), stored AS (
    INSERT INTO coordinator_poolrollout (campaign_id, sequence, rollout_id, node_id, lease_id, tier,
                                         replicate, round, task, question_seed, question_index, record,
                                         mean_reward, zero_advantage, in_pool, created_at)
    SELECT %(campaign)s, numbered.last - %(groups)s + r.position, r.rollout_id, %(node)s, claimed.id,
           %(tier)s, %(replicate)s, %(round)s, r.task, r.seed, r.index, r.record, r.mean_reward,
           r.zero_advantage, true, now()
    FROM claimed, numbered,
         json_to_recordset(%(rows)s::json)
             AS r(position bigint, rollout_id text, task text, seed bigint, index bigint, record json,
                  mean_reward float8, zero_advantage bool)
    RETURNING 1
)
SELECT (SELECT last FROM numbered), (SELECT count(*) FROM stored)
"""
J = 4
CHUNK = 16  # pool.chunks' first chunk for J = 4


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=20_000, help="the pool's size at the start")
    parser.add_argument("--blocks", type=int, default=8, help="blocks of each mode, alternating")
    parser.add_argument("--per-block", type=int, default=100, help="submissions a block")
    args = parser.parse_args()
    setup_django()
    import msgspec
    from django.db import connection
    from django.utils import timezone

    from bench.coordinator import rollouts_for
    from bench.prepared import populate
    from swarm_app.coordinator import sql
    from swarm_app.coordinator.leases import lease_message
    from swarm_app.coordinator.models import WorkerNode
    from swarm_app.coordinator.storage.postgres import PostgresStore
    from swarm_app.coordinator.storage.records import FirstChunk, pool_record
    from worker.shared.questions import ref_at
    from worker.shared.rollout import Rollout

    if connection.vendor != "postgresql":
        raise SystemExit("bench/submission_write.py measures PostgreSQL: set DATABASE_URL")
    campaign, nodes, _ = populate(args.rollouts)
    config = campaign.settings
    mix, window = config.mix, config.pool_window
    store = PostgresStore()
    rng = random.Random(0)
    rounds = iter(range(10**6, 10**9))  # past the rounds populate() gave each node
    refs = [ref_at(mix, config.seed, i).to_json() for i in range(config.questions_per_round)]
    deadline = timezone.now() + timedelta(hours=1)
    template = msgspec.to_builtins(lease_message(mix, "template", 0, deadline, refs))

    def submission() -> tuple[WorkerNode, str, int, list[Rollout]]:
        """A new active lease (inserted now) of the next node in turn, so that the window holds
        other nodes' rollouts as at a coordinator of many, and a submission's rollouts for it."""
        round = next(rounds)
        node = nodes[round % len(nodes)]
        lease_id = uuid.uuid4().hex
        store.insert_lease(node, round, lease_id, refs, timezone.now(), deadline)
        records = rollouts_for({**template, "lease_id": lease_id, "round": round}, node.node_id, mix)
        return node, lease_id, round, [Rollout.from_json(r) for r in records]

    def ack(lease_id: str, rollouts: list[Rollout]) -> dict:
        return {
            "submission_id": lease_id,
            "lease_id": lease_id,
            "verified_rewards": [r.rewards for r in rollouts],
            "rollout_ids": [r.rollout_id for r in rollouts],
        }

    def before(node: WorkerNode, lease_id: str, round: int, rollouts: list[Rollout]) -> None:
        ((last, _),) = sql.fetch(
            BEFORE_STORE,
            {
                "submission_id": lease_id,
                "ack": sql.json_text(ack(lease_id, rollouts)),
                "lease_id": lease_id,
                "node": node.pk,
                "campaign": campaign.pk,
                "tier": node.tier,
                "replicate": node.replicate,
                "round": round,
                "now": timezone.now(),
                "groups": len(rollouts),
                "allowance": J,
                "rows": sql.json_text(
                    [
                        {
                            "position": position,
                            "rollout_id": r.rollout_id,
                            "task": r.ref.task,
                            "seed": r.ref.seed,
                            "index": r.ref.index,
                            "record": pool_record(r),
                            "mean_reward": r.mean_reward,
                            "zero_advantage": r.zero_advantage,
                        }
                        for position, r in enumerate(rollouts, start=1)
                    ]
                ),
            },
        )
        sql.fetch(
            sql.DRAW_RECORDS,
            {
                "sequences": rng.sample(range(last - window + 1, last + 1), CHUNK),
                "count": J,
                "campaign": campaign.pk,
                "node": node.pk,
                "replicate": node.replicate,
                "nonzero_only": False,
                "tier": None,
            },
        )

    def after(node: WorkerNode, lease_id: str, round: int, rollouts: list[Rollout]) -> None:
        first = FirstChunk(rng.sample(range(window), CHUNK), J, False, None)
        stored = store.store_submission(
            node, lease_id, round, lease_id, ack(lease_id, rollouts), rollouts, J, timezone.now(), first
        )
        assert stored is not None

    spent = alternated_blocks(
        {
            "before": lambda: partial(before, *submission()),
            "after": lambda: partial(after, *submission()),
        },
        args.blocks,
        args.per_block,
        warm=20,
    )
    for name, (pg_s, own_s, n) in spent.items():
        print(f"mode={name} rounds={n} postgres_ms={1000 * pg_s / n:.3f} self_ms={1000 * own_s / n:.3f}")
    total = {name: pg_s + own_s for name, (pg_s, own_s, _) in spent.items()}
    ratio = total["before"] / total["after"] if total["after"] else float("nan")
    print(f"write_ratio={ratio:.2f} (PostgreSQL's + this process's CPU per round, before over after)")


if __name__ == "__main__":
    main()
