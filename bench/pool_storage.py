"""Bounded storage (issue 31, item 2): the database's size after many submitted rounds, before
and after the pool's archive run, and the pool draw's cost before and after.

In this process, on PostgreSQL: 8 nodes of one campaign (bench/coordinator.py's: 8 questions x
G = 8 completions of ~500 characters a round, pool_window 256) each lease and submit rounds
through the coordinator's own functions (issue_lease, the protocol's parse, submissions.submit:
re-scored, stored as in production), ``--rounds`` in all. Then swarm_app/coordinator/archive.py
moves what no draw can reach (grace 0 here) into the campaign's archive, and the plain VACUUM
its run ends with makes the space reusable. With ``--phases 2`` the same number of rounds is
submitted and archived again: a bounded table reuses its freed pages instead of growing.

It prints, per phase, the hot table's size on disk (table, indexes and TOAST), its live rows'
bytes, the archive's, the database's, the lease table's (the run prunes the leases nothing reads), and the draw's median time and shared buffers read
(sample_external of J = 4, and EXPLAIN (ANALYZE, BUFFERS) of the draw statement probing the whole
window), then

    ratio=<hot table's live bytes after / before archiving> draw_ratio=<draw after / before>

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench SECRET_KEY=$(openssl rand -hex 32) \\
        .venv/bin/python bench/pool_storage.py [--rounds 10000] [--phases 2]

It creates its own campaign in that database; use a database of its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import setup_django

MB = 1024 * 1024


def submit_rounds(nodes: list, first_round: int, rounds: int) -> float:
    """``rounds`` rounds over the nodes, each through lease, parse and submit; seconds taken."""
    import msgspec

    from bench.coordinator import rollouts_for
    from swarm_app.coordinator import submissions
    from swarm_app.coordinator.leases import issue_lease
    from worker.shared import protocol

    mix = nodes[0].campaign.settings.mix
    started = time.monotonic()
    for i in range(rounds):
        node = nodes[i % len(nodes)]
        number = first_round + i // len(nodes)
        lease = msgspec.to_builtins(issue_lease(node, number))
        frame = protocol.Submit(
            id="1",
            submission_id=f"{node.node_id}-{number}",
            lease_id=lease["lease_id"],
            rollouts=rollouts_for(lease, node.node_id, mix),
        )
        message = protocol.parse(protocol.encode(frame), "worker")
        submissions.submit(node, message.submission_id, message.lease_id, message.rollouts)
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} rounds submitted ({time.monotonic() - started:.0f} s)", flush=True)
    return time.monotonic() - started


def sizes(campaign) -> dict[str, float]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size('coordinator_poolrollout'), "
            "pg_total_relation_size('coordinator_poolarchive'), pg_database_size(current_database()), "
            "(SELECT coalesce(sum(pg_column_size(p.*)), 0) FROM coordinator_poolrollout p), "
            "(SELECT count(*) FROM coordinator_poolrollout WHERE campaign_id = %s), "
            "(SELECT coalesce(sum(length(data)), 0) FROM coordinator_poolarchive WHERE campaign_id = %s), "
            "pg_total_relation_size('coordinator_lease'), "
            "(SELECT count(*) FROM coordinator_lease WHERE campaign_id = %s)",
            [campaign.pk, campaign.pk, campaign.pk],
        )
        table, archive, database, live, rows, archived, lease_table, leases = cursor.fetchone()
    return {
        "hot_table_mb": table / MB,
        "hot_live_mb": live / MB,
        "hot_rows": rows,
        "archive_table_mb": archive / MB,
        "archive_data_mb": archived / MB,
        "database_mb": database / MB,
        "lease_table_mb": lease_table / MB,
        "lease_rows": leases,
    }


def draw_cost(campaign, node, repeats: int = 300) -> dict[str, float]:
    from django.db import connection

    from swarm_app.coordinator import sql
    from swarm_app.coordinator.pool import sample_external

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        assert len(sample_external(campaign.pk, node.pk, 4)) == 4
        times.append(time.perf_counter() - started)
    campaign.refresh_from_db()
    last = campaign.rollout_sequence
    # One probe of the whole window, newest first (a draw probes a few of its numbers at a time;
    # this one reads them all). The node's allowance is spent by the draws above: it credits nothing.
    params = {
        "sequences": list(range(last, max(0, last - campaign.settings.pool_window), -1)),
        "count": 4,
        "campaign": campaign.pk,
        "node": node.pk,
        "replicate": 0,
        "nonzero_only": True,
        "tier": None,
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.DRAW_RECORDS, params)
        plan = cursor.fetchone()[0][0]
    top = plan["Plan"]
    return {
        "draw_ms": 1000 * statistics.median(times),
        "scan_buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
        "scan_ms": plan["Execution Time"],
    }


def show(label: str, values: dict[str, float]) -> None:
    print(
        label
        + " "
        + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10_000, help="submitted rounds per phase")
    parser.add_argument("--phases", type=int, default=1, help="submit, then archive, this many times")
    args = parser.parse_args()
    setup_django()
    from django.db import connection

    if connection.vendor != "postgresql":
        sys.exit("bench/pool_storage.py measures PostgreSQL: set DATABASE_URL")
    from bench.coordinator import campaign_with_nodes
    from swarm_app.coordinator import archive

    campaign, nodes = campaign_with_nodes(f"pool-storage {time.time():.0f}")
    for phase in range(args.phases):
        seconds = submit_rounds(nodes, phase * args.rounds // len(nodes), args.rounds)
        campaign.refresh_from_db()
        before, draw_before = sizes(campaign), draw_cost(campaign, nodes[0])
        print(f"phase {phase + 1}: {args.rounds} rounds submitted in {seconds:.0f} s")
        show(f"phase {phase + 1} before archiving:", {**before, **draw_before})
        started = time.monotonic()
        moved = archive.archive_all(grace=0).get(campaign.pk, 0)
        took = time.monotonic() - started
        campaign.refresh_from_db()
        after, draw_after = sizes(campaign), draw_cost(campaign, nodes[0])
        show(
            f"phase {phase + 1} after archiving: moved={moved} archive_s={took:.1f}", {**after, **draw_after}
        )
        archived_mb = after["archive_data_mb"] - before["archive_data_mb"]
        compression = before["hot_live_mb"] * moved / max(before["hot_rows"], 1) / max(archived_mb, 1e-9)
        print(
            f"phase {phase + 1}: ratio={after['hot_live_mb'] / before['hot_live_mb']:.4f} "
            f"table_ratio={after['hot_table_mb'] / before['hot_table_mb']:.3f} "
            f"compression={compression:.1f}x "
            f"draw_ratio={draw_after['draw_ms'] / draw_before['draw_ms']:.2f} "
            f"scan_buffers {draw_before['scan_buffers']} -> {draw_after['scan_buffers']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
