"""Psyche-style fault tests: real `swarm-worker join` processes (tiny-1m) against a real
coordinator, with the fault placed by what the worker was just told (tests/faults.py), not by a
sleep: cut off mid-lease and back after the lease expired; the coordinator restarted mid-round;
killed right after its submit_ack; the campaign paused and resumed mid-round; Redis restarted
mid-campaign. Each checks that every acked submission is stored exactly once, that every round
of every node was submitted once and reported, and that the worker went on at the right round."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.db import connection  # noqa: F401 (read by the skipif condition below)

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.runs import lifecycle
from tests.factories import tiny_campaign_config
from tests.faults import FaultProxy
from tests.servers import asgi_server, free_port, kill, redis_cli, start_redis, stop, worker_process

pytestmark = pytest.mark.slow

WORKER_TIMEOUT = 420  # seconds; 2 cores shared by 3-4 processes
QUESTIONS = 4  # tiny_campaign_config's questions per round


def make_campaign(rounds: int, **overrides) -> tuple[Campaign, str]:
    config = tiny_campaign_config(rounds, max_new_tokens=12, **overrides)
    campaign = Campaign.objects.create(name="faults", state=Campaign.State.RUNNING, config=config.to_json())
    return campaign, create_token(campaign, "faults")[1]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def wait_for(condition, what: str, logs: list[Path], timeout: float = WORKER_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(log.read_text()[-2000:] for log in logs if log.exists())
            pytest.fail(f"timed out waiting for {what}:\n{tails}")
        time.sleep(0.1)


def finish(proc, log: Path) -> str:
    try:
        proc.wait(timeout=WORKER_TIMEOUT)
    except Exception:
        stop(proc)
        pytest.fail(f"worker did not finish in time:\n{log.read_text()[-4000:]}")
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert "internal_error" not in text, text[-4000:]
    return text


def assert_each_round_stored_once(campaign: Campaign, rounds: int) -> None:
    """Every node submitted each round exactly once and reported it; what each ack acknowledged
    is exactly what the pool holds for its lease; no question is in the pool twice."""
    for node in WorkerNode.objects.filter(campaign=campaign):
        submitted = sorted(Lease.objects.filter(node=node, state="submitted").values_list("round", flat=True))
        assert submitted == list(range(rounds)), (node.node_id, submitted)
        reported = sorted(RoundMetrics.objects.filter(node=node).values_list("round", flat=True))
        assert reported == list(range(rounds)), (node.node_id, reported)
        assert node.round == rounds, (node.node_id, node.round)
    for lease in Lease.objects.filter(campaign=campaign, state="submitted"):
        stored = sorted(PoolRollout.objects.filter(lease=lease).values_list("rollout_id", flat=True))
        assert stored == sorted(lease.ack["rollout_ids"]) and len(stored) == QUESTIONS, lease
    refs = list(
        PoolRollout.objects.filter(campaign=campaign).values_list("task", "question_seed", "question_index")
    )
    assert len(refs) == len(set(refs)), "a question was stored twice"


def test_worker_cut_off_mid_lease_rejoins_after_the_lease_expired(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=3, lease_seconds=5)
    log = tmp_path / "worker.log"
    with asgi_server(tmp_path / "daphne.log") as url, FaultProxy(port_of(url)) as proxy:
        cut = proxy.arm("lease", "cut", seconds=7)  # past the lease's 5 s
        worker = worker_process(proxy.url, token, tmp_path / "w", log)
        wait_for(cut.fired.is_set, "the first lease", [log])
        first = Lease.objects.filter(campaign=campaign).order_by("pk").first()
        text = finish(worker, log)
    first.refresh_from_db()
    assert first.round == 0 and first.state in (Lease.State.EXPIRED, Lease.State.REISSUED), first.state
    # its submission after the reconnect was refused (lease_expired), and the round redone
    assert "expired at" in text and "generating the round again with a new lease" in text
    assert proxy.connections >= 2
    assert_each_round_stored_once(campaign, rounds=3)


def test_coordinator_restarted_mid_round_and_the_round_completed(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=3)
    port = free_port()
    log = tmp_path / "worker.log"
    with FaultProxy(port) as proxy:
        freeze = proxy.arm("lease", "freeze")  # the worker holds its lease and cannot submit yet
        with asgi_server(tmp_path / "daphne-1.log", port=port):
            worker = worker_process(proxy.url, token, tmp_path / "w", log)
            wait_for(freeze.fired.is_set, "the first lease", [log])
        # the coordinator is down; the worker's lease is in the database, not in the server
        with asgi_server(tmp_path / "daphne-2.log", port=port):
            proxy.thaw()
            finish(worker, log)
    first = Lease.objects.filter(campaign=campaign).order_by("pk").first()
    assert (first.round, first.state) == (0, Lease.State.SUBMITTED)  # the round completed
    assert Lease.objects.filter(campaign=campaign).count() == 3  # no lease given up, none reissued
    assert_each_round_stored_once(campaign, rounds=3)


def test_worker_killed_after_its_submit_ack_resumes_without_a_second_lease(
    tiny_1m_dir, transactional_db, tmp_path
):
    campaign, token = make_campaign(rounds=3)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with asgi_server(tmp_path / "daphne.log") as url, FaultProxy(port_of(url)) as proxy:
        victim: list = []
        proxy.arm("submit_ack", "drop", action=lambda: os.killpg(victim[0].pid, signal.SIGKILL))
        victim.append(worker_process(proxy.url, token, tmp_path / "w", logs[0]))
        victim[0].wait(timeout=WORKER_TIMEOUT)
        assert victim[0].returncode == -signal.SIGKILL
        stored = Lease.objects.get(campaign=campaign, state="submitted")
        assert stored.round == 0 and not RoundMetrics.objects.filter(campaign=campaign).exists()
        # the same data directory: the same node, resumed at round 0, which it already submitted
        text = finish(worker_process(proxy.url, token, tmp_path / "w", logs[1]), logs[1])
    assert "already submitted" in text
    assert WorkerNode.objects.filter(campaign=campaign).count() == 1
    assert Lease.objects.filter(campaign=campaign, round=0).count() == 1  # no second lease for it
    report = RoundMetrics.objects.get(campaign=campaign, round=0)
    assert report.metrics.get("resumed_submitted") == 1.0
    assert report.reward is not None  # the coordinator's verified reward of the stored round
    assert_each_round_stored_once(campaign, rounds=3)


def test_campaign_paused_and_resumed_mid_round(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=3)
    log = tmp_path / "worker.log"
    with asgi_server(tmp_path / "daphne.log") as url, FaultProxy(port_of(url)) as proxy:
        freeze = proxy.arm("lease", "freeze")
        worker = worker_process(proxy.url, token, tmp_path / "w", log)
        wait_for(freeze.fired.is_set, "the first lease", [log])
        lifecycle.pause(Campaign.objects.get(pk=campaign.pk))
        paused_at = time.time()
        proxy.thaw()
        # the round in flight completes (its submission and report are accepted while paused)...
        wait_for(lambda: RoundMetrics.objects.filter(campaign=campaign, round=0).exists(), "round 0", [log])
        time.sleep(4)
        # ...and no new lease is issued until the campaign runs again
        assert list(Lease.objects.filter(campaign=campaign).values_list("round", flat=True)) == [0]
        assert worker.poll() is None, log.read_text()[-3000:]
        lifecycle.resume(Campaign.objects.get(pk=campaign.pk))
        resumed_at = time.time()
        finish(worker, log)
    issued = [lease.issued_at.timestamp() for lease in Lease.objects.filter(campaign=campaign, round__gt=0)]
    assert issued and all(at >= resumed_at - 0.5 for at in issued), (paused_at, resumed_at, issued)
    assert_each_round_stored_once(campaign, rounds=3)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL + Redis mode")
def test_redis_restarted_mid_campaign_with_workers_connected(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=6)
    port = free_port()
    redis = start_redis(port, tmp_path / "redis.log")
    logs = [tmp_path / f"w{i}.log" for i in range(2)]
    try:
        with asgi_server(tmp_path / "daphne.log", REDIS_URL=f"redis://127.0.0.1:{port}/0") as url:
            workers = [
                worker_process(
                    url, token, tmp_path / f"w{i}", logs[i], REDIS_URL=f"redis://127.0.0.1:{port}/0"
                )
                for i in range(2)
            ]
            reports = RoundMetrics.objects.filter(campaign=campaign)
            wait_for(lambda: reports.count() >= 2, "the first reports", logs)
            kill(redis)
            during = reports.count()
            wait_for(lambda: reports.count() >= during + 2, "rounds while Redis is down", logs, timeout=120)
            redis = start_redis(port, tmp_path / "redis.log")
            for proc, log in zip(workers, logs, strict=True):
                finish(proc, log)
            # all left again (the server sees each close a moment after the worker exits)
            groups = lambda: redis_cli(port, "--scan", "--pattern", "asgi:group:*")  # noqa: E731
            wait_for(lambda: not groups(), "every group membership to be discarded", logs, timeout=10)
    finally:
        kill(redis)
    assert "Traceback" not in (tmp_path / "daphne.log").read_text()
    assert_each_round_stored_once(campaign, rounds=6)
