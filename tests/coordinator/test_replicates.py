"""R independent swarms per tier (issue #26 item 2), through the real websocket server: nodes that
join at the same moment fill the swarms evenly, and a node's pool draw never holds a rollout of
another swarm."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.coordinator.models import PoolRollout, WorkerNode
from swarm_app.coordinator.tokens import create_token, renew_control_token
from tests.coordinator.helpers import G, run, submit_round
from tests.wsclient import RawSession
from worker.shared.campaign import CampaignConfig


@pytest.fixture
def swarms(transactional_db) -> Campaign:
    config = CampaignConfig(
        group_size=G, questions_per_round=2, num_local=2, num_external=2, rounds=10, replicates=4
    )
    return Campaign.objects.create(
        name="replicates", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )


def test_nodes_joining_at_once_fill_every_swarm_evenly(coordinator, swarms):
    """16 first hellos at the same moment (the server answers them on a pool of threads) into 4
    swarms: 4 nodes each, however they interleave (the campaign's row is locked while one counts)."""
    _, secret = create_token(swarms, "replicates")

    async def race():
        sessions = [await RawSession.open(coordinator) for _ in range(16)]
        replies = await asyncio.gather(*(s.hello(secret, f"node-{i}") for i, s in enumerate(sessions)))
        for s in sessions:
            await s.close()
        return replies

    replies = run(race())
    assert [r["type"] for r in replies] == ["welcome"] * 16, replies
    counts = Counter(WorkerNode.objects.filter(campaign=swarms).values_list("replicate", flat=True))
    assert counts == {0: 4, 1: 4, 2: 4, 3: 4}


def test_a_node_draws_only_from_its_own_swarm(coordinator, swarms):
    """Two nodes in each of 4 swarms submit a round; every node's draw (asking for more than exist)
    holds its swarm-mate's rollouts and nothing else: the pool is partitioned by swarm."""
    _, secret = create_token(swarms, "replicates")
    mix = swarms.settings.mix

    async def scenario():
        sessions = {}
        for i in range(8):  # joined one after another while connected: swarms 0, 0, 1, 1, 2, 2, ...
            s = await RawSession.open(coordinator)
            assert (await s.hello(secret, f"node-{i}"))["type"] == "welcome"
            sessions[f"node-{i}"] = s
        for name, s in sessions.items():
            assert (await submit_round(s, name, mix))["type"] == "submit_ack"
        draws = {name: await s.request("sample_request", round=0, count=50) for name, s in sessions.items()}
        for s in sessions.values():
            await s.close()
        return draws

    draws = run(scenario())
    swarm_of = dict(WorkerNode.objects.filter(campaign=swarms).values_list("node_id", "replicate"))
    assert [swarm_of[f"node-{i}"] for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert set(PoolRollout.objects.filter(campaign=swarms).values_list("node__node_id", "replicate")) == set(
        swarm_of.items()
    )
    for name, draw in draws.items():
        assert draw["type"] == "samples", draw
        mates = {other for other, r in swarm_of.items() if r == swarm_of[name] and other != name}
        assert {r["agent_id"] for r in draw["rollouts"]} == mates, (name, draw)
        assert len(draw["rollouts"]) == 2  # the mate's 2 groups; the other 12 are other swarms'


def test_a_lone_node_is_joined_before_an_empty_swarm_is_started():
    """Two volunteers make one swarm of two (a swarm of one shares nothing), 2R make R pairs,
    then the swarms fill evenly and a volunteer who left is replaced in their swarm."""
    from swarm_app.coordinator.assignment import assign_replicate

    assert assign_replicate(3, {}, {}) == 0
    assert assign_replicate(3, {0: 1}, {0: 1}) == 0
    assert assign_replicate(3, {0: 2}, {0: 2}) == 1
    assert assign_replicate(3, {0: 2, 1: 2, 2: 2}, {0: 2, 1: 2, 2: 2}) == 0
    assert assign_replicate(3, {0: 3, 1: 2, 2: 2}, {0: 3, 1: 2, 2: 2}) == 1
    assert assign_replicate(3, {0: 2, 1: 1, 2: 2}, {0: 2, 1: 2, 2: 2}) == 1  # one left swarm 1
    assert assign_replicate(1, {0: 5}, {0: 9}) == 0


def test_connected_control_nodes_do_not_count_in_a_swarm(coordinator, swarms):
    """A campaign's control nodes are connected nodes of the tier too, but of no swarm: the first
    two volunteers still make one swarm of two (a control counted in swarm 0 split them)."""
    swarms.config["tiers"] = ["tiny-1m"]
    swarms.config["controls"] = {**swarms.config.get("controls", {}), "isolated": True, "seeds": 1}
    swarms.save(update_fields=["config"])
    control = ControlRun.objects.create(campaign=swarms, tier="tiny-1m", arm="isolated", seed=0)
    secret = renew_control_token(control)
    token = create_token(swarms, "volunteers")[1]

    async def join() -> None:
        sessions = [await RawSession.open(coordinator) for _ in range(3)]
        assert (await sessions[0].hello(secret, "control-1"))["control"]["arm"] == "isolated"
        for s, name in zip(sessions[1:], ("a", "b"), strict=True):
            assert (await s.hello(token, name))["type"] == "welcome"
        for s in sessions:
            await s.close()

    run(join())
    replicates = dict(WorkerNode.objects.filter(arm="swarm").values_list("node_id", "replicate"))
    assert replicates["a"] == replicates["b"], replicates
