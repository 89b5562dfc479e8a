"""``swarm-worker study --executor celery`` on real Celery worker processes (issue #50 item 3):
two workers of the ``study`` queue with separate data directories on one Redis broker run a
small study; one is killed with SIGKILL in the middle of a cell, whose claim then expires and
the other worker finishes it. Every cell is finished exactly once, and the results file holds the
same numbers as a local run of the same cells.

Needs Redis (``REDIS_URL``: the PostgreSQL + Redis pass of .ci/run, each xdist worker on its own
database); the keys it leaves are its own study's and the ``study`` queue's, removed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarm_lab.study import StudyConfig
from swarm_lab.study_runner import run_study
from tests.servers import ROOT, stop

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL): the PostgreSQL + Redis pass"
    ),
]

ARMS = ["8/0", "4/4@B4"]
SEEDS = [0, 1]
CLAIM_TTL = 5  # seconds: how soon a killed worker's cell is sent again


def study_config() -> StudyConfig:
    """What ``swarm-worker study --quick --design v3 --arms 8/0,4/4@B4`` runs (4 cells)."""
    return StudyConfig(
        **{**StudyConfig.quick_config("v3").__dict__, "arms": list(ARMS), "seeds": list(SEEDS)}
    )


def worker_env(data_dir: Path, broker: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SWARM_DATA_DIR=str(data_dir), SWARM_STUDY_BROKER=broker, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"
    )
    return env


def start_worker(name: str, data_dir: Path, broker: str, log_path: Path) -> subprocess.Popen:
    """A ``study`` queue worker as docs/study-queue.md starts one, in its own session (so that
    SIGKILL of its group takes the whole worker)."""
    data_dir.mkdir(parents=True)
    command = [sys.executable, "-m", "celery", "-A", "study_queue", "worker", "-Q", "study", "--pool", "solo"]
    command += [
        "-n",
        f"{name}@%h",
        "-l",
        "info",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
    ]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=worker_env(data_dir, broker),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture
def broker() -> Iterator[str]:
    """The test's Redis; the study's keys and the ``study`` queue are removed afterwards (a
    killed worker's unacknowledged message too: Redis would redeliver it in an hour)."""
    import redis

    url = os.environ["REDIS_URL"]
    client = redis.Redis.from_url(url, decode_responses=True)

    def clean() -> None:
        for key in client.scan_iter("swarm-study:*"):
            client.delete(key)
        client.delete("study")
        for tag, payload in client.hgetall("unacked").items():
            if json.loads(payload)[-1] == "study":
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)

    clean()
    yield url
    clean()


def comparable(results: dict[str, Any]) -> dict[str, Any]:
    """What a run measured: curves, cumulative rewards, mechanism and each cell's numbers, without
    the clock (seconds, provenance) and the bookkeeping of runs."""
    cells = {
        key: {name: value for name, value in cell.items() if name not in ("seconds", "provenance")}
        for key, cell in results["config"]["cells"].items()
    }
    return {
        "arms": results["arms"],
        "curves": results["curves"],
        "mechanism": results["mechanism"],
        "cells": cells,
    }


@pytest.mark.timeout(400)
def test_a_study_on_two_celery_workers_survives_a_sigkill_and_equals_a_local_run(
    broker: str, tmp_path: Path
) -> None:
    import redis

    from study_queue.submit import CeleryExecutor

    client = redis.Redis.from_url(broker, decode_responses=True)
    out = tmp_path / "celery.json"
    namespace = CeleryExecutor(out, broker=broker).namespace
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [
        start_worker(name, tmp_path / name, broker, log)
        for name, log in zip(["worker-a", "worker-b"], logs, strict=True)
    ]
    study: subprocess.Popen | None = None
    try:
        command = [sys.executable, "-m", "worker.cli", "study", "--quick", "--design", "v3"]
        command += ["--arms", ",".join(ARMS), "--seeds", str(len(SEEDS)), "--out", str(out)]
        command += ["--executor", "celery", "--broker", broker]
        with open(tmp_path / "study.log", "ab") as log:
            study = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**worker_env(tmp_path / "submitter", broker), "SWARM_STUDY_CLAIM_TTL": str(CLAIM_TTL)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # the first claim, held for a second: its worker is in the middle of that cell (the first
        # cell of a worker loads torch and the model: several seconds); kill that whole worker
        deadline = time.monotonic() + 120
        claim, holder = None, None
        while holder is None:
            assert time.monotonic() < deadline, (tmp_path / "study.log").read_text()[-3000:]
            assert study.poll() is None, (tmp_path / "study.log").read_text()[-3000:]
            claim = next(client.scan_iter(f"swarm-study:{namespace}:*:claim"), None)
            if claim is not None:
                first = client.get(claim)
                time.sleep(1.0)
                holder = first if first is not None and client.get(claim) == first else None
            time.sleep(0.1)
        assert claim is not None and not client.exists(claim.replace(":claim", ":result"))
        victim_pid = int(holder.split(":")[1])
        victim = next(w for w in workers if w.pid == victim_pid)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        killed_cell = claim.split(":")[2]
        assert study.wait(timeout=240) == 0, (tmp_path / "study.log").read_text()[-3000:]
    finally:
        if study is not None and study.poll() is None:
            study.kill()
            study.wait()
        for worker in workers:
            stop(worker)
    survivor = next(w for w in workers if w.pid != victim_pid)
    # Redis still holds the killed worker's message, unacknowledged: it redelivers it only after its
    # visibility timeout (1 h). The cell was finished because the submitter sent it again.
    assert any(json.loads(payload)[-1] == "study" for payload in client.hvals("unacked"))
    celery = json.loads(out.read_text())
    assert celery["config"]["complete"] and celery["config"]["cells_done"] == len(ARMS) * len(SEEDS)
    # the killed cell was claimed twice (its attempts counter) and finished by the survivor
    assert int(client.get(f"swarm-study:{namespace}:{killed_cell}:attempts") or 0) == 2
    provenance = {key: cell["provenance"] for key, cell in celery["config"]["cells"].items()}
    attempts = sorted(p["attempt"] for p in provenance.values())
    assert attempts == [1] * (len(attempts) - 1) + [2], provenance
    retried = next(p for p in provenance.values() if p["attempt"] == 2)
    assert retried["worker"].endswith(f":{survivor.pid}")
    # every cell finished exactly once, over both workers' logs ('ran': the task ran the cell)
    finished = sum(log.read_text().count(": 'ran'") for log in logs)
    assert finished == len(ARMS) * len(SEEDS), [log.read_text()[-2000:] for log in logs]
    # each cell records the machine that ran it: its worker's commit, model and clock
    for record in provenance.values():
        assert {"commit", "diff_sha256", "model_sha256", "started", "ended", "worker"} <= set(record)
        assert record["device"] == "cpu"
    # the same cells run locally, in this process: the same numbers
    local = run_study(study_config(), tmp_path / "local.json", jobs=1, log=lambda _: None, allow_dirty=True)
    assert comparable(celery) == comparable(local)
    assert (
        celery["config"]["cells"]["8/0|0"]["provenance"]["model_sha256"]
        == (local["config"]["cells"]["8/0|0"]["provenance"]["model_sha256"])
    )


