"""The coordinator's Prometheus instruments (prometheus_client), counted where things happen.

Every daphne server and Celery process keeps its own counts. With ``PROMETHEUS_MULTIPROC_DIR``
set in the environment *before the process starts* (prometheus_client picks its value class
when it is imported), each process writes them to memory-mapped files in that directory, and
the process that answers a scrape adds up the files of every process of the host
(prometheus_client's multiprocess mode): one scrape of any of a host's daphne servers reports
the whole host. Without it, each process reports its own counts (one daphne server).

Gauges of processes are ``livesum``: summed over the processes alive now. A process that exits
cleanly removes its live files (``mark_process_dead`` at exit); one that was killed leaves them,
so the scrape removes those of processes that no longer exist (:func:`sweep_dead`). That needs
the processes that share the directory to share one PID namespace (one host, or one container):
give each host or container a directory of its own (docs/deploy.md, "Metrics").

Labels: ``campaign`` (its id) and ``tier`` as the node's; requests refused before a hello have
neither (empty strings). The figures the database knows (pool window, rollouts shared, archived)
are read at scrape time (swarm_app/coordinator/scrape.py).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import os
import re
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client import multiprocess as _multiprocess

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

LABELS = ("campaign", "tier")

CONNECTED = Gauge(
    "swarm_connected_nodes",
    "Worker sockets past hello, open now, by the campaign and tier of their node",
    LABELS,
    multiprocess_mode="livesum",
)
ROUNDS_ACKED = Counter(
    "swarm_rounds_acked",
    "Submissions acknowledged (submit_ack): one per round a node completed",
    LABELS,
)
# A reply's time in the server, from the request frame's arrival to the reply's send: the
# database queue, the work and the event loop's delay. Buckets from 1 ms to 10 s (the capacity
# benchmark's p99 ack was 36 ms at 1,000 volunteers; above 250 ms is trouble).
ACK_SECONDS = Histogram(
    "swarm_ack_seconds",
    "Seconds from a worker request's arrival to its reply, by request type",
    (*LABELS, "request"),
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
BUSY = Counter(
    "swarm_busy_replies",
    "Requests answered `busy` (the database queue was full; the worker resends after retry_after)",
    LABELS,
)
ERRORS = Counter(
    "swarm_errors",
    "Error replies to workers, by protocol error code (busy included)",
    (*LABELS, "code"),
)
DB_IN_FLIGHT = Gauge(
    "swarm_db_queue_depth",
    "Worker requests waiting for or running on the database threads now",
    LABELS,
    multiprocess_mode="livesum",
)
DB_THREADS = Gauge(
    "swarm_db_threads",
    "Database threads (one per pooled PostgreSQL connection; 0: SQLite's single thread) of the "
    "processes serving workers",
    multiprocess_mode="livesum",
)
DB_QUEUE_LIMIT = Gauge(
    "swarm_db_queue_limit",
    "Database calls in flight past which worker requests are answered busy, summed over processes",
    multiprocess_mode="livesum",
)

ARCHIVED = Counter(
    "swarm_pool_archived_rollouts",
    "Rollouts moved out of the hot pool table (archive.py), by the campaign's pool_retention "
    "(archive or delete); counted in the Celery worker that ran the task",
    ("campaign", "retention"),
)

_LIVE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_dead() -> list[int]:
    """Remove the live-gauge files of processes that no longer exist (killed, so their exit
    handler never ran); returns their PIDs. Multiprocess mode only."""
    if not MULTIPROC_DIR:
        return []
    dead = set()
    for path in glob.glob(os.path.join(MULTIPROC_DIR, "gauge_live*.db")):
        match = _LIVE_FILE.search(os.path.basename(path))
        if match and not _alive(int(match.group(1))):
            dead.add(int(match.group(1)))
    for pid in dead:
        with contextlib.suppress(FileNotFoundError):  # another scrape got there first
            _multiprocess.mark_process_dead(pid, MULTIPROC_DIR)
    return sorted(dead)


def _mark_dead_at_exit() -> None:
    _multiprocess.mark_process_dead(os.getpid(), MULTIPROC_DIR)


if MULTIPROC_DIR:
    atexit.register(_mark_dead_at_exit)


@functools.cache
def child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once per process. ``labels`` checks its arguments
    and takes the metric's lock on every call: 4.5% of the coordinator's CPU at 1,000 volunteers
    (py-spy, docs/coordinator-bench.md). The children are the metric's own, kept as long as it
    is; the label values are the campaigns, tiers, request types and error codes seen."""
    return metric.labels(*values)


def labels(campaign_id: int | None, tier: str | None) -> tuple[str, str]:
    return (str(campaign_id) if campaign_id is not None else "", tier or "")
