"""One pool semantics (issue #50 item 1): the simulator's pool (worker/engine/transport.py,
``RolloutPool``) and the coordinator's draw (coordinator/pool.py over its storage, ORM or
PostgreSQL) give the same drawable groups for the same pool and request.

Scenario: agents submit groups one after another (the order is the pool's arrival order); at a
request, each side's draw of more groups than there can be candidates returns every candidate,
so the two candidate sets are compared whole:

    simulator:   the last ``window`` groups of the pool, not the asker's, [informative only]
    coordinator: sequence > last - window, node != asker, same swarm, [not zero-advantage]

Declared differences, each a parameter of the scenario rather than of the pool (and tested):

* the coordinator's window counts the campaign's groups of every swarm (R swarms: about
  window / R of a node's own swarm); the simulator's pool is one swarm's, so with R > 1 it
  equals the coordinator's draw when its window is the coordinator's window applied to the
  campaign's arrival order (``test_with_several_swarms_the_window_spans_the_campaign``);
* arrival order: the simulator runs in lockstep (every agent's round r before any draw of
  round r), the platform asynchronously; both pools answer for whatever arrived, so the
  contract is per arrival order, and the scenarios below draw it at random.
"""

from __future__ import annotations

import random

import pytest

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import PoolRollout, WorkerNode
from swarm_app.coordinator.pool import sample_external
from swarm_app.coordinator.tokens import create_token
from tests.coordinator.helpers import node_with_lease
from worker.engine.transport import RolloutPool
from worker.shared.campaign import CampaignConfig
from worker.shared.questions import QuestionRef
from worker.shared.rollout import Rollout

AGENTS = ("a", "b", "c", "d")
EVERYTHING = 10_000  # more groups than any window holds: a draw returns every candidate


def group(agent: str, number: int, informative: bool) -> Rollout:
    rewards = [1.0, 0.0] if informative else [0.0, 0.0]
    return Rollout(
        ref=QuestionRef("chain_sum", 1, number),
        question="q",
        answer="a",
        metadata={},
        completions=["x", "y"],
        rewards=rewards,
        advantages=[0.0, 0.0],
        agent_id=agent,
        tier="tiny-1m",
        round=number,
        completion_tokens=[1, 1],
        truncated=[False, False],
        rollout_id=f"{agent}-{number}",
    )


def coordinator_pool(
    window: int, strategy: str, arrivals: list[tuple[Rollout, int]]
) -> tuple[Campaign, dict]:
    """The arrivals stored as the coordinator stores them: one node per agent, numbered in order."""
    config = CampaignConfig(
        group_size=2, pool_window=window, external_strategy=strategy, replicates=2
    ).validate()
    campaign = Campaign.objects.create(name="contract", state=Campaign.State.RUNNING, config=config.to_json())
    token, _ = create_token(campaign)
    nodes = {}
    for rollout, replicate in arrivals:
        key = (rollout.agent_id, replicate)
        if key not in nodes:
            node_id = f"{rollout.agent_id}{replicate}"
            nodes[key] = node_with_lease(campaign, token, node_id, f"lease-{node_id}", replicate)
    PoolRollout.objects.bulk_create(
        PoolRollout(
            campaign=campaign,
            sequence=number,
            rollout_id=rollout.rollout_id,
            node=nodes[(rollout.agent_id, replicate)][0],
            lease=nodes[(rollout.agent_id, replicate)][1],
            tier=rollout.tier,
            replicate=replicate,
            round=rollout.round,
            task=rollout.ref.task,
            question_seed=rollout.ref.seed,
            question_index=rollout.ref.index,
            record=rollout.to_json(),
            mean_reward=rollout.mean_reward,
            zero_advantage=rollout.zero_advantage,
        )
        for number, (rollout, replicate) in enumerate(arrivals, start=1)
    )
    Campaign.objects.filter(pk=campaign.pk).update(rollout_sequence=len(arrivals))
    return campaign, {key: node for key, (node, _) in nodes.items()}


def simulator_candidates(window: int, strategy: str, arrivals: list[Rollout], asker: str) -> set[str]:
    pool = RolloutPool(window)
    pool.add(arrivals)
    return {r.rollout_id for r in pool.sample(asker, EVERYTHING, strategy, random.Random(0))}


def coordinator_candidates(campaign: Campaign, node: WorkerNode) -> set[str]:
    return {record["rollout_id"] for record in sample_external(campaign.pk, node.pk, EVERYTHING)}


@pytest.mark.parametrize("strategy", ["uniform", "nonzero_advantage"])
def test_the_simulator_and_the_coordinator_draw_from_the_same_groups(transactional_db, strategy):
    """40 random scenarios (window 3-20, 1-40 arrivals of 4 agents, a third uninformative), one
    swarm: every agent's candidate set is the same on both sides."""
    rng = random.Random(f"contract-{strategy}")
    compared = 0
    for _ in range(40):
        window = rng.randint(3, 20)
        arrivals = [
            group(rng.choice(AGENTS), number, rng.random() > 1 / 3) for number in range(rng.randint(1, 40))
        ]
        campaign, nodes = coordinator_pool(window, strategy, [(r, 0) for r in arrivals])
        for agent in AGENTS:
            if (agent, 0) not in nodes:
                continue
            expected = simulator_candidates(window, strategy, arrivals, agent)
            assert coordinator_candidates(campaign, nodes[(agent, 0)]) == expected, (window, agent, strategy)
            compared += 1
        campaign.delete()
    assert compared > 100


def test_with_several_swarms_the_window_spans_the_campaign(transactional_db):
    """Two swarms: the coordinator's window counts both swarms' arrivals, so a node draws from its
    own swarm's groups among the campaign's last ``window``; a simulator pool of that swarm alone
    agrees when it holds what that window holds, and differs when given the window itself (the
    declared difference)."""
    rng = random.Random("swarms")
    window = 10
    arrivals = [(group(rng.choice(AGENTS), n, True), rng.randint(0, 1)) for n in range(30)]
    campaign, nodes = coordinator_pool(window, "uniform", arrivals)
    recent = arrivals[-window:]
    differs = False
    for (agent, replicate), node in nodes.items():
        own_swarm_in_window = [r for r, rep in recent if rep == replicate]
        expected = simulator_candidates(window, "uniform", own_swarm_in_window, agent)
        assert coordinator_candidates(campaign, node) == expected
        own_swarm = [r for r, rep in arrivals if rep == replicate]
        differs |= simulator_candidates(window, "uniform", own_swarm, agent) != expected
    assert differs  # a per-swarm window of the same size would reach further back
