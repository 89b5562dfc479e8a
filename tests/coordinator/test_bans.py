"""Bans against a real coordinator: a node over the campaign's ban threshold leaves the pool and
its sessions end at once; by its token's ban scope (the organizer's choice), the token goes with
it: its other nodes, and any node id it would register next."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from swarm_app.coordinator.models import PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.tokens import create_token
from tests.coordinator.helpers import G, connected, expect_error, honest_rollouts, in_thread, run
from tests.wsclient import RawSession


async def lie_until_banned(s: RawSession, mix, node_id: str, round: int) -> list[dict]:
    """Three false submissions (the campaign's ban threshold) for a fresh lease of ``round``."""
    lease = await s.request("lease_request", round=round)
    assert lease["type"] == "lease", lease
    replies = []
    for attempt in range(3):
        false = honest_rollouts(lease, node_id, "tiny-1m", mix)
        false[0]["rewards"] = [1.0] * G
        replies.append(
            await s.request(
                "submit", submission_id=f"lie-{attempt}", lease_id=lease["lease_id"], rollouts=false
            )
        )
    return replies


async def pushed_end(s: RawSession) -> tuple[dict, int]:
    """The error pushed before the coordinator closes this session, and the close code."""
    pushed = json.loads(await asyncio.wait_for(s.ws.recv(), timeout=5))
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(s.ws.recv(), timeout=5)
    return pushed, closed.value.rcvd.code


async def hello_reply(url: str, token: str, node_id: str) -> dict:
    s = await RawSession.open(url)
    reply = await s.hello(token, node_id)
    await s.close()
    return reply


def test_a_node_over_the_ban_threshold_leaves_the_pool_and_takes_its_token(ready, campaign):
    """Default scope "token": the liar's other node (same token, live session) is cut off too,
    and the token cannot come back under a new node id."""
    mix = ready["mix"]
    lease_a = ready["leases"]["node-a"]

    async def cheat():
        a, b = await connected(ready, "node-a"), await connected(ready, "node-b")
        ok = await a.request(
            "submit",
            submission_id="honest",
            lease_id=lease_a["lease_id"],
            rollouts=honest_rollouts(lease_a, "node-a", "tiny-1m", mix),
        )
        assert ok["type"] == "submit_ack"
        replies = await lie_until_banned(a, mix, "node-a", 1)
        return replies, await pushed_end(a), await pushed_end(b)

    replies, (pushed_a, code_a), (pushed_b, code_b) = run(cheat())
    assert [r["code"] for r in replies] == ["reward_mismatch"] * 3
    assert "banned" in replies[-1]["message"] and "token" in replies[-1]["message"]
    for pushed, code in ((pushed_a, code_a), (pushed_b, code_b)):
        expect_error(pushed, "banned", "node node-a")
        assert code == 4003
    token = WorkerToken.objects.get(campaign=campaign)
    assert token.banned and "node node-a" in token.ban_reason
    assert set(WorkerNode.objects.values_list("node_id", "state")) == {
        ("node-a", WorkerNode.State.BANNED),
        ("node-b", WorkerNode.State.BANNED),
    }
    node = WorkerNode.objects.get(node_id="node-a")
    assert not PoolRollout.objects.filter(node=node, in_pool=True).exists()
    assert PoolRollout.objects.filter(node=node).count() == 2  # kept for audit, out of the pool

    expect_error(run(hello_reply(ready["url"], ready["token"], "node-a")), "banned")
    expect_error(run(hello_reply(ready["url"], ready["token"], "node-new")), "banned", "was banned")
    assert not WorkerNode.objects.filter(node_id="node-new").exists()


def test_a_shared_tokens_ban_holds_for_the_lying_node_only(coordinator, campaign):
    """Scope "node" (a token shared by several volunteers): the liar is banned, the token's other
    node keeps its session and its leases, and a new node id is welcomed."""
    _, secret = create_token(campaign, "shared", ban_scope=WorkerToken.BanScope.NODE)
    shared = {"url": coordinator, "token": secret, "mix": campaign.settings.mix}

    async def cheat():
        liar, honest = await connected(shared, "node-liar"), await connected(shared, "node-honest")
        replies = await lie_until_banned(liar, shared["mix"], "node-liar", 0)
        ended = await pushed_end(liar)
        lease = await honest.request("lease_request", round=0)
        await honest.close()
        return replies, ended, lease

    replies, (pushed, code), lease = run(cheat())
    assert "node node-liar was banned" in replies[-1]["message"]
    expect_error(pushed, "banned")
    assert code == 4003
    assert lease["type"] == "lease", lease
    assert WorkerToken.objects.get(label="shared").banned_at is None
    assert WorkerNode.objects.get(node_id="node-honest").state == WorkerNode.State.HEALTHY
    assert run(hello_reply(coordinator, secret, "node-new"))["type"] == "welcome"
    expect_error(run(hello_reply(coordinator, secret, "node-liar")), "banned")


def test_a_node_registered_under_a_banned_token_gets_no_lease(ready, campaign):
    """The database's rule without the hello check: a node of a token banned after its hello (the
    race between a ban and a concurrent first hello) is refused leases as banned."""

    async def session():
        s = await connected(ready, "node-late")
        await in_thread(
            WorkerToken.objects.filter(campaign=campaign).update, banned_at="2026-01-01T00:00:00Z"
        )
        return await s.request("lease_request", round=0)

    expect_error(run(session()), "banned")
