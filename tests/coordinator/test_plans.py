"""The plans PostgreSQL picks for the coordinator's hot statements, as prepared (generic) plans
on tables that were never analyzed (autovacuum off, a young campaign): each must probe its index,
never scan a campaign's history."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from swarm_app.coordinator import sql

pytestmark = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL plans")


def generic_plan(statement: str, params: dict) -> str:
    """EXPLAIN of ``statement`` as a generic plan (what a prepared statement runs), as text;
    PostgreSQL infers the parameters' types, as it does for psycopg's prepared statements."""
    names = list(params)
    text = statement
    for i, name in enumerate(names, start=1):
        text = text.replace(f"%({name})s", f"${i}").replace(f"%({name})b", f"${i}")
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE probe AS {text}")
        try:
            arguments = f"({', '.join(['%s'] * len(names))})" if names else ""
            cursor.execute(f"EXPLAIN EXECUTE probe{arguments}", [params[n] for n in names])
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE probe")


def test_a_pool_draw_probes_the_sequence_index_once_per_number(db):
    plan = generic_plan(
        sql.DRAW_RECORDS,
        {
            "sequences": "{1256,1001,1100}",
            "count": 4,
            "campaign": 1,
            "node": 1,
            "replicate": 0,
            "nonzero_only": False,
            "tier": "tiny-1m",
        },
    )
    assert "one_rollout_per_sequence" in plan, plan
    assert "Bitmap Heap Scan on coordinator_poolrollout" not in plan, plan
    assert "Seq Scan" not in plan, plan


def test_the_hot_statements_are_prepared_once_per_connection(db):
    """sql.py's statements run as prepared statements: parsed and planned once per connection,
    then executed by name. Django turns prepared statements off on its connections
    (``prepare_threshold=None``), and psycopg then ignores ``prepare=True``: every execution was
    parsed and planned again, about a third of PostgreSQL's CPU per round at 1,000 volunteers
    (docs/coordinator-bench.md)."""
    params = {"campaign": 0, "node": 0}
    for _ in range(3):
        assert sql.fetch(sql.SAMPLE_VIEW, params) == []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = %s",
            [sql.SAMPLE_VIEW.replace("%(node)s", "$1").replace("%(campaign)s", "$2")],
        )
        assert cursor.fetchall() == [(3, 0)]


# Every statement sql.py prepares, by name. A new one is planned here too (the test below fails
# on a name it does not know).
PREPARED = [
    "LEASE_VIEW",
    "SUBMISSION_VIEW",
    "INSERT_LEASE",
    "STORE_SUBMISSION",
    "SAMPLE_VIEW",
    "DRAW_RECORDS",
    "RECORD_NODE_METRICS",
    "RECORD_NODE_METRICS_AND_LEASE",
]
BIG_TABLES = (
    "coordinator_lease",
    "coordinator_poolrollout",
    "coordinator_workernode",
    "coordinator_nodecredit",
)


def test_every_statement_of_sql_py_is_listed_here():
    statements = {
        name
        for name, value in vars(sql).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }
    assert statements - {"FLUSH_SEEN"} == set(PREPARED)  # FLUSH_SEEN is planned on every run


@pytest.mark.parametrize("name", PREPARED)
def test_a_plan_made_on_empty_tables_still_reads_by_index(db, name):
    """The generic plan a connection keeps from a statement's first run, made here on empty,
    never-analyzed tables: no sequential scan of a table that grows with the campaigns, and no
    read of every active lease (the partial index lease_active_deadline) for one lease."""
    statement = getattr(sql, name)
    plan = generic_plan(statement, dict.fromkeys(re.findall(r"%\((\w+)\)[sb]", statement)))
    for table in BIG_TABLES:
        assert not re.search(rf"Seq Scan on {table}\b", plan), plan
    assert "lease_active_deadline" not in plan, plan
