"""The plans PostgreSQL picks for the coordinator's hot statements, as prepared (generic) plans
on tables that were never analyzed (autovacuum off, a young campaign): each must probe its index,
never scan a campaign's history."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from swarm_app.coordinator import sql

pytestmark = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL plans")


def generic_plan(statement: str, params: dict) -> str:
    """EXPLAIN of ``statement`` as a generic plan (what a prepared statement runs), as JSON text."""
    names = list(params)
    text = statement
    for i, name in enumerate(names, start=1):
        text = text.replace(f"%({name})s", f"${i}")
    types = ", ".join(
        "bigint"
        if isinstance(params[n], int) and not isinstance(params[n], bool)
        else "boolean"
        if isinstance(params[n], bool)
        else "text"
        for n in names
    )
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE probe({types}) AS {text}")
        try:
            cursor.execute(
                f"EXPLAIN (FORMAT JSON) EXECUTE probe({', '.join(['%s'] * len(names))})",
                [params[n] for n in names],
            )
            return json.dumps(cursor.fetchone()[0])
        finally:
            cursor.execute("DEALLOCATE probe")


def test_a_pool_draw_probes_the_sequence_index_once_per_number(db):
    plan = generic_plan(
        sql.SAMPLE_CANDIDATES,
        {
            "after": 1000,
            "last": 1256,
            "campaign": 1,
            "node": 1,
            "nonzero_only": False,
            "tier": "tiny-1m",
            "replicate": 0,
        },
    )
    assert "one_rollout_per_sequence" in plan, plan
    assert "Hash Join" not in plan and "Bitmap Heap Scan" not in plan and "Seq Scan" not in plan, plan
