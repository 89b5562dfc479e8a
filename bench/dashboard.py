"""Dashboard load time for a campaign of 1,000 workers x 2,000 rounds, and live-update latency.

1. Synthetic RoundMetrics rows (realistic TRL metrics JSON, ~600 bytes) for ``--workers``
   workers x ``--rounds`` rounds over two tiers, plus the isolated and filtered controls
   (3 seeds per tier and arm), inserted with COPY (PostgreSQL) or executemany (SQLite); the
   last round is held back.
2. Baselines, same table, same run: ``SELECT COUNT(*)`` (a plain scan), and the GROUP BY the
   page would need without rollups.
3. The rollups built once from the backlog (what beat's refresh does for rows it never saw).
4. The live steady state: the held-back round (one row per worker) arrives, then the dashboard
   is loaded, in process (refresh + aggregation + summary, JSON-encoded) and over HTTP from a
   real daphne server. ``ratio_vs_budget`` = HTTP load time / 2 s; ``ratio_vs_count`` = HTTP
   load time / the COUNT(*) scan.
5. Live latency: a worker reports metrics over the worker websocket (lease, submit, metrics,
   like swarm-worker) while a dashboard socket listens; time from sending the report to the
   dashboard receiving the aggregated point, over ``--reports`` rounds (p50, max).

Embedded (SQLite in a data directory of its own, data/bench-dashboard by default) or against
PostgreSQL and Redis:

    .venv/bin/python bench/dashboard.py [--workers 1000 --rounds 2000 --reports 20 --keep]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench REDIS_URL=redis://127.0.0.1:6379/13 \
        SECRET_KEY=$(openssl rand -hex 32) .venv/bin/python bench/dashboard.py

It creates its own campaign in that database and deletes it at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import ROOT, percentile, setup_django

BUDGET_SECONDS = 2.0
TIERS = ("tiny-1m", "tiny-5m")
CONTROL_SEEDS = 3
G = 4
KEYS = [
    "reward_std",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "external_fraction",
    "batch/local_shortfall",
    "batch/external_shortfall",
    "filtered/local",
    "filtered/external",
    "loss",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "entropy",
    "step_time",
    "generation_time",
    "generated_tokens",
    "num_tokens",
    "tokens_per_second",
    "round_time",
]


def metrics_json(rng: random.Random, reward: float, number: int, shares: bool) -> str:
    values = {key: round(rng.random(), 4) for key in KEYS}
    values.update(
        {"reward": round(reward, 4), "round": float(number), "batch/local_used": 4.0},
    )
    values["batch/external_used"] = 4.0 if shares else 0.0
    return json.dumps(values)


def make_campaign(rounds: int):
    from swarm_app.campaigns.models import Campaign, ControlRun
    from swarm_app.coordinator.tokens import create_token
    from worker.shared.campaign import CampaignConfig

    config = CampaignConfig(
        tiers=list(TIERS),
        group_size=G,
        questions_per_round=2,
        num_local=2,
        num_external=2,
        rounds=rounds + 100,
    ).validate()
    campaign = Campaign.objects.create(
        name="bench-dashboard", state=Campaign.State.RUNNING, config=config.to_json()
    )
    runs = [
        ControlRun.objects.create(campaign=campaign, tier=tier, arm=arm, seed=seed, state="running")
        for tier in TIERS
        for arm in ("isolated", "filtered")
        for seed in range(CONTROL_SEEDS)
    ]
    return campaign, runs, create_token(campaign, "bench")


def rows_for(campaign, nodes, runs, rounds: range):
    """(campaign, arm, tier, agent, node, control_run, round, reward, metrics, created_at) tuples."""
    from django.utils import timezone

    now = timezone.now()
    rng = random.Random(0)
    for number in rounds:
        progress = number / 2000
        for node in nodes:
            reward = min(1.0, max(0.0, 0.2 + 0.5 * progress + rng.gauss(0, 0.1)))
            yield (
                campaign.pk,
                "swarm",
                node.tier,
                f"node:{node.node_id}",
                node.pk,
                None,
                number,
                reward,
                metrics_json(rng, reward, number, True),
                now,
            )
        for run in runs:
            reward = min(1.0, max(0.0, 0.2 + 0.4 * progress + rng.gauss(0, 0.1)))
            yield (
                campaign.pk,
                run.arm,
                run.tier,
                f"control:{run.pk}",
                None,
                run.pk,
                number,
                reward,
                metrics_json(rng, reward, number, False),
                now,
            )


COLUMNS = [
    "campaign_id",
    "arm",
    "tier",
    "agent",
    "node_id",
    "control_run_id",
    "round",
    "reward",
    "metrics",
    "created_at",
]


def insert(rows) -> int:
    from django.db import connection, transaction

    from swarm_app.campaigns.models import RoundMetrics

    table = RoundMetrics._meta.db_table
    count = 0
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        with (
            connection.connection.cursor() as cursor,
            cursor.copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
                count += 1
        connection.connection.commit()
        return count
    sql = f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
    batch: list[tuple] = []
    with transaction.atomic(), connection.cursor() as cursor:
        for row in rows:
            batch.append((*row[:9], row[9].isoformat()))
            if len(batch) == 20_000:
                cursor.executemany(sql, batch)
                count += len(batch)
                batch = []
        cursor.executemany(sql, batch)
        count += len(batch)
    return count


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    print(f"{label}: {elapsed:.3f} s")
    return result, elapsed


def direct_group_by(campaign) -> int:
    """What the chart would cost without rollups: one GROUP BY over every row."""
    from django.db.models import Avg, Count, Max, Min

    from swarm_app.campaigns.models import RoundMetrics

    rows = (
        RoundMetrics.objects.filter(campaign=campaign)
        .values("arm", "tier", "round")
        .annotate(n=Count("id"), mean=Avg("reward"), low=Min("reward"), high=Max("reward"))
        .order_by()
    )
    return len(list(rows))


async def live_latency(base: str, campaign, secret: str, reports: int) -> list[float]:
    """Worker report (websocket) -> aggregated point on a dashboard socket, per round."""
    import websockets

    from tests.coordinator.test_protocol import honest_rollouts
    from tests.wsclient import RawSession

    mix = campaign.settings.mix
    viewer = await websockets.connect(
        base.replace("http", "ws", 1) + f"/ws/campaigns/{campaign.pk}/", origin=base, open_timeout=10
    )
    session = await RawSession.open(base)
    welcome = await session.hello(secret, "bench-live-node", preferred_tier="tiny-1m")
    assert welcome["type"] == "welcome", welcome
    agent = "bench-live-node"
    latencies = []
    await asyncio.sleep(1.0)
    for number in range(reports):
        lease = await session.request("lease_request", round=number)
        assert lease["type"] == "lease", lease
        ack = await session.request(
            "submit",
            submission_id=f"live-{number}",
            lease_id=lease["lease_id"],
            rollouts=honest_rollouts(lease, agent, "tiny-1m", mix),
        )
        assert ack["type"] == "submit_ack", ack
        start = time.perf_counter()
        reply = await session.request("metrics", round=number, metrics={"reward": 0.5, "loss": 0.1})
        assert reply["type"] == "metrics_ack", reply
        while True:
            message = json.loads(await asyncio.wait_for(viewer.recv(), timeout=30))
            if message["type"] == "points" and any(
                p["round"] == number and p["arm"] == "swarm" and p["tier"] == "tiny-1m"
                for p in message["points"]
            ):
                break
        latencies.append(time.perf_counter() - start)
        await asyncio.sleep(0.3)  # a worker's rounds are seconds apart, not back to back
    await session.close()
    await viewer.close()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--reports", type=int, default=20, help="live-latency samples")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic campaign")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        os.environ.setdefault("SWARM_DATA_DIR", str(ROOT / "data" / "bench-dashboard"))
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))  # production mode wants 50+
    setup_django()

    from django.conf import settings
    from django.db import connection

    from swarm_app.campaigns import rollups
    from swarm_app.campaigns.models import Campaign, RoundMetrics
    from swarm_app.coordinator.models import WorkerNode
    from swarm_app.web import dashboard
    from tests.servers import asgi_server

    campaign, runs, (token, secret) = make_campaign(args.rounds)
    nodes = WorkerNode.objects.bulk_create(
        WorkerNode(
            campaign=campaign,
            node_id=f"w{i:05d}",
            token=token,
            tier=TIERS[i % len(TIERS)],
            round=args.rounds,
            connected=True,
            hardware={"device": "cpu", "device_name": "x86_64", "ram_bytes": 16 * 1024**3},
            backend="transformers",
            last_reward=0.5,
        )
        for i in range(args.workers)
    )
    nodes = list(WorkerNode.objects.filter(campaign=campaign).order_by("pk"))
    print(
        f"database: {connection.vendor}; channel layer: {settings.CHANNEL_LAYERS['default']['BACKEND'].rsplit('.', 1)[-1]}"
    )
    try:
        count, elapsed = timed(
            f"insert {args.workers} workers x {args.rounds - 1} rounds (+ {len(runs)} controls)",
            lambda: insert(rows_for(campaign, nodes, runs, range(args.rounds - 1))),
        )
        print(f"rows: {count:,} ({count / elapsed:,.0f}/s)")
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"VACUUM ANALYZE {RoundMetrics._meta.db_table}")

        def count_all():
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT COUNT(*) FROM {RoundMetrics._meta.db_table}")
                return cursor.fetchone()[0]

        _, count_seconds = timed("baseline SELECT COUNT(*)", count_all)
        _, direct_seconds = timed(
            "without rollups: GROUP BY arm, tier, round over every row", lambda: direct_group_by(campaign)
        )
        timed(
            "rollups built from the backlog (once; beat keeps them current afterwards)",
            rollups.refresh_rollups,
        )

        live_round = args.rounds - 1
        timed(
            f"round {live_round} arrives ({args.workers + len(runs)} rows)",
            lambda: insert(rows_for(campaign, nodes, runs, range(live_round, live_round + 1))),
        )
        payload_json, inprocess_seconds = timed(
            "dashboard load in process (incremental refresh + payload + JSON)",
            lambda: json.dumps(dashboard.dashboard_payload(Campaign.objects.get(pk=campaign.pk))),
        )
        series = json.loads(payload_json)["series"]["tiny-1m"]["swarm"]
        print(f"payload: {len(payload_json) / 1024:.0f} KiB, {len(series['round'])} points per series")

        with asgi_server(Path(settings.DATA_DIR) / "bench-daphne.log") as base:
            url = f"{base}/api/campaigns/{campaign.pk}/dashboard"
            http_seconds = []
            for _ in range(3):
                start = time.perf_counter()
                with urllib.request.urlopen(url, timeout=60) as response:
                    body = response.read()
                http_seconds.append(time.perf_counter() - start)
            http = min(http_seconds)
            print(
                f"dashboard load over HTTP (best of 3): {http:.3f} s ({len(body) / 1024:.0f} KiB); all: {[round(s, 3) for s in http_seconds]}"
            )
            latencies = asyncio.run(live_latency(base, campaign, secret, args.reports))
        print(
            f"live update, worker metrics report -> dashboard socket: p50 {percentile(latencies, 50) * 1000:.0f} ms, "
            f"max {max(latencies) * 1000:.0f} ms (n={len(latencies)})"
        )
        print(f"speed-up of rollups over the direct GROUP BY: {direct_seconds / inprocess_seconds:.1f}x")
        print(
            f"ratio_vs_count={http / count_seconds:.2f} (HTTP dashboard load / SELECT COUNT(*) of the same table)"
        )
        print(f"ratio_vs_budget={http / BUDGET_SECONDS:.3f} (HTTP dashboard load / the 2 s budget)")
    finally:
        if not args.keep:
            start = time.perf_counter()
            with connection.cursor() as cursor:
                for table, column in (
                    ("campaigns_roundaggregate", "campaign_id"),
                    ("campaigns_agentblock", "campaign_id"),
                    ("campaigns_roundmetrics", "campaign_id"),
                ):
                    cursor.execute(f"DELETE FROM {table} WHERE {column} = %s", [campaign.pk])
            Campaign.objects.filter(pk=campaign.pk).delete()
            print(f"(bench campaign deleted in {time.perf_counter() - start:.1f} s)")
            if connection.vendor == "sqlite" and not os.environ.get("DATABASE_URL"):
                connection.close()
                shutil.rmtree(settings.DATA_DIR, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
