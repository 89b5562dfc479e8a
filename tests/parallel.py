"""Tests in parallel (pytest-xdist, ``-n N``): each worker process gets a data directory and a
Redis database of its own, before Django reads its settings.

The workers share one PostgreSQL server (pytest-django gives each its own test database,
``test_<name>_gw0`` ...) and one Redis server. A Redis database shared by two workers would mix
their channel groups (both databases have a campaign 1, so both have ``campaign-1-workers``)
and their Celery queues (a Celery worker of one would run the other's tasks on the wrong
database); a shared data directory would mix the embedded mode's SQLite files, broker folders
and channel layer. So worker ``gwI`` uses database ``D - I`` of the given ``REDIS_URL``
(``D + I`` where that would be negative) and ``<SWARM_DATA_DIR>/gwI``. The servers, Celery
workers and volunteers a test starts inherit the same environment (tests/servers.py).

Loaded with ``-p tests.parallel`` (pyproject's addopts); without xdist it changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REDIS_DATABASES = 16  # Redis's default number of databases (0..15)


def worker_redis_url(url: str, index: int) -> str:
    """``url`` with its database number moved by ``index`` (down, or up from a low number)."""
    base, _, number = url.rstrip("/").rpartition("/")
    if not base.startswith(("redis://", "rediss://")) or not number.isdigit():
        base, number = url.rstrip("/"), "0"
    database = int(number) - index if int(number) - index >= 0 else int(number) + index
    if database >= REDIS_DATABASES:
        raise pytest.UsageError(f"xdist worker {index} needs Redis database {database}: run fewer workers")
    return f"{base}/{database}"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    index = int(worker.removeprefix("gw"))
    if os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], index)
    data_dir = Path(os.environ.get("SWARM_DATA_DIR") or Path(__file__).resolve().parent.parent / "data")
    os.environ["SWARM_DATA_DIR"] = str(data_dir / worker)
