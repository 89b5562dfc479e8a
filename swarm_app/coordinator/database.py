"""The coordinator's database threads: where a consumer's service calls run.

Channels' ``database_sync_to_async`` runs every call of a process on ONE thread, so while
one request waits on PostgreSQL (about half of a submission's time) no other request of
that process makes progress. The service functions are written for many concurrent
connections (several ASGI servers share one database: row locks, conditional updates,
unique constraints), so on PostgreSQL they run on a pool of threads instead, each holding one
connection of the process's psycopg pool from one call to the next (all but
POOL_LEFT_FOR_THE_REST of them). SQLite allows one writer at a time: there the calls stay on
the single thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import SyncToAsync
from channels.db import DatabaseSyncToAsync
from django.conf import settings
from django.db import DatabaseError, connection

# Connections the database threads leave in the process's pool for its other database work (pages,
# dashboards' reads, Channels' own thread), as each thread holds one between calls.
POOL_LEFT_FOR_THE_REST = 2
# How long a database thread keeps its connection before handing it back to the pool (which
# replaces connections past their lifetime and checks the one it hands out next).
HOLD_SECONDS = 300.0


def _database_threads() -> int:
    """Threads for database work on PostgreSQL, each holding one pooled connection (all but
    POOL_LEFT_FOR_THE_REST of them); 0 on SQLite."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        return 0
    pool = database.get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        return max(1, int(pool.get("max_size", 8)) - POOL_LEFT_FOR_THE_REST)
    return 6 if pool else 4  # psycopg's default pool (8), or no pool: a few connections of its own


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


def _keep_or_release() -> None:
    """After a call on a database thread: keep the thread's connection for its next call unless
    it is broken, was left outside autocommit or has been held HOLD_SECONDS. Channels' wrapper
    handed it back to the pool after every call and checked one out (with the pool's check, a
    round trip to PostgreSQL) before the next: about 7% of the coordinator's CPU at 1,000
    volunteers (py-spy, docs/coordinator-bench.md). Django's close_if_unusable_or_obsolete, with
    a hold time instead of CONN_MAX_AGE (0 under a pool, so that connect time is close_at)."""
    if connection.connection is None:
        return
    if connection.in_atomic_block or connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
        connection.close()
    elif connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()
    elif connection.close_at is not None and time.monotonic() >= connection.close_at + HOLD_SECONDS:
        connection.close()


class _HeldConnection(SyncToAsync):
    """SyncToAsync on a database thread whose connection stays with it (:func:`_keep_or_release`)."""

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            _keep_or_release()


def release_held_connections() -> None:
    """Hand every database thread's connection back to the pool (a test that is done with the
    threads; a process about to stop). One close runs on each thread: each call waits at a
    barrier until every thread holds one, so no thread takes two."""
    if _EXECUTOR is None:
        return
    barrier = threading.Barrier(_THREADS)

    def close() -> None:
        barrier.wait(timeout=30)
        with contextlib.suppress(DatabaseError):  # a connection PostgreSQL already ended
            connection.close()

    for future in [_EXECUTOR.submit(close) for _ in range(_THREADS)]:
        future.result()


def db(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` made awaitable: on the database threads where there are some (PostgreSQL),
    else as ``database_sync_to_async`` on Channels' one thread."""
    if _EXECUTOR is None:
        call = DatabaseSyncToAsync(function)
    else:
        call = _HeldConnection(function, thread_sensitive=False, executor=_EXECUTOR)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        _Load.in_flight += 1
        try:
            return await call(*args, **kwargs)
        finally:
            _Load.in_flight -= 1

    return counted
