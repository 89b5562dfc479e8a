"""Shared set-up for benchmarks that use the coordinator's database (not a test database)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "swarm_app.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def alternated_blocks(
    modes: dict[str, Callable[[], Callable[[], object]]], blocks: int, per_block: int, warm: int
) -> dict[str, tuple[float, float, int]]:
    """CPU seconds of this connection's PostgreSQL backend and of this process per mode, and its
    calls: ``blocks`` blocks of ``per_block`` calls of each mode, the modes alternating block by
    block so that a drift of the machine's speed falls on all alike, after ``warm`` calls of each
    (caches, prepared statements). A mode makes one call ready and returns it: what it does before
    returning (a lease inserted) is done before the block's clock starts and is not counted."""
    import psutil
    from django.db import connection

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cursor.fetchone()[0])
    me = psutil.Process()
    for ready in modes.values():
        for _ in range(warm):
            ready()()
    spent = {name: [0.0, 0.0, 0] for name in modes}
    for _ in range(blocks):
        for name, ready in modes.items():
            calls = [ready() for _ in range(per_block)]
            pg, own = backend.cpu_times(), me.cpu_times()
            for call in calls:
                call()
            pg_after, own_after = backend.cpu_times(), me.cpu_times()
            spent[name][0] += (pg_after.user + pg_after.system) - (pg.user + pg.system)
            spent[name][1] += (own_after.user + own_after.system) - (own.user + own.system)
            spent[name][2] += per_block
    return {name: (pg_s, own_s, int(n)) for name, (pg_s, own_s, n) in spent.items()}