@pytest.mark.timeout(180)
def test_a_failing_cell_is_sent_again_then_reported(broker: str, tmp_path: Path) -> None:
    """A cell that raises on its worker (here: an arm this worker's code does not know, as an
    older checkout would not) stores its error; the submitter sends it again, and after its
    last attempt stops with the error instead of waiting for ever."""
    import redis

    from study_queue.submit import CeleryExecutor, cell_id
    from swarm_lab.study import StudyError

    worker = start_worker("worker-a", tmp_path / "worker-a", broker, tmp_path / "worker-a.log")
    try:
        executor = CeleryExecutor(tmp_path / "failing.json", broker=broker, log=lambda _: None, attempts=2)
        settings = study_config().settings()
        recorded: list[Any] = []
        with pytest.raises(StudyError, match=r"failed 2 times.*no-such-arm"):
            executor(
                [(("no-such-arm", 0), settings, "no-such-arm", 0)], 1, False, lambda *a: recorded.append(a)
            )
    finally:
        stop(worker)
    assert recorded == []
    client = redis.Redis.from_url(broker, decode_responses=True)
    cell = cell_id(("no-such-arm", 0), settings, "no-such-arm", 0)
    assert client.get(f"swarm-study:{executor.namespace}:{cell}:attempts") == "2"


def wait_ready(log_path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while b" ready." not in log_path.read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.timeout(240)
def test_a_cell_delivered_twice_runs_once(broker: str, tmp_path: Path) -> None:
    """The same cell's task on two idle workers at once (a message the submitter sent again, or
    that Redis redelivered): one claims and runs it, the other finds it claimed and does nothing."""
    import redis

    from study_queue.submit import CeleryExecutor, cell_id
    from study_queue.tasks import run_study_cell

    namespace = CeleryExecutor(tmp_path / "twice.json", broker=broker).namespace
    settings = study_config().settings()
    cell = cell_id(("8/0", 0), settings, "8/0", 0)
    client = redis.Redis.from_url(broker, decode_responses=True)
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [
        start_worker(name, tmp_path / name, broker, log)
        for name, log in zip(["worker-a", "worker-b"], logs, strict=True)
    ]
    try:
        for worker, log in zip(workers, logs, strict=True):
            wait_ready(log, worker)
        for _ in range(2):
            run_study_cell.apply_async((namespace, cell, settings, "8/0", 0, False, CLAIM_TTL), queue="study")
        deadline = time.monotonic() + 180
        outcomes: list[str] = []
        while len(outcomes) < 2:
            assert time.monotonic() < deadline, [log.read_text()[-2000:] for log in logs]
            outcomes = [
                o for log in logs for o in ("ran", "claimed", "done") if f": '{o}'" in log.read_text()
            ]
            time.sleep(0.2)
    finally:
        for worker in workers:
            stop(worker)
    assert sorted(outcomes) == ["claimed", "ran"]
    assert client.get(f"swarm-study:{namespace}:{cell}:attempts") == "1"
    assert (
        json.loads(client.get(f"swarm-study:{namespace}:{cell}:result") or "{}")["provenance"]["attempt"] == 1
    )
