"""Coordinator throughput and pool-sampling cost.

1. Acknowledged rollouts per second and p50/p99 ack latency of simulated workers (canned,
   truthfully scored rollouts of realistic size; no model) over real websockets against a real
   daphne server, alternating with the same number of clients sending messages of the same size
   to the bare echo endpoint of the same server. ``ratio=`` (printed last) is coordinator
   rollouts/s over echo rollouts/s: the share of the transport's capacity the coordinator keeps
   after validation, re-scoring and storage.
2. Sampling latency (sample_external, p50/p99) at pool sizes 10k and 1M in one campaign
   (``sampling_ratio=`` p99 at 1M over p99 at 10k).

Run against PostgreSQL and Redis (the production set-up) or embedded:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench REDIS_URL=redis://127.0.0.1:6379/13 \
        SECRET_KEY=bench .venv/bin/python bench/coordinator.py [--clients 8] [--seconds 20] [--big 1000000]

It creates its own campaigns in that database; use a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import percentile, setup_django

G = 8
QUESTIONS = 8
COMPLETION = "<think>" + "step by step reasoning " * 20 + "</think><answer>{answer}</answer>"  # ~500 chars


def make_campaign(name: str):
    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.tokens import create_token
    from worker.campaign import CampaignConfig

    config = CampaignConfig(
        group_size=G, questions_per_round=QUESTIONS, num_local=4, num_external=4, rounds=10**6
    )
    campaign = Campaign.objects.create(
        name=name, state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    return campaign, create_token(campaign, "bench")[1]


def rollouts_for(lease: dict, node_id: str, mix) -> list[dict]:
    from worker.rewards import rewards
    from worker.rollout import Rollout
    from worker.tasks import QuestionRef

    out = []
    for q in lease["questions"]:
        ref = QuestionRef.from_json(q["ref"])
        completions = [COMPLETION.format(answer=q["answer"] if g % 2 else "0") for g in range(G)]
        out.append(
            Rollout(
                ref=ref,
                question=q["question"],
                answer=q["answer"],
                metadata=q["metadata"],
                completions=completions,
                rewards=rewards(mix, ref, completions),
                advantages=[0.0] * G,
                agent_id=node_id,
                tier="tiny-1m",
                round=lease["round"],
                completion_tokens=[120] * G,
                truncated=[False] * G,
            ).to_json()
        )
    return out


async def coordinator_client(
    url: str, token: str, node_id: str, mix, until: float, latencies: list[float]
) -> int:
    import websockets

    from worker.protocol import PROTOCOL_VERSION, encode

    acked = 0
    async with websockets.connect(url + "/ws/worker/", max_size=16 * 1024 * 1024) as ws:

        async def request(kind: str, **fields) -> dict:
            await ws.send(encode(kind, id="1", **fields))
            return json.loads(await ws.recv())

        hello = {
            "protocol_versions": [PROTOCOL_VERSION],
            "token": token,
            "node_id": node_id,
            "client_version": "bench",
            "hardware": {"device": "cpu", "ram_bytes": 16 * 1024**3},
            "backends": ["transformers"],
            "generation_tokens_per_second": 1.0,
        }
        assert (await request("hello", **hello))["type"] == "welcome"
        round = 0
        while time.monotonic() < until:
            lease = await request("lease_request", round=round)
            assert lease["type"] == "lease", lease
            rollouts = rollouts_for(lease, node_id, mix)
            start = time.perf_counter()
            ack = await request(
                "submit", submission_id=f"{node_id}-{round}", lease_id=lease["lease_id"], rollouts=rollouts
            )
            latencies.append(time.perf_counter() - start)
            assert ack["type"] == "submit_ack", ack
            acked += len(rollouts)
            round += 1
    return acked


async def echo_client(url: str, payload: str, until: float, latencies: list[float]) -> int:
    import websockets

    echoed = 0
    async with websockets.connect(url + "/ws/echo/", max_size=16 * 1024 * 1024) as ws:
        while time.monotonic() < until:
            start = time.perf_counter()
            await ws.send(payload)
            await ws.recv()
            latencies.append(time.perf_counter() - start)
            echoed += QUESTIONS  # one message carries one submission's worth of rollouts
    return echoed


async def run_phase(clients: list, seconds: float) -> tuple[float, float]:
    start = time.monotonic()
    counts = await asyncio.gather(*clients)
    return sum(counts), time.monotonic() - start


def throughput(clients: int, seconds: float, rounds: int) -> float:
    from swarm_app.campaigns.models import Campaign
    from tests.servers import asgi_server

    campaign, token = make_campaign("bench-throughput")
    mix = campaign.settings.mix
    log = Path(tempfile.mkdtemp()) / "daphne.log"
    with asgi_server(log) as http_base:
        base = http_base.replace("http", "ws", 1)
        sample = json.dumps(
            {
                "type": "submit",
                "rollouts": rollouts_for(
                    {
                        "round": 0,
                        "questions": [
                            {
                                "ref": {"task": "chain_sum", "seed": 1, "index": 0},
                                "question": "q" * 80,
                                "answer": "3",
                                "metadata": {},
                            }
                        ]
                        * QUESTIONS,
                    },
                    "x",
                    mix,
                ),
            }
        )
        print(f"message size: {len(sample)} bytes ({QUESTIONS} rollouts x G={G})")
        results = {"coordinator": [], "echo": []}
        for r in range(rounds):  # alternate, so both see the same machine noise
            for name in ("coordinator", "echo"):
                latencies: list[float] = []
                until = time.monotonic() + seconds
                if name == "coordinator":
                    tasks = [
                        coordinator_client(base, token, f"bench-{r}-{c}", mix, until, latencies)
                        for c in range(clients)
                    ]
                else:
                    tasks = [echo_client(base, sample, until, latencies) for _ in range(clients)]
                count, elapsed = asyncio.run(run_phase(tasks, seconds))
                rate = count / elapsed
                results[name].append(rate)
                print(
                    f"{name:>12} pass {r}: {rate:8.1f} rollouts/s  p50 {percentile(latencies, 50) * 1000:7.1f} ms  "
                    f"p99 {percentile(latencies, 99) * 1000:7.1f} ms  ({len(latencies)} messages)"
                )
    Campaign.objects.filter(pk=campaign.pk).delete()
    coordinator = sum(results["coordinator"]) / rounds
    echo = sum(results["echo"]) / rounds
    print(f"coordinator {coordinator:.1f} rollouts/s, echo {echo:.1f} rollouts/s")
    return coordinator / echo


def sampling_latency(size: int, calls: int = 300) -> float:
    from django.utils import timezone

    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
    from swarm_app.coordinator.pool import sample_external
    from swarm_app.coordinator.tokens import create_token

    campaign, _ = make_campaign(f"bench-pool-{size}")
    token, _ = create_token(campaign)
    nodes = [
        WorkerNode.objects.create(campaign=campaign, node_id=f"n{i}", token=token, tier="tiny-1m")
        for i in range(8)
    ]
    leases = [
        Lease.objects.create(
            lease_id=f"bench-{campaign.pk}-{i}",
            campaign=campaign,
            node=n,
            round=0,
            questions=[],
            deadline=timezone.now(),
            state=Lease.State.SUBMITTED,
        )
        for i, n in enumerate(nodes)
    ]
    record = {"completions": ["<answer>1</answer>"] * G, "rewards": [1.0, 0.0] * (G // 2)}
    start = time.perf_counter()
    batch = 20_000
    for offset in range(0, size, batch):
        PoolRollout.objects.bulk_create(
            PoolRollout(
                campaign=campaign,
                sequence=s + 1,
                rollout_id=f"r{s}",
                node=nodes[s % 8],
                lease=leases[s % 8],
                tier="tiny-1m",
                round=s // 64,
                task="chain_sum",
                question_seed=1,
                question_index=s,
                record=record,
                mean_reward=0.5,
                zero_advantage=s % 3 == 0,
            )
            for s in range(offset, min(size, offset + batch))
        )
    Campaign.objects.filter(pk=campaign.pk).update(rollout_sequence=size)
    print(f"pool of {size}: filled in {time.perf_counter() - start:.1f} s")
    rng = random.Random(0)
    latencies = []
    for i in range(calls):
        t = time.perf_counter()
        drawn = sample_external(campaign.pk, nodes[i % 8].pk, 4, rng=rng)
        latencies.append(time.perf_counter() - t)
        assert len(drawn) == 4
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"sampling at pool size {size}: p50 {p50 * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms  ({calls} draws of J=4)"
    )
    Campaign.objects.filter(pk=campaign.pk).delete()
    return p99


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    args = parser.parse_args()
    setup_django()
    from django.db import connection

    print(
        f"database: {connection.vendor}; {args.clients} clients; {args.passes} alternating passes of {args.seconds:.0f} s"
    )
    small = sampling_latency(args.small)
    big = sampling_latency(args.big)
    print(f"sampling_ratio={big / small:.2f}  (p99 at {args.big} over p99 at {args.small}; goal <= 2)")
    ratio = throughput(args.clients, args.seconds, args.passes)
    print(f"ratio={ratio:.3f}  (coordinator rollouts/s over echo rollouts/s; goal >= 0.5)")


if __name__ == "__main__":
    main()
