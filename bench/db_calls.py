"""What one hand-off to the coordinator's database threads costs: ``db()`` (swarm_app/coordinator/
database.py) of a no-op, of ``SELECT 1`` and of a one-row UPDATE that matches nothing, called
one at a time with a gap between calls (as requests arrive at the protocol's pace).

Every worker request that touches the database pays this once, on top of its statements: the
hop from the event loop to a database thread and back, the connection handling around the call
(since 2026-12-06 the thread keeps its connection; before, Channels' wrapper took one from the
pool, with the pool's check query, and gave it back on every call) and psycopg's execution of
one prepared statement.
Measured as this process's CPU (user + system) and PostgreSQL's (every postgres process, so run
it on a quiet database), per call; the baseline in the same run is the gap alone (the event
loop sleeping ``--gap-ms`` and waking), subtracted from each line:

    call=noop n=2000 self_ms=... postgres_ms=...

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench SECRET_KEY=$(openssl rand -hex 32) \\
        .venv/bin/python bench/db_calls.py [--calls 2000] [--gap-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import setup_django


def postgres_cpu(psutil) -> float:
    total = 0.0
    for process in psutil.process_iter(["name"]):
        if process.info["name"] == "postgres":
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total


async def per_call(call, calls: int, gap: float, psutil) -> tuple[float, float]:
    """(this process's, PostgreSQL's) CPU milliseconds per iteration of ``call`` and the gap."""
    me = psutil.Process()
    for _ in range(50):  # the pool's connections open, statements prepared
        await call()
    before, before_pg = me.cpu_times(), postgres_cpu(psutil)
    for _ in range(calls):
        await call()
        await asyncio.sleep(gap)
    after, after_pg = me.cpu_times(), postgres_cpu(psutil)
    self_s = (after.user + after.system) - (before.user + before.system)
    return 1000 * self_s / calls, 1000 * (after_pg - before_pg) / calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    args = parser.parse_args()
    setup_django()
    import psutil
    from django.db import connection

    from swarm_app.coordinator import sql
    from swarm_app.coordinator.database import db

    if connection.vendor != "postgresql":
        raise SystemExit("bench/db_calls.py measures the PostgreSQL path: set DATABASE_URL")

    def noop() -> None:
        return None

    def select_one() -> list[tuple]:
        return sql.fetch("SELECT 1", {})

    def update_nothing() -> list[tuple]:
        return sql.fetch("UPDATE campaigns_campaign SET state = state WHERE id = -1 RETURNING id", {})

    async def gap_only() -> None:
        return None

    async def run() -> None:
        gap = args.gap_ms / 1000
        base_self, base_pg = await per_call(gap_only, args.calls, gap, psutil)
        print(
            f"call=gap_only n={args.calls} self_ms={base_self:.3f} postgres_ms={base_pg:.3f} (the baseline)"
        )
        for name, function in (("noop", noop), ("select_1", select_one), ("update_nothing", update_nothing)):
            self_ms, pg_ms = await per_call(db(function), args.calls, gap, psutil)
            print(
                f"call={name} n={args.calls} self_ms={self_ms - base_self:.3f} "
                f"postgres_ms={pg_ms - base_pg:.3f}"
            )

    started = time.perf_counter()
    asyncio.run(run())
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
