"""What the coordinator's protocol tests share: honest rollouts for a lease, the stored state a
refused request must leave unchanged, and small session helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.tokens import create_token
from tests.wsclient import RawSession
from worker.shared.questions import QuestionRef, TaskMix
from worker.shared.rewards import rewards
from worker.shared.rollout import Rollout

G = 4  # completions per question in the protocol tests' campaign


def honest_rollouts(lease: dict, node_id: str, tier: str, mix: TaskMix) -> list[dict]:
    """One group per leased question: half right answers, half wrong, truthfully scored."""
    records = []
    for q in lease["questions"]:
        ref = QuestionRef.from_json(q["ref"])
        answer = q["answer"] or q["metadata"].get("example_answer", "")
        completions = [f"<answer>{answer}</answer>", "<answer>wrong</answer>"] * (G // 2)
        records.append(
            Rollout(
                ref=ref,
                question=q["question"],
                answer=q["answer"],
                metadata=q["metadata"],
                completions=completions,
                rewards=rewards(mix, ref, completions),
                advantages=[0.0] * G,
                agent_id=node_id,
                tier=tier,
                round=lease["round"],
                completion_tokens=[5] * G,
                truncated=[False] * G,
            ).to_json()
        )
    return records


def stored_state(campaign: Campaign) -> dict:
    """Everything a bad message must not change (counters excluded)."""
    return {
        "rollouts": sorted(
            PoolRollout.objects.filter(campaign=campaign).values_list("rollout_id", "in_pool")
        ),
        "leases": sorted(
            Lease.objects.filter(campaign=campaign).values_list("lease_id", "state", "submission_id")
        ),
        "metrics": sorted(
            RoundMetrics.objects.filter(campaign=campaign).values_list("agent", "round", "reward")
        ),
        "campaign": Campaign.objects.filter(pk=campaign.pk).values_list(
            "next_question_position", "rollout_sequence"
        )[0],
    }


async def submit_round(s: RawSession, node_id: str, mix: TaskMix, round: int = 0, edit=None) -> dict:
    """Lease ``round`` and submit honest rollouts for it (``edit``: a change of the records first);
    returns the reply to the submit."""
    lease = await s.request("lease_request", round=round)
    records = honest_rollouts(lease, node_id, "tiny-1m", mix)
    return await s.request(
        "submit",
        submission_id=f"{node_id}-{round}",
        lease_id=lease["lease_id"],
        rollouts=edit(records) if edit is not None else records,
    )


def run(coro):
    return asyncio.run(coro)


async def in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A blocking database call from a scenario's event loop (Django refuses it there), in an
    executor thread that closes its connection afterwards: on PostgreSQL a pooled connection left
    open in a thread is never returned, and a few tests' worth ran the test process's pool dry
    (PoolTimeout in whichever test came next)."""

    def call() -> Any:
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


async def connected(ready, name="node-a") -> RawSession:
    s = await RawSession.open(ready["url"])
    assert (await s.hello(ready["token"], name))["type"] == "welcome"
    return s


def expect_error(reply: dict, code: str, words: str = "") -> None:
    assert reply["type"] == "error", reply
    assert reply["code"] == code, reply
    assert words.lower() in reply["message"].lower(), reply


def node_with_lease(
    campaign: Campaign, token: WorkerToken, node_id: str, lease_id: str, replicate: int = 0
) -> tuple[WorkerNode, Lease]:
    """A tiny-1m node of ``campaign`` and a submitted lease its pool rows can point to."""
    node = WorkerNode.objects.create(
        campaign=campaign, node_id=node_id, token=token, tier="tiny-1m", replicate=replicate
    )
    lease = Lease.objects.create(
        lease_id=lease_id,
        campaign=campaign,
        node=node,
        round=0,
        questions=[],
        deadline=timezone.now(),
        state=Lease.State.SUBMITTED,
    )
    return node, lease


def make_pool(campaign: Campaign, nodes: int, per_node: int) -> list[WorkerNode]:
    """``nodes`` nodes with ``per_node`` rollouts each; every third rollout has zero advantage."""
    token, _ = create_token(campaign)
    created = []
    sequence = 0
    for n in range(nodes):
        node, lease = node_with_lease(campaign, token, f"n{n}", f"l{n}")
        rows = []
        for i in range(per_node):
            sequence += 1
            flat = sequence % 3 == 0
            record = {
                "rollout_id": f"r{sequence}",
                "agent_id": node.node_id,
                "rewards": [0.0, 0.0] if flat else [1.0, 0.0],
            }
            rows.append(
                PoolRollout(
                    campaign=campaign,
                    sequence=sequence,
                    rollout_id=f"r{sequence}",
                    node=node,
                    lease=lease,
                    tier="tiny-1m",
                    round=i,
                    task="chain_sum",
                    question_seed=1,
                    question_index=sequence,
                    record=record,
                    mean_reward=0.0 if flat else 0.5,
                    zero_advantage=flat,
                )
            )
        PoolRollout.objects.bulk_create(rows)
        created.append(node)
    Campaign.objects.filter(pk=campaign.pk).update(rollout_sequence=sequence)
    return created
