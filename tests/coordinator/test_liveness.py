"""Liveness and load against a real coordinator: heartbeats answered without the database, the
hello timeout, ``busy`` instead of a growing queue, one lease per node and round after a crash,
a mass disconnect that leaves no node marked connected, and a Redis outage that the workers'
requests do not notice."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import websockets
from django.db import connection, transaction

from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
from swarm_app.coordinator.presence import FLUSH_SECONDS
from tests.coordinator.helpers import connected, expect_error, honest_rollouts, in_thread, run
from tests.servers import asgi_server, free_port, kill, redis_cli, start_redis
from tests.wsclient import RawSession

postgres_only = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL + Redis mode")


@postgres_only
def test_heartbeats_need_no_database(ready, campaign):
    """With the node table locked by another transaction, heartbeats are still answered at once
    (before, each one was an UPDATE of the node's row and waited for the lock); last_seen
    catches up within a flush once the lock is gone."""
    before = WorkerNode.objects.get(node_id="node-a").last_seen
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("LOCK TABLE coordinator_workernode IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(30)
        connection.close()

    async def session():
        s = await connected(ready, "node-a")
        holder = threading.Thread(target=hold_lock)
        holder.start()
        await asyncio.to_thread(locked.wait, 10)
        started = time.monotonic()
        replies = [await s.request("heartbeat") for _ in range(5)]
        seconds = time.monotonic() - started
        release.set()
        await asyncio.to_thread(holder.join)
        await asyncio.sleep(FLUSH_SECONDS + 1.5)
        await s.close()
        return replies, seconds

    replies, seconds = run(session())
    print(f"5 heartbeats with the node table locked: {seconds * 1000:.0f} ms")
    assert [r["type"] for r in replies] == ["heartbeat_ack"] * 5
    assert all(r["campaign_state"] == "running" for r in replies)
    assert seconds < 2.0
    assert WorkerNode.objects.get(node_id="node-a").last_seen > before


def test_a_socket_without_hello_is_closed_after_the_hello_timeout(transactional_db, tmp_path):
    with asgi_server(tmp_path / "daphne.log", WORKER_HELLO_SECONDS="1") as url:

        async def silent():
            s = await RawSession.open(url)
            started = time.monotonic()
            pushed = json.loads(await asyncio.wait_for(s.ws.recv(), timeout=10))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(s.ws.recv(), timeout=10)
            return pushed, closed.value.rcvd.code, time.monotonic() - started

        pushed, code, seconds = run(silent())
    expect_error(pushed, "not_authenticated", "no hello within 1 s")
    assert code == 4000
    assert seconds < 5


def test_a_full_database_queue_answers_busy_and_keeps_the_connection(campaign, token, tmp_path):
    """A queue limit of 0 makes every database request 'behind': lease, submit, sample and
    metrics get ``busy`` with a retry_after; heartbeats are answered; the socket stays open."""
    with asgi_server(tmp_path / "daphne.log", WORKER_BUSY_QUEUE_PER_THREAD="0") as url:

        async def session():
            s = await RawSession.open(url)
            assert (await s.hello(token, "node-busy"))["type"] == "welcome"
            busy = [
                await s.request("lease_request", round=0),
                await s.request("sample_request", round=0, count=2),
            ]
            beat = await s.request("heartbeat")
            await s.close()
            return busy, beat

        busy, beat = run(session())
    for reply in busy:
        expect_error(reply, "busy", "busy")
        assert 1.0 <= reply["data"]["retry_after"] <= 30.0
    assert beat["type"] == "heartbeat_ack"
    assert not Lease.objects.filter(campaign=campaign).exists()


def test_a_node_that_crashed_after_its_submit_ack_gets_no_second_lease(ready, campaign):
    """The worker died after submit_ack and before its metrics: on resume it asks for the same
    round again and is told ``round_submitted`` with the stored ack; its metrics then move it on."""
    mix = ready["mix"]
    lease = ready["leases"]["node-a"]

    async def crash_and_resume():
        s = await connected(ready, "node-a")
        ack = await s.request(
            "submit",
            submission_id="before-crash",
            lease_id=lease["lease_id"],
            rollouts=honest_rollouts(lease, "node-a", "tiny-1m", mix),
        )
        await s.ws.close()  # the process dies here
        again = await connected(ready, "node-a")
        welcome_round = await in_thread(lambda: WorkerNode.objects.get(node_id="node-a").round)
        replay = await again.request("lease_request", round=welcome_round)
        metrics = await again.request("metrics", round=welcome_round, metrics={"resumed_submitted": 1.0})
        following = await again.request("lease_request", round=welcome_round + 1)
        await again.close()
        return ack, welcome_round, replay, metrics, following

    ack, welcome_round, replay, metrics, following = run(crash_and_resume())
    assert welcome_round == 0
    expect_error(replay, "round_submitted", "already submitted")
    assert replay["data"]["submission_id"] == "before-crash"
    assert replay["data"]["verified_rewards"] == ack["verified_rewards"]
    assert metrics["type"] == "metrics_ack"
    assert following["type"] == "lease" and following["round"] == 1
    node = WorkerNode.objects.get(node_id="node-a")
    assert list(Lease.objects.filter(node=node, round=0).values_list("state", flat=True)) == ["submitted"]
    assert PoolRollout.objects.filter(node=node, round=0).count() == len(lease["questions"])


def test_three_hundred_workers_closed_at_once_leave_no_node_connected(campaign, token, coordinator):
    count = 300

    async def storm():
        sessions = []
        for start in range(0, count, 50):  # hellos in waves, so the test measures the close, not the open
            batch = await asyncio.gather(*(RawSession.open(coordinator) for _ in range(50)))
            replies = await asyncio.gather(
                *(s.hello(token, f"mass-{start + i}") for i, s in enumerate(batch))
            )
            assert all(r["type"] == "welcome" for r in replies), replies
            sessions += batch
        connected_before = await in_thread(WorkerNode.objects.filter(connected=True).count)
        await asyncio.gather(*(s.ws.close() for s in sessions))
        deadline = time.monotonic() + 30
        while (left := await in_thread(WorkerNode.objects.filter(connected=True).count)) > 0:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        return connected_before, left

    connected_before, left = run(storm())
    assert connected_before == count
    assert left == 0, f"{left} of {count} nodes still marked connected 30 s after closing"


@postgres_only
def test_a_redis_outage_does_not_reach_the_workers(campaign, token, tmp_path):
    """Redis killed with workers connected: sockets stay open, every request (a new hello too)
    is answered as usual, none with internal_error; when Redis is back, the server's group
    memberships are restored (a restarted Redis has none) and pushes reach the workers again."""
    mix = campaign.settings.mix
    port = free_port()
    redis = start_redis(port, tmp_path / "redis.log")
    groups = ["--scan", "--pattern", "asgi:group:worker-node-*"]
    try:
        with asgi_server(tmp_path / "daphne.log", REDIS_URL=f"redis://127.0.0.1:{port}/0") as url:
            shared = {"url": url, "token": token}

            async def outage():
                nonlocal redis
                s = await connected(shared, "node-r")
                lease = await s.request("lease_request", round=0)
                assert len(await asyncio.to_thread(redis_cli, port, *groups)) == 1
                await asyncio.to_thread(kill, redis)
                replies = [
                    await s.request(
                        "submit",
                        submission_id="during-outage",
                        lease_id=lease["lease_id"],
                        rollouts=honest_rollouts(lease, "node-r", "tiny-1m", mix),
                    ),
                    await s.request("sample_request", round=0, count=2),
                    await s.request("metrics", round=0, metrics={"loss": 0.1}),
                    await s.request("heartbeat"),
                ]
                other = await RawSession.open(url)
                replies.append(await other.hello(token, "node-r2"))
                replies.append(await other.request("lease_request", round=0))
                await asyncio.sleep(3)  # consumers' reads of their channels fail meanwhile
                replies.append(await s.request("heartbeat"))
                redis = await asyncio.to_thread(start_redis, port, tmp_path / "redis.log")
                deadline = time.monotonic() + 20
                while len(await asyncio.to_thread(redis_cli, port, *groups)) < 2:
                    assert time.monotonic() < deadline, "group memberships were not restored"
                    await asyncio.sleep(0.3)
                replies.append(await s.request("lease_request", round=1))
                await s.close()
                await other.close()
                return replies

            replies = run(outage())
    finally:
        kill(redis)
    types = [r["type"] for r in replies]
    assert types == [
        "submit_ack",
        "samples",
        "metrics_ack",
        "heartbeat_ack",
        "welcome",
        "lease",
        "heartbeat_ack",
        "lease",
    ], replies
    log = (tmp_path / "daphne.log").read_text()
    assert "Traceback" not in log, log[-3000:]
