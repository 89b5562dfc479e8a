"""The coordinator's database threads (swarm_app/coordinator/database.py) on PostgreSQL: each keeps
its pooled connection from one call to the next, and gives up one that broke."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import DatabaseError, connection

from swarm_app.coordinator import database
from swarm_app.coordinator.database import db

pytestmark = pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="database threads hold pooled PostgreSQL connections"
)


@pytest.fixture
def threads(transactional_db):
    """The test's database threads; afterwards their connections go back to the pool (each
    thread holds one: left held, they would leave later tests in this process 2 of 8)."""
    yield
    database.release_held_connections()
    assert connection.pool is None or connection.pool.get_stats().get("requests_waiting", 0) == 0


def backend() -> tuple[int, int]:
    """This database thread's id and its connection's PostgreSQL backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return threading.get_ident(), cursor.fetchone()[0]


async def calls(n: int) -> list[tuple[int, int] | Exception]:
    """``n`` calls of :func:`backend`, a few at a time, each an answer or the error it raised."""
    out: list[tuple[int, int] | Exception] = []
    for _ in range(n // 4):
        out += await asyncio.gather(*(db(backend)() for _ in range(4)), return_exceptions=True)
    return out


def test_a_database_thread_keeps_its_connection_between_calls(threads):
    """40 calls check connections out of the pool at most once per thread (none, here: the
    threads hold theirs from the calls before); handing each back
    after every call (Channels' database_sync_to_async) took 40 checkouts, each with the pool's
    check, a round trip to PostgreSQL."""
    asyncio.run(calls(40))  # a thread whose connection an earlier test ended reconnects here
    pool = connection.pool
    before = pool.get_stats()["requests_num"] if pool is not None else 0
    answers = asyncio.run(calls(40))
    assert all(isinstance(a, tuple) for a in answers), answers
    backends: dict[int, set[int]] = {}
    for thread, pid in answers:
        backends.setdefault(thread, set()).add(pid)
    assert all(len(pids) == 1 for pids in backends.values()), backends  # one connection per thread
    assert len(backends) <= database.database_threads()
    if pool is not None:
        assert pool.get_stats()["requests_num"] - before <= database.database_threads()


def test_a_connection_that_broke_is_given_up_after_one_failed_call(threads):
    """PostgreSQL ends the threads' backends (a restart, an operator's pg_terminate_backend):
    each thread fails at most one call, then reconnects; nothing fails after that."""
    asyncio.run(calls(40))  # a thread whose connection an earlier test ended reconnects here
    held = {a[1] for a in asyncio.run(calls(40)) if isinstance(a, tuple)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [sorted(held)])
    after = asyncio.run(calls(80))
    failed = [a for a in after if isinstance(a, Exception)]
    assert all(isinstance(e, DatabaseError) for e in failed), failed
    assert len(failed) <= database.database_threads()
    assert all(isinstance(a, tuple) and a[1] not in held for a in after[-20:]), after[-20:]
