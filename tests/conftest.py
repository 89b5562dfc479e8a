from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.servers import asgi_server

# Tests run servers, Celery workers and worker processes beside this one on 2 cores; several
# processes with 2 torch threads each run up to 8x slower than with one (measured).
torch.set_num_threads(int(os.environ.get("SWARM_TEST_TORCH_THREADS", "1")))


@pytest.fixture(scope="session", autouse=True)
def quick_password_hashes() -> None:
    """Users made and passwords checked in this process hash with tests/hashers.py's cheap PBKDF2
    (the same format, which the servers' own hasher verifies), for the whole session."""
    from django.test import override_settings

    override_settings(PASSWORD_HASHERS=["tests.hashers.QuickPBKDF2PasswordHasher"]).enable()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker) -> Iterator[None]:
    """pytest-django's test database; before it is dropped, the connections that this process's
    other threads hold are closed: asgiref's thread that runs tests' ``sync_to_async`` calls, and
    the coordinator's database threads (swarm_app/coordinator/database.py). Left open, the drop
    failed ("is being accessed by other users") and the database stayed. Any other connection
    still open then is ended, with a warning that names its last statement (:func:`_end_leftovers`)."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    from swarm_app.coordinator.database import release_held_connections

    asyncio.run(sync_to_async(connections.close_all)())
    release_held_connections()
    with django_db_blocker.unblock():
        _end_leftovers()


def _end_leftovers() -> None:
    """PostgreSQL: end the sessions still connected to this process's test database once its own
    connections are closed (a thread that a test left running holds one: CI's PostgreSQL pass
    printed the drop's failure in 2 of 7 runs, without saying whose). The warning names each
    session's last statement, which points at the test; the database is then dropped."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    connection.close_pool()  # the idle connections of this process's pool: ours, not leftovers
    with connection._nodb_cursor() as cursor:
        cursor.execute(
            "SELECT left(query, 200), pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [connection.settings_dict["NAME"]],
        )
        left = [query for query, _ in cursor.fetchall()]
    if left:
        warnings.warn(
            f"{len(left)} session(s) were still connected to the test database at the end and were"
            f" ended; their last statements: {left}",
            pytest.PytestWarning,
            stacklevel=1,
        )


@pytest.fixture
def coordinator(transactional_db, tmp_path: Path) -> Iterator[str]:
    """A real ASGI coordinator on a loopback port, on the test database; yields its base URL."""
    with asgi_server(tmp_path / "daphne.log") as base:
        yield base


@pytest.fixture(scope="session")
def tiny_1m_dir() -> Path:
    """The built-in tiny-1m tier: the shipped build (worker/models/tiny-1m), else built once into
    the model cache and reused."""
    from worker.engine.tiny import ensure_tiny_model
    from worker.shared.tiers import model_cache_dir, tiny_model_ready

    cache = model_cache_dir()
    if tiny_model_ready("tiny-1m", cache):
        return ensure_tiny_model("tiny-1m", cache)
    # A first build runs while nothing else computes (servers of the test that asked are idle):
    # it may use every core, then the tests go back to one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        return ensure_tiny_model("tiny-1m", cache)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def tiny_policy(tiny_1m_dir):
    """A fresh (model, tokenizer) of tiny-1m, loaded with from_pretrained like any hub model."""
    from worker.engine.policy import load_policy
    from worker.shared.tiers import tier

    return load_policy(tier("tiny-1m"), tiny_1m_dir.parent)
