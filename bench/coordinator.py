"""Coordinator throughput and pool-sampling cost.

1. Acknowledged rollouts per second and p50/p99 ack latency of simulated workers (canned,
   truthfully scored rollouts of realistic size; no model) over real websockets against a real
   daphne server, alternating with the same number of clients sending messages of the same size
   to the bare echo endpoint of the same server. ``ratio=`` (printed last) is coordinator
   rollouts/s over echo rollouts/s: the share of the transport's capacity the coordinator keeps
   after validation, re-scoring and storage. Each coordinator round is two requests (a lease,
   then the submission of its 8 questions x G=8 completions); each echo round is one message of
   the submission's size.

   After the alternating passes, one more pass runs the whole protocol of a worker's round
   (lease, submit, sample_request for J = 4, metrics): ``full rounds`` (not part of ``ratio=``)
   is the figure for capacity planning.

   Beside wall-clock rates, each phase reports the CPU seconds the server side spent (daphne
   processes, and PostgreSQL's processes when the database is PostgreSQL) per 1000 rollouts,
   read from /proc through psutil. On a machine shared with other jobs the rates move with the
   neighbours' load (the same run can differ by 30%), the CPU cost per rollout much less, so
   ``cpu_ratio=`` (echo server CPU per rollout over coordinator server CPU per rollout) is the
   figure to compare between code versions; ``ratio=`` is the goal's figure.

   ``--servers N`` starts N daphne processes (a production-like deployment runs several ASGI
   servers behind a proxy) and spreads the clients over them round-robin; the echo phase uses the
   same N servers the same way, so both sides get the same processes. The default is 1.

2. Sampling latency (sample_external, p50/p99) at pool sizes 10k and 1M in one campaign
   (``sampling_ratio=`` p99 at 1M over p99 at 10k). On PostgreSQL the pool is filled with one
   INSERT ... SELECT over generate_series (1M rows in well under a minute) and then ANALYZEd, as
   autovacuum would have done for a table that grew to that size; on SQLite, by bulk_create in
   batches.

3. Lease-request latency (issue_lease in this process, p50/p99) in a campaign that has issued
   10k and 200k leases before (``lease_ratio=``, p99 after 200k over p99 after 10k): what a
   lease request reads must not grow with the campaign's history. On PostgreSQL the history is
   made as a campaign makes it, leases inserted active and then updated to submitted, and not
   vacuumed (autovacuum is off on the benchmark machine): the dead versions stay in the indexes.

4. ``--only floor`` (also part of the default run): the irreducible server-side cost of one
   coordinator round, measured piece by piece in this process with no websocket and no ORM:
   parsing and validating a submission, re-scoring its 64 completions against cached entries,
   building its pool records, and the smallest durable write of them (one autocommit INSERT of
   the 8 records into a scratch table, CPU of its PostgreSQL backend read from /proc). Their sum
   is a lower bound on what any coordinator that keeps the issue's checks must spend per round;
   the default run prints it beside what ``ratio=0.5`` would allow (two echo messages' server
   CPU, measured in the same run). See docs/coordinator-bench.md.

Simulated workers are kept cheap so that they take as little as possible of the CPU the server
needs (client and server share the machine): each builds its rollout records as plain dicts and
scores its two distinct completions per question with the worker's own verifier
(worker.shared.rewards.reward) once each, instead of constructing Rollout objects and scoring all G
copies. What the coordinator receives and does is unchanged: every completion is re-scored.

Run against PostgreSQL and Redis (the production set-up) or embedded:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench REDIS_URL=redis://127.0.0.1:6379/13 \
        SECRET_KEY=$(openssl rand -hex 32) .venv/bin/python bench/coordinator.py [--clients 8] [--seconds 20] [--big 1000000] \
        [--servers 1] [--only throughput|sampling|leases|floor]

It creates its own campaigns in that database; use a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import percentile, setup_django

G = 8
QUESTIONS = 8
COMPLETION = "<think>" + "step by step reasoning " * 20 + "</think><answer>{answer}</answer>"  # ~500 chars


def make_campaign(name: str):
    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.tokens import create_token
    from worker.shared.campaign import CampaignConfig

    # max_new_tokens covers the canned completions' claimed 120 tokens (the coordinator bounds them).
    config = CampaignConfig(
        group_size=G,
        questions_per_round=QUESTIONS,
        num_local=4,
        num_external=4,
        rounds=100_000,  # the bound a campaign allows (CampaignConfig); the benchmarks run far fewer
        max_new_tokens=128,
    )
    campaign = Campaign.objects.create(
        name=name, state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    return campaign, create_token(campaign, "bench")[1]


def campaign_with_nodes(name: str) -> tuple:
    """A running campaign with 8 registered nodes (no socket), for the in-process parts."""
    from swarm_app.coordinator.models import WorkerNode
    from swarm_app.coordinator.tokens import create_token

    campaign, _ = make_campaign(name)
    token, _ = create_token(campaign)
    nodes = [
        WorkerNode.objects.create(campaign=campaign, node_id=f"n{i}", token=token, tier="tiny-1m")
        for i in range(8)
    ]
    return campaign, nodes


def rollouts_for(lease: dict, node_id: str, mix) -> list[dict]:
    """The submission's rollout records: half right answers, half "0", truthfully scored.

    Built as plain dicts in Rollout.to_json()'s layout, and each distinct completion is scored
    once with the worker's verifier (see the module docstring: clients stay cheap).
    """
    import uuid

    from worker.shared.questions import QuestionRef
    from worker.shared.rewards import reward
    from worker.shared.rollout import SCHEMA_VERSION

    out = []
    for q in lease["questions"]:
        ref = QuestionRef.from_json(q["ref"])
        right, wrong = COMPLETION.format(answer=q["answer"]), COMPLETION.format(answer="0")
        right_reward, wrong_reward = reward(mix, ref, right), reward(mix, ref, wrong)
        out.append(
            {
                "ref": ref.to_json(),
                "question": q["question"],
                "answer": q["answer"],
                "metadata": q["metadata"],
                "completions": [right if g % 2 else wrong for g in range(G)],
                "rewards": [right_reward if g % 2 else wrong_reward for g in range(G)],
                "advantages": [0.0] * G,
                "agent_id": node_id,
                "tier": "tiny-1m",
                "round": lease["round"],
                "completion_tokens": [120] * G,
                "truncated": [False] * G,
                "rollout_id": uuid.uuid4().hex,
                "schema_version": SCHEMA_VERSION,
            }
        )
    return out


def hello_fields(token: str, node_id: str, version: int = 1) -> dict:
    """A simulated worker's hello: a CPU machine, the transformers backend, protocol ``version``
    (1: a request per step of the round, as the benchmarks' figures were measured)."""
    return {
        "protocol_versions": [version],
        "token": token,
        "node_id": node_id,
        "client_version": "bench",
        "hardware": {"device": "cpu", "ram_bytes": 16 * 1024**3},
        "backends": ["transformers"],
        "generation_tokens_per_second": 1.0,
    }


async def coordinator_client(
    url: str, token: str, node_id: str, mix, until: float, latencies: list[float], full: bool = False
) -> int:
    """Rounds of lease + submit until ``until``; returns the rollouts acknowledged.

    ``full``: each round is what a volunteer's worker sends, in its order: lease, submit, a
    sample of J = 4 external rollouts, the round's metrics.
    """
    import websockets

    acked = 0
    async with websockets.connect(url + "/ws/worker/", max_size=16 * 1024 * 1024) as ws:

        async def request(kind: str, **fields) -> dict:
            await ws.send(msgspec.json.encode({"type": kind, "id": "1", **fields}).decode())
            return json.loads(await ws.recv())

        assert (await request("hello", **hello_fields(token, node_id)))["type"] == "welcome"
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
            if full:
                samples = await request("sample_request", round=round, count=4)
                assert samples["type"] == "samples", samples
                metrics = await request("metrics", round=round, metrics={"loss": 0.1, "reward": 0.5})
                assert metrics["type"] == "metrics_ack", metrics
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


class ServerCpu:
    """CPU seconds (user + system) of the server side: our daphne processes, the Celery workers
    we started (``POOL_SAMPLING=celery``'s draws) and PostgreSQL's."""

    def __init__(self, database_is_postgres: bool) -> None:
        import psutil

        self.psutil = psutil
        self.postgres = database_is_postgres

    def processes(self) -> list:
        me = self.psutil.Process()
        servers = [
            p
            for p in me.children(recursive=True)
            if {"daphne", "celery"} & set(" ".join(p.cmdline()).split())
        ]
        if self.postgres:
            servers += [p for p in self.psutil.process_iter(["name"]) if p.info["name"] == "postgres"]
        return servers

    def sample(self) -> dict[str, float]:
        """Per-process CPU seconds now, keyed by "kind:pid" (new processes count from zero)."""
        out = {}
        for p in self.processes():
            with contextlib.suppress(self.psutil.Error):
                times = p.cpu_times()
                kind = (
                    "postgres"
                    if p.name() == "postgres"
                    else "celery"
                    if "celery" in p.cmdline()
                    else "daphne"
                )
                out[f"{kind}:{p.pid}"] = times.user + times.system
        return out

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        totals = {"daphne": 0.0, "postgres": 0.0, "celery": 0.0}
        for key, value in after.items():
            totals[key.split(":")[0]] += max(0.0, value - before.get(key, 0.0))
        return totals


def throughput(clients: int, seconds: float, rounds: int, servers: int) -> tuple[float, float]:
    from django.db import connection

    from swarm_app.campaigns.models import Campaign
    from tests.servers import asgi_server

    campaign, token = make_campaign("bench-throughput")
    mix = campaign.settings.mix
    cpu = ServerCpu(connection.vendor == "postgresql")
    logs = Path(tempfile.mkdtemp())
    with contextlib.ExitStack() as stack:
        bases = [
            # The per-connection rate limit protects production servers from a runaway worker;
            # the benchmark measures the server's capacity, so it must not be the bound.
            stack.enter_context(
                asgi_server(
                    logs / f"daphne-{i}.log",
                    WORKER_RATE_PER_SECOND="1000000",
                    WORKER_RATE_BURST="1000000",
                    SWARM_BENCH_ECHO="1",  # the echo baseline is served only when asked for
                )
            ).replace("http", "ws", 1)
            for i in range(servers)
        ]
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
        print(
            f"message size: {len(sample)} bytes ({QUESTIONS} rollouts x G={G}); "
            f"{servers} daphne process(es); logs in {logs}"
        )
        results: dict[str, list[float]] = {"coordinator": [], "echo": []}
        cpu_per_k: dict[str, list[float]] = {"coordinator": [], "echo": []}
        for r in range(rounds):  # alternate, so both see the same machine noise
            for name in ("coordinator", "echo"):
                latencies: list[float] = []
                until = time.monotonic() + seconds
                if name == "coordinator":
                    tasks = [
                        coordinator_client(bases[c % servers], token, f"bench-{r}-{c}", mix, until, latencies)
                        for c in range(clients)
                    ]
                else:
                    tasks = [
                        echo_client(bases[c % servers], sample, until, latencies) for c in range(clients)
                    ]
                before = cpu.sample()
                count, elapsed = asyncio.run(run_phase(tasks, seconds))
                spent = cpu.spent(before, cpu.sample())
                rate = count / elapsed
                results[name].append(rate)
                per_k = 1000 * (spent["daphne"] + spent["postgres"]) / max(count, 1)
                cpu_per_k[name].append(per_k)
                print(
                    f"{name:>12} pass {r}: {rate:8.1f} rollouts/s  p50 {percentile(latencies, 50) * 1000:7.1f} ms  "
                    f"p99 {percentile(latencies, 99) * 1000:7.1f} ms  ({len(latencies)} messages)  "
                    f"server CPU {per_k:6.3f} s per 1000 rollouts "
                    f"(daphne {spent['daphne']:.1f} s, postgres {spent['postgres']:.1f} s in {elapsed:.0f} s)"
                )
        # Once more with the whole protocol of a worker's round (not part of ratio=).
        latencies = []
        tasks = [
            coordinator_client(
                bases[c % servers],
                token,
                f"bench-full-{c}",
                mix,
                time.monotonic() + seconds,
                latencies,
                full=True,
            )
            for c in range(clients)
        ]
        before = cpu.sample()
        count, elapsed = asyncio.run(run_phase(tasks, seconds))
        spent = cpu.spent(before, cpu.sample())
        per_k = 1000 * (spent["daphne"] + spent["postgres"]) / max(count, 1)
        print(
            f"{'full rounds':>12}       : {count / elapsed:8.1f} rollouts/s  (lease, submit, sample, metrics: "
            f"{count // QUESTIONS / elapsed:.1f} rounds/s)  server CPU {per_k:6.3f} s per 1000 rollouts "
            f"(daphne {spent['daphne']:.1f} s, postgres {spent['postgres']:.1f} s in {elapsed:.0f} s)"
        )
    Campaign.objects.filter(pk=campaign.pk).delete()
    coordinator = sum(results["coordinator"]) / rounds
    echo = sum(results["echo"]) / rounds
    coordinator_cpu = sum(cpu_per_k["coordinator"]) / rounds
    echo_cpu = sum(cpu_per_k["echo"]) / rounds
    print(f"coordinator {coordinator:.1f} rollouts/s, echo {echo:.1f} rollouts/s")
    print(
        f"server CPU per 1000 rollouts: coordinator {coordinator_cpu:.3f} s, echo {echo_cpu:.3f} s; "
        f"cpu_ratio={echo_cpu / coordinator_cpu:.3f}"
    )
    return coordinator / echo, echo_cpu


def fill_pool_bulk(campaign, nodes: list, leases: list, record: dict, size: int) -> None:
    """Rollouts 1..size (node i % 8, every third zero-advantage), by bulk_create in batches."""
    from swarm_app.coordinator.models import PoolRollout

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


def fill_pool_postgres(campaign, nodes: list, leases: list, record: dict, size: int) -> None:
    """The same rows as fill_pool_bulk, generated by PostgreSQL itself, then ANALYZEd."""
    from django.db import connection

    from swarm_app.coordinator.models import PoolRollout

    table = PoolRollout._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (campaign_id, sequence, rollout_id, node_id, lease_id, tier, round, task,
                                 question_seed, question_index, record, mean_reward, zero_advantage,
                                 in_pool, created_at)
            SELECT %s, s + 1, 'r' || s, (%s::bigint[])[s %% 8 + 1], (%s::bigint[])[s %% 8 + 1],
                   'tiny-1m', s / 64, 'chain_sum', 1, s, %s::jsonb, 0.5, s %% 3 = 0, true, now()
            FROM generate_series(0, %s - 1) AS s
            """,
            [campaign.pk, [n.pk for n in nodes], [lease.pk for lease in leases], json.dumps(record), size],
        )
        cursor.execute(f"ANALYZE {table}")


def sampling_latency(size: int, calls: int = 300) -> float:
    from django.db import connection
    from django.utils import timezone

    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.models import Lease, PoolRollout
    from swarm_app.coordinator.pool import sample_external

    campaign, nodes = campaign_with_nodes(f"bench-pool-{size}")
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
    if connection.vendor == "postgresql":
        fill_pool_postgres(campaign, nodes, leases, record, size)
    else:
        fill_pool_bulk(campaign, nodes, leases, record, size)
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
    if connection.vendor == "postgresql":
        # The synthetic pool's statistics (a million rows over 8 leases) would outlive its rows:
        # the next campaign's deferred foreign-key checks would then be planned as scans of the
        # whole table (deleting the throughput campaign took minutes). Reclaim and re-measure.
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {PoolRollout._meta.db_table}")
    return p99


def median_ms(function, repeats: int = 300) -> float:
    """Median milliseconds of this thread's CPU per call: what the call costs, whatever else the
    machine runs meanwhile (wall time would count the neighbours' share of the cores)."""
    function()  # warm caches (entries, prepared statements)
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        function()
        times.append(time.thread_time() - start)
    return percentile(times, 50) * 1000


def floor() -> float:
    """Milliseconds of server CPU one round needs at least (module docstring, part 4)."""
    from django.db import connection

    from swarm_app.coordinator.storage.records import pool_record
    from worker.shared import protocol
    from worker.shared.campaign import CampaignConfig
    from worker.shared.questions import question, ref_at
    from worker.shared.rewards import RewardConfig, rewards

    config = CampaignConfig(group_size=G, questions_per_round=QUESTIONS).validate()
    mix = config.mix
    lease = {
        "round": 0,
        "questions": [
            {"ref": ref.to_json(), "question": q.question, "answer": q.answer, "metadata": q.metadata}
            for ref in (ref_at(mix, config.seed, position) for position in range(QUESTIONS))
            for q in [question(mix, ref)]
        ],
    }
    submit = protocol.Submit(id="1", submission_id="s", lease_id="l", rollouts=rollouts_for(lease, "n", mix))
    raw = protocol.encode(submit)
    rollouts = protocol.parse(raw, "worker").rollouts
    reward_config = RewardConfig(config.format_weight)
    cpu_ms = {
        "parse and validate": median_ms(lambda: protocol.parse(raw, "worker")),
        "re-score 64 completions": median_ms(
            lambda: [rewards(mix, r.ref, r.completions, reward_config) for r in rollouts]
        ),
        "pool records as JSON": median_ms(lambda: json.dumps([pool_record(r) for r in rollouts])),
    }
    if connection.vendor == "postgresql":
        cpu_ms["durable insert of the 8 records"] = durable_insert_cpu_ms(
            [json.dumps(pool_record(r)) for r in rollouts]
        )
    for name, ms in cpu_ms.items():
        print(f"floor: {name:<34} {ms:6.3f} ms of CPU")
    total = sum(cpu_ms.values())
    print(f"floor: server CPU per round at least {total:.3f} ms")
    return total


def durable_insert_cpu_ms(records: list[str], repeats: int = 300) -> float:
    """CPU of the PostgreSQL backend per autocommit INSERT of ``records`` (prepared)."""
    import psutil
    import psycopg
    from django.db import connection

    settings_dict = connection.settings_dict
    with psycopg.connect(
        host=settings_dict["HOST"] or "127.0.0.1",
        port=settings_dict["PORT"] or 5432,
        user=settings_dict["USER"],
        dbname=settings_dict["NAME"],
        autocommit=True,
    ) as pg:
        pg.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor_pool "
            "(id bigserial PRIMARY KEY, rollout_id text UNIQUE, record jsonb NOT NULL)"
        )
        backend = psutil.Process(pg.execute("SELECT pg_backend_pid()").fetchone()[0])
        statement = (
            "INSERT INTO bench_floor_pool (rollout_id, record) "
            "SELECT gen_random_uuid()::text, r FROM unnest(%s::text[]::jsonb[]) AS r"
        )
        before = backend.cpu_times()
        median_ms(lambda: pg.execute(statement, [records], prepare=True), repeats)
        after = backend.cpu_times()
        pg.execute("DROP TABLE bench_floor_pool")
    spent = (after.user + after.system) - (before.user + before.system)
    return 1000 * spent / (repeats + 1)


def lease_latency(history: int, calls: int = 300) -> tuple[float, float]:
    """p50 and p99 seconds of a lease request (issue_lease, in process) in a campaign that has already
    issued ``history`` leases (all submitted), as a long-running campaign has."""
    from django.db import connection
    from django.utils import timezone

    from swarm_app.campaigns.models import Campaign
    from swarm_app.coordinator.leases import issue_lease
    from swarm_app.coordinator.models import Lease

    campaign, nodes = campaign_with_nodes(f"bench-leases-{history}")
    start = time.perf_counter()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {Lease._meta.db_table} (lease_id, campaign_id, node_id, round, state, questions,
                                                    issued_at, deadline, submission_id)
                SELECT 'h{campaign.pk}-' || s, %s, (%s::bigint[])[s %% 8 + 1], s / 8, 'active', '[]'::jsonb,
                       now() - interval '1 hour', now() - interval '1 hour', ''
                FROM generate_series(0, %s - 1) AS s
                """,
                [campaign.pk, [n.pk for n in nodes], history],
            )
            # As a campaign's leases really end: issued active, then updated to submitted. Each
            # update leaves a dead version (and its index entries, past its deadline) until a
            # VACUUM, which this machine's autovacuum=off never runs: the reads must not visit them.
            cursor.execute(
                f"UPDATE {Lease._meta.db_table} SET state = 'submitted', submission_id = 's' || id "
                "WHERE campaign_id = %s",
                [campaign.pk],
            )
            cursor.execute(f"ANALYZE {Lease._meta.db_table}")
    else:
        now = timezone.now()
        Lease.objects.bulk_create(
            Lease(
                lease_id=f"h{campaign.pk}-{s}",
                campaign=campaign,
                node=nodes[s % 8],
                round=s // 8,
                state=Lease.State.SUBMITTED,
                questions=[],
                deadline=now,
                submission_id=f"s{s}",
            )
            for s in range(history)
        )
    print(f"lease history of {history}: filled in {time.perf_counter() - start:.1f} s")
    latencies = []
    first_round = history // 8 + 1
    for i in range(calls):
        t = time.perf_counter()
        issue_lease(nodes[i % 8], first_round + i)
        latencies.append(time.perf_counter() - t)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"lease request after {history} leases: p50 {p50 * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms  ({calls} requests)"
    )
    Campaign.objects.filter(pk=campaign.pk).delete()
    return p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--servers", type=int, default=1, help="daphne processes (default 1)")
    parser.add_argument("--big-history", type=int, default=200_000, help="leases before the timed requests")
    parser.add_argument(
        "--only", choices=["throughput", "sampling", "leases", "floor"], help="run one part only"
    )
    args = parser.parse_args()
    setup_django()
    from django.db import connection

    print(
        f"database: {connection.vendor}; {args.clients} clients; {args.passes} alternating passes of "
        f"{args.seconds:.0f} s; {os.cpu_count()} CPUs"
    )
    if args.only in (None, "sampling"):
        small = sampling_latency(args.small)
        big = sampling_latency(args.big)
        print(f"sampling_ratio={big / small:.2f}  (p99 at {args.big} over p99 at {args.small}; goal <= 2)")
    if args.only in (None, "leases"):
        (small_p50, small), (big_p50, big) = lease_latency(args.small), lease_latency(args.big_history)
        print(
            f"lease_ratio={big / small:.2f} lease_p50_ratio={big_p50 / small_p50:.2f}  (p99 and p50 after "
            f"{args.big_history} leases over after {args.small}; a lease request's cost must not grow with "
            "the campaign's history; p99 moves with the machine's other load, p50 much less)"
        )
    round_floor = floor() if args.only in (None, "floor") else None
    if args.only in (None, "throughput"):
        ratio, echo_cpu_per_k = throughput(args.clients, args.seconds, args.passes, args.servers)
        if round_floor is not None:
            # An echo message carries one submission's worth (QUESTIONS rollouts); a coordinator
            # round at half the echo's rate may spend at most twice its server CPU.
            allowed = 2 * echo_cpu_per_k * QUESTIONS
            print(
                f"ratio 0.5 allows {allowed:.3f} ms of server CPU per round (two echo messages); "
                f"the floor above is {round_floor:.3f} ms, {round_floor / allowed:.1f}x that"
            )
        print(f"ratio={ratio:.3f}  (coordinator rollouts/s over echo rollouts/s; goal >= 0.5)")


if __name__ == "__main__":
    main()
