"""Two coordinator servers on one PostgreSQL and Redis, as docs/deploy.md scales out (issue #31
item 3): protocol-level volunteers spread over both, two of them moved to the other server in
the middle of a lease the way a phone or laptop changes network (the new connection says hello
before the old one is noticed closed), one cut off for good mid-lease, a token revoked and the
campaign paused and resumed with sessions on both servers, and a dashboard on each server. Checked
from the database: every acked round stored once, no question stored twice, the lost lease
reissued exactly once, every moved node marked connected while it talks on its new server, and
no node left marked connected once every volunteer has gone."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import websockets
from django import db
from django.db import connection  # noqa: F401 (read by the skipif condition below)

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.presence import FLUSH_SECONDS
from swarm_app.coordinator.tokens import create_token, revoke
from swarm_app.runs import lifecycle
from tests.coordinator.helpers import G, honest_rollouts
from tests.servers import asgi_server
from tests.wsclient import RawSession
from worker.shared.campaign import CampaignConfig, ControlsConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL + Redis mode: two servers"),
]

LEASE_SECONDS = 8.0  # the lost lease must expire within the test; honest rounds take well under it


def dashboard_url(base: str, campaign_id: int) -> str:
    return base.replace("http", "ws", 1) + f"/ws/campaigns/{campaign_id}/"


async def next_frame(ws, kind: str, seconds: float = 30.0, where=lambda frame: True) -> dict:
    """The next frame of type ``kind`` (that ``where`` accepts), skipping others."""
    async with asyncio.timeout(seconds):
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == kind and where(frame):
                return frame


async def play_round(s: RawSession, node_id: str, round: int, mix, leases: dict) -> None:
    """Lease, submit honest rollouts and report metrics for ``round``; the lease is noted."""
    lease = leases.get((node_id, round)) or await s.request("lease_request", round=round)
    assert lease["type"] == "lease", lease
    leases[(node_id, round)] = lease
    ack = await s.request(
        "submit",
        submission_id=f"{node_id}-{round}",
        lease_id=lease["lease_id"],
        rollouts=honest_rollouts(lease, node_id, "tiny-1m", mix),
    )
    assert ack["type"] == "submit_ack", ack
    reported = await s.request("metrics", round=round, metrics={"loss": 0.5, "reward": 0.5})
    assert reported["type"] == "metrics_ack", reported


async def in_thread(action, *args) -> None:
    """``action(*args)`` in a thread of its own: announcements go through async_to_sync, which
    refuses the scenario's loop thread; the thread's database connection is closed after."""

    def call() -> None:
        try:
            action(*args)
        finally:
            db.connection.close()

    await asyncio.to_thread(call)


def node(node_id: str) -> WorkerNode:
    return WorkerNode.objects.get(node_id=node_id)


def test_two_servers_share_one_campaign_without_losing_or_doubling_anything(
    transactional_db, tmp_path: Path, monkeypatch
):
    # The scenario's ORM calls are short, sequential checks between socket steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    config = CampaignConfig(
        group_size=G,
        questions_per_round=2,
        num_local=2,
        num_external=2,
        rounds=4,
        lease_seconds=LEASE_SECONDS,
        controls=ControlsConfig(isolated=False, filtered=False),
    ).validate()
    campaign = Campaign.objects.create(
        name="two servers", state=Campaign.State.RUNNING, public=True, config=config.to_json()
    )
    mix = config.mix
    keep = create_token(campaign, "stays")[1]
    leaving = create_token(campaign, "revoked mid-campaign")[1]
    with (
        asgi_server(tmp_path / "daphne-a.log") as server_a,
        asgi_server(tmp_path / "daphne-b.log") as server_b,
    ):

        async def scenario() -> dict:
            home = {
                "a0": server_a,
                "a1": server_a,
                "a2": server_a,
                "b0": server_b,
                "b1": server_b,
                "b2": server_b,
            }
            other = {server_a: server_b, server_b: server_a}
            sessions: dict[str, RawSession] = {}
            for node_id, server in home.items():
                sessions[node_id] = await RawSession.open(server)
                token = leaving if node_id.endswith("2") else keep
                assert (await sessions[node_id].hello(token, node_id))["type"] == "welcome"
            dashboards = {
                server: await websockets.connect(
                    dashboard_url(server, campaign.pk), origin=server, open_timeout=10
                )
                for server in (server_a, server_b)
            }
            leases: dict = {}

            # Round 0: B's volunteers report first, and the dashboard on A shows their points
            # (a report stored by one server reaches the other's viewers); then the other way.
            for node_id in ("b0", "b1", "b2"):
                await play_round(sessions[node_id], node_id, 0, mix, leases)
            points = await next_frame(dashboards[server_a], "points")
            assert any(p["round"] == 0 for p in points["points"]), points
            for node_id in ("a0", "a1", "a2"):
                await play_round(sessions[node_id], node_id, 0, mix, leases)
            points = await next_frame(dashboards[server_b], "points")
            assert any(p["round"] == 0 for p in points["points"]), points

            # Round 1: every node takes its lease; a0 and b0 move to the other server mid-lease
            # (hello there first, the old connection closes after), a1 is cut off for good.
            for node_id in home:
                leases[(node_id, 1)] = await sessions[node_id].request("lease_request", round=1)
            moved = {}
            for node_id in ("a0", "b0"):
                moved[node_id] = await RawSession.open(other[home[node_id]])
                assert (await moved[node_id].hello(keep, node_id))["type"] == "welcome"
                again = await moved[node_id].request("lease_request", round=1)
                assert again["lease_id"] == leases[(node_id, 1)]["lease_id"], (
                    "a moved node gets its lease back"
                )
            for node_id in ("a0", "b0"):
                await sessions[node_id].close()  # the old connection is noticed closed only now
                sessions[node_id] = moved[node_id]
            sessions.pop("a1").ws.transport.abort()  # gone without a goodbye, lease held
            for node_id in ("a0", "b0", "b1", "a2", "b2"):
                await play_round(sessions[node_id], node_id, 1, mix, leases)
            # the moved nodes talk on their new servers: they are connected, after any flush
            await asyncio.sleep(FLUSH_SECONDS + 1)
            for node_id in ("a0", "b0"):
                assert (await sessions[node_id].request("heartbeat"))["type"] == "heartbeat_ack"
            await asyncio.sleep(FLUSH_SECONDS + 1)
            moved_connected = {n: node(n).connected for n in ("a0", "b0")}

            # The revoked token's sessions end on both servers; the pause reaches everyone.
            await in_thread(revoke, WorkerToken.objects.get(label="revoked mid-campaign"))
            for node_id in ("a2", "b2"):
                ended = await next_frame(sessions[node_id].ws, "error")
                assert ended["code"] == "token_revoked", ended
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(sessions[node_id].ws.recv(), 10)
                assert sessions[node_id].ws.close_code == 4001
                sessions.pop(node_id)
            await in_thread(lifecycle.pause, Campaign.objects.get(pk=campaign.pk))
            for node_id, s in sessions.items():
                pushed = await next_frame(s.ws, "campaign_state")
                assert pushed["state"] == "paused", (node_id, pushed)
            for server, ws in dashboards.items():
                state = await next_frame(ws, "state", where=lambda f: f["state"] == "paused")
                assert state["state"] == "paused", server
            refused = await sessions["b1"].request("lease_request", round=2)
            assert refused["type"] == "error" and refused["code"] == "campaign_not_running", refused
            await in_thread(lifecycle.resume, Campaign.objects.get(pk=campaign.pk))
            for s in sessions.values():
                await next_frame(s.ws, "campaign_state", where=lambda f: f["state"] == "running")

            # a1's lease expires (deadline, then a server's sweep) and is reissued once: to the
            # next node that asks for a fresh round.
            lost = Lease.objects.get(lease_id=leases[("a1", 1)]["lease_id"])
            deadline = time.monotonic() + LEASE_SECONDS + 3 * FLUSH_SECONDS + 10
            while Lease.objects.get(pk=lost.pk).state == Lease.State.ACTIVE:
                assert time.monotonic() < deadline, "the lost lease was never expired"
                await asyncio.sleep(0.5)
            for node_id in ("b1", "a0", "b0"):
                await play_round(sessions[node_id], node_id, 2, mix, leases)
            for s in sessions.values():
                await s.close()
            for ws in dashboards.values():
                await ws.close()
            return {"moved_connected": moved_connected, "lost": lost.pk, "leases": leases}

        outcome = asyncio.run(scenario())
        # every server's presence has flushed what it noted before the sockets closed
        time.sleep(FLUSH_SECONDS + 1)

    assert outcome["moved_connected"] == {"a0": True, "b0": True}, "a moved node marked disconnected"
    assert (
        list(WorkerNode.objects.filter(campaign=campaign, connected=True).values_list("node_id", flat=True))
        == []
    )
    # The lost lease went back in line and was reissued exactly once, whole.
    lost = Lease.objects.get(pk=outcome["lost"])
    assert lost.state == Lease.State.REISSUED
    (reissued,) = Lease.objects.filter(reissue_of=lost)
    assert reissued.questions == lost.questions and reissued.state == Lease.State.SUBMITTED
    # Every acked round is stored once: the pool holds exactly what each ack acknowledged.
    for lease in Lease.objects.filter(campaign=campaign, state=Lease.State.SUBMITTED):
        stored = sorted(PoolRollout.objects.filter(lease=lease).values_list("rollout_id", flat=True))
        assert stored == sorted(lease.ack["rollout_ids"]) and len(stored) == 2, lease
    submitted = Lease.objects.filter(campaign=campaign, state=Lease.State.SUBMITTED).count()
    assert submitted == 6 + 5 + 3  # round 0: all six; round 1: all but a1; round 2: three nodes
    refs = list(
        PoolRollout.objects.filter(campaign=campaign).values_list("task", "question_seed", "question_index")
    )
    assert len(refs) == len(set(refs)) == 2 * submitted, "a question was stored twice or lost"
    reports = list(RoundMetrics.objects.filter(campaign=campaign).values_list("agent", "round"))
    assert len(reports) == len(set(reports)) == submitted
