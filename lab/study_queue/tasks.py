"""The Celery app of the ``study`` queue and the task that runs one study cell on a worker.

**Claims.** A task claims its cell before running it: ``SET <cell>:claim <worker> NX EX ttl``
on the broker's Redis, refreshed every ttl / 3 by a heartbeat thread while the cell runs. A task
that finds the cell's result already stored, or its claim held, does nothing: a message that
Redis redelivers (after its visibility timeout, while the cell still runs or after it finished)
or that the submitter sent twice never runs a cell a second time. A worker killed mid-cell stops
heartbeating, its claim expires, and the submitter (lab/study_queue/submit.py) sends the cell again
at once, without waiting for the broker's visibility timeout (1 h by default).

**Results.** A finished cell's record (:func:`swarm_lab.study_runner.run_cell`'s, JSON)
is stored once (``SET NX``) under ``<cell>:result`` with this machine's provenance (its commit,
diff hash, model hash, host and process, times and the attempt number); a failed one stores its error under
``<cell>:failed`` for the submitter, which alone decides to send it again.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import traceback
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery, Task

QUEUE = "study"
# The broker, in this order: celery's -b, SWARM_STUDY_BROKER, REDIS_URL (the coordinator's).
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
CLAIM_TTL = 60  # seconds a claim outlives its worker's last heartbeat
RESULT_TTL = 30 * 24 * 3600  # a result waits this long for its submitter (which may be restarted)
PREFIX = "swarm-study"

# Compare-and-set on the claim: only its holder refreshes or releases it.
_REFRESH = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"
)
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def broker_url(explicit: str | None = None) -> str:
    """The broker's URL: ``explicit``, else ``SWARM_STUDY_BROKER``, else ``REDIS_URL``, else the
    local Redis. Claims and results live in the same Redis, so it must be a ``redis://`` URL."""
    url = explicit or os.environ.get("SWARM_STUDY_BROKER") or os.environ.get("REDIS_URL") or DEFAULT_BROKER
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"the study queue needs a Redis broker (claims and results live there), got {url}")
    return url


app = Celery("study_queue", broker=broker_url())
app.conf.update(
    task_default_queue=QUEUE,
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,  # results go to <cell>:result, read by the submitter alone
    # Acknowledged when the cell ends, one message per worker at a time: a killed worker's
    # message is not lost (Redis redelivers it after the visibility timeout; the claim makes that
    # a no-op if the submitter already sent the cell again).
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)

_clients: dict[str, redis.Redis] = {}


def client_for(url: str) -> redis.Redis:
    """One Redis client per URL in this process."""
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, decode_responses=True)
    return _clients[url]


@dataclass(frozen=True)
class CellKeys:
    """The Redis keys of one cell of one study (``namespace``: the results file's)."""

    namespace: str
    cell: str

    def key(self, name: str) -> str:
        return f"{PREFIX}:{self.namespace}:{self.cell}:{name}"

    @property
    def claim(self) -> str:
        return self.key("claim")

    @property
    def result(self) -> str:
        return self.key("result")

    @property
    def failed(self) -> str:
        return self.key("failed")

    @property
    def attempts(self) -> str:
        return self.key("attempts")


class _Heartbeat(threading.Thread):
    """Refreshes ``claim`` (held as ``holder``) every ``ttl`` / 3 seconds until stopped."""

    def __init__(self, client: redis.Redis, claim: str, holder: str, ttl: int) -> None:
        super().__init__(name="study-claim-heartbeat", daemon=True)
        self.client, self.claim, self.holder, self.ttl = client, claim, holder, ttl
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.ttl / 3):
            try:
                self.client.eval(_REFRESH, 1, self.claim, self.holder, self.ttl)
            except redis.RedisError:  # a short outage: the next beat tries again within the ttl
                continue


@app.task(name="study.run_cell", bind=True)
def run_study_cell(
    self: Task,
    namespace: str,
    cell: str,
    settings: dict[str, Any],
    arm: str,
    seed: int,
    verbose: bool = False,
    claim_ttl: int = CLAIM_TTL,
) -> str:
    """Run one cell unless it is done or claimed; returns what it did (``ran``, ``done``,
    ``claimed``). Its record, with this machine's provenance, goes to ``<cell>:result``."""
    from swarm_lab.study_runner import run_cell, tree_state

    client = client_for(self.app.conf.broker_url)
    keys = CellKeys(namespace, cell)
    if client.exists(keys.result):
        return "done"
    holder = f"{socket.gethostname()}:{os.getpid()}:{self.request.id}"
    if not client.set(keys.claim, holder, nx=True, ex=claim_ttl):
        return "claimed"
    if client.exists(keys.result):  # finished between the two looks: its claim was released
        client.eval(_RELEASE, 1, keys.claim, holder)
        return "done"
    device = os.environ.get("SWARM_STUDY_DEVICE", "cpu")  # this worker's (docs/study-queue.md)
    attempt = client.incr(keys.attempts)
    client.expire(keys.attempts, RESULT_TTL)
    heartbeat = _Heartbeat(client, keys.claim, holder, claim_ttl)
    heartbeat.start()
    try:
        record = run_cell(settings, arm, seed, verbose, device)
        # This machine's code and model, not the submitter's (lab/swarm_lab/study_runner.py).
        record["provenance"] = {
            **tree_state(),
            "worker": f"{socket.gethostname()}:{os.getpid()}",
            "attempt": attempt,
            "device": device,
            **record["provenance"],
        }
        client.set(keys.result, json.dumps(record), nx=True, ex=RESULT_TTL)
    except Exception:
        client.set(keys.failed, f"{holder}: {traceback.format_exc(limit=8)}", ex=RESULT_TTL)
        raise
    finally:  # released after the result or the failure is stored: the submitter never sees neither
        heartbeat.stopped.set()
        heartbeat.join()
        client.eval(_RELEASE, 1, keys.claim, holder)
    return "ran"
