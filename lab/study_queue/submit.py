"""The submitting side of the study queue: :class:`CeleryExecutor` runs a study's cells as
tasks on the ``study`` queue (``swarm-worker study --executor celery``) and hands each finished
cell to the study's ``record`` in this process, which alone writes the results file.

It watches each cell's keys (lab/study_queue/tasks.py) every ``poll`` seconds:

* a stored result: recorded (once; the study's resume then skips the cell for good);
* a failure stored by its worker, or a claim gone with neither a result nor a failure (its worker
  died: SIGKILL, power, a lost machine): the cell is sent again, at most ``attempts`` times in all;
* otherwise it waits: the cell is queued, or running under a live claim.

A restarted study finds the results its workers stored while it was away (kept 30 days) and
records them without running those cells again; cells still claimed are watched, not resent.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu.utils.url import maybe_sanitize_url

from study_queue.tasks import CLAIM_TTL, QUEUE, CellKeys, app, broker_url, client_for, run_study_cell
from swarm_lab.study import StudyError
from swarm_lab.study_runner import Cell

ATTEMPTS = 3  # a cell that fails or loses its worker this many times stops the study


def cell_id(key: Any, settings: dict[str, Any], arm: str, seed: int) -> str:
    """A cell's name in Redis: a hash of what it runs (its key, settings, arm and seed)."""
    text = json.dumps([key, settings, arm, seed], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class CeleryExecutor:
    """A :data:`swarm_lab.study_runner.CellExecutor` that runs cells on Celery workers.

    ``namespace`` names the study in Redis (the results file, with this host's name);
    ``claim_ttl`` (default ``SWARM_STUDY_CLAIM_TTL`` or 60 s) is how long a dead worker's claim
    outlives it, so how soon its cell is sent again.
    """

    def __init__(
        self,
        out: Path,
        broker: str | None = None,
        log: Callable[[str], None] = print,
        claim_ttl: int | None = None,
        poll: float = 0.5,
        attempts: int = ATTEMPTS,
    ) -> None:
        self.broker = broker_url(broker)
        self.shown = maybe_sanitize_url(self.broker)  # its password masked, for the log
        app.conf.broker_url = self.broker
        self.namespace = hashlib.sha256(f"{socket.gethostname()}:{out.resolve()}".encode()).hexdigest()[:16]
        self.log = log
        self.claim_ttl = claim_ttl or int(os.environ.get("SWARM_STUDY_CLAIM_TTL", CLAIM_TTL))
        self.poll = poll
        self.attempts = attempts

    def __call__(
        self,
        cells: list[Cell],
        jobs: int,
        verbose: bool,
        record: Callable[[Any, dict[str, Any]], None],
    ) -> None:
        """Send every cell, record each as its result arrives; raises :class:`StudyError` once
        nothing is left to wait for if a cell failed ``attempts`` times (``jobs`` is the workers'
        business here: each runs one cell at a time)."""
        client = client_for(self.broker)
        try:
            client.ping()
        except Exception as error:
            raise StudyError(f"the study queue's broker {self.shown} does not answer: {error}") from None
        waiting: dict[str, tuple[Any, dict[str, Any], str, int]] = {}
        sent_at_attempt: dict[str, int] = {}  # the attempts counter when the cell was last sent
        tries: dict[str, int] = {}
        failures: dict[Any, str] = {}

        def send(cell: str) -> None:
            _key, settings, arm, seed = waiting[cell]
            keys = CellKeys(self.namespace, cell)
            client.delete(keys.failed)
            sent_at_attempt[cell] = int(client.get(keys.attempts) or 0)
            tries[cell] = tries.get(cell, 0) + 1
            run_study_cell.apply_async(
                (self.namespace, cell, settings, arm, seed, verbose, self.claim_ttl), queue=QUEUE
            )

        for key, settings, arm, seed in cells:
            cell = cell_id(key, settings, arm, seed)
            waiting[cell] = (key, settings, arm, seed)
            keys = CellKeys(self.namespace, cell)
            claim, result, attempts = client.mget(keys.claim, keys.result, keys.attempts)
            if result is None and claim is None:
                send(cell)
            else:  # stored while no submitter watched, or still running: never sent twice
                sent_at_attempt[cell], tries[cell] = int(attempts or 0), 1
        self.log(f"{len(waiting)} cells on the study queue ({self.shown}, namespace {self.namespace})")
        while waiting:
            for cell in list(waiting):
                keys = CellKeys(self.namespace, cell)
                claim, result, failed, attempts = client.mget(
                    keys.claim, keys.result, keys.failed, keys.attempts
                )
                key = waiting[cell][0]
                if result is not None:
                    del waiting[cell]
                    record(key, json.loads(result))
                elif claim is not None:
                    continue
                elif failed is not None or int(attempts or 0) > sent_at_attempt[cell]:
                    why = (
                        f"failed on {failed.split(': ', 1)[0]}: {failed.strip().splitlines()[-1]}"
                        if failed
                        else "lost its worker (its claim expired)"
                    )
                    if tries[cell] >= self.attempts:
                        self.log(f"cell {key} {why}; given up after {tries[cell]} attempts")
                        failures[key] = why
                        del waiting[cell]
                    else:
                        self.log(f"cell {key} {why}; sent again")
                        send(cell)
            if waiting:
                time.sleep(self.poll)
        if failures:
            raise StudyError(
                f"{len(failures)} cell(s) failed {self.attempts} times: "
                + "; ".join(f"{key}: {why}" for key, why in failures.items())
                + " (finished cells are recorded; rerun to try the failed ones again)"
            )
