"""The coordinator's database threads: where a consumer's service calls run.

Channels' ``database_sync_to_async`` runs every call of a process on ONE thread, so while
one request waits on PostgreSQL (about half of a submission's time) no other request of
that process makes progress. The service functions are written for many concurrent
connections (several ASGI servers share one database: row locks, conditional updates,
unique constraints), so on PostgreSQL they run on a pool of threads instead, one per
connection of the process's psycopg pool. SQLite allows one writer at a time: there the
calls stay on the single thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import DatabaseSyncToAsync
from django.conf import settings


def _database_threads() -> int:
    """Threads for database work: one per pooled PostgreSQL connection; 0 on SQLite."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        return 0
    pool = database.get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        return int(pool.get("max_size", 8))
    return 8 if pool else 4  # psycopg's default pool, or no pool: a few connections of its own


_THREADS = _database_threads()
_EXECUTOR = ThreadPoolExecutor(_THREADS, thread_name_prefix="coordinator-db") if _THREADS else None


class _Load:
    """Database calls of this process started and not yet finished (queued or running)."""

    in_flight = 0


def database_threads() -> int:
    """This process's database threads (0: SQLite's one thread-sensitive thread)."""
    return _THREADS


def in_flight() -> int:
    return _Load.in_flight


def queue_limit() -> int:
    """Past this many calls in flight the consumer answers ``busy`` (consumers.py): a few per
    database thread, so a request's wait in the queue stays a few service times long."""
    return settings.WORKER_BUSY_QUEUE_PER_THREAD * max(4, _THREADS)  # SQLite: as 4


def db(function: Callable[..., Any]) -> Callable[..., Any]:
    """``database_sync_to_async(function)``, on the database thread pool where there is one."""
    if _EXECUTOR is None:
        call = DatabaseSyncToAsync(function)
    else:
        call = DatabaseSyncToAsync(function, thread_sensitive=False, executor=_EXECUTOR)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        _Load.in_flight += 1
        try:
            return await call(*args, **kwargs)
        finally:
            _Load.in_flight -= 1

    return counted
