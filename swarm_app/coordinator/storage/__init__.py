"""Storage of the coordinator's hot paths behind one interface (records.Store): leases,
submissions, the pool's draw, presence and the nodes' metrics reports.

Two implementations side by side: postgres.py (prepared statements, one or two a request: what
1,000 volunteers need, docs/coordinator-bench.md) and orm.py (Django's ORM: the embedded mode on
SQLite, and the reference). :func:`store` picks the one for the database in use, once per
process. tests/coordinator/test_storage_contract.py runs the same scenario against both.
"""

from __future__ import annotations

from functools import cache

from swarm_app.coordinator import sql
from swarm_app.coordinator.storage.orm import OrmStore
from swarm_app.coordinator.storage.postgres import PostgresStore
from swarm_app.coordinator.storage.records import Store


@cache
def store() -> Store:
    """The implementation for this process's database."""
    return PostgresStore() if sql.is_postgres() else OrmStore()
