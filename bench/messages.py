"""Where a round's server CPU goes: daphne and PostgreSQL CPU per message type.

One simulated worker (bench/coordinator.py's cheap client) does ``--rounds`` whole rounds in
sequence against one real daphne process on the configured database: lease, submit 8 x 8,
sample J = 4, metrics, and two heartbeats (the protocol's pace: a 30 s round whose requests are
answered within its first second, then a heartbeat after each 10 s without an answered request,
worker/client/connection.py; the third would fall on the next round's lease). The server side's CPU (daphne + PostgreSQL processes, /proc through psutil) is
read around every request and summed per type. /proc counts in clock ticks (10 ms), so a single
request's figure is 0 or a tick; summed over a few hundred requests the mean is what matters.
What the server side spends while idle (daphne's timers, PostgreSQL's background processes) is
measured first, over ``--idle-seconds``, and that rate times each request's wall time is
subtracted: one request at a time, the background would otherwise be charged to the requests.

The baseline, in the same run and on the same server: the bare echo endpoint, sent frames of
each type's request size as many times (``echo_ms``: what the transport alone costs for such a
frame). Each type's line:

    message=submit n=150 daphne_ms=... postgres_ms=... echo_ms=... ratio=...

where ratio = echo_ms / (daphne_ms + postgres_ms): the share of that message's server CPU that
the websocket transport of its frame alone would need (1.0 would mean the coordinator's own work
is free). Then one line for a round: ``round server_ms=... floor_ms=... floor_ratio=...`` with
bench/coordinator.py's floor measured in the same run (as bench/capacity.py's floor_ratio, but
with one client, so with no queueing, lock waits or busy replies in it). And a bound:
``transport_bound echo_ms=... floor_ratio_max=...``, where echo_ms is the echo of the round's six
frames and floor_ratio_max = floor_ms / (floor_ms + echo_ms): the floor_ratio of a coordinator
whose only work besides carrying its frames is the floor itself, the most this server allows.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench REDIS_URL=redis://127.0.0.1:6379/13 \
        SECRET_KEY=$(openssl rand -hex 32) .venv/bin/python bench/messages.py [--rounds 150]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import setup_django

ROUND = ["lease_request", "submit", "sample_request", "metrics", "heartbeat", "heartbeat"]


class Meter:
    """Server CPU (daphne, postgres) between two points, less the idle background's share."""

    def __init__(self, cpu, idle: dict[str, float]) -> None:
        self.cpu, self.idle = cpu, idle  # idle: CPU seconds per second of wall time, per kind

    def start(self) -> tuple[dict[str, float], float]:
        return self.cpu.sample(), time.perf_counter()

    def spent(self, started: tuple[dict[str, float], float]) -> dict[str, float]:
        before, at = started
        spent = type(self.cpu).spent(before, self.cpu.sample())
        wall = time.perf_counter() - at
        return {kind: spent[kind] - self.idle[kind] * wall for kind in spent}


def idle_rate(cpu, seconds: float) -> dict[str, float]:
    before, at = cpu.sample(), time.perf_counter()
    time.sleep(seconds)
    spent = type(cpu).spent(before, cpu.sample())
    return {kind: value / (time.perf_counter() - at) for kind, value in spent.items()}


async def measure(url: str, token: str, mix, rounds: int, meter: Meter) -> dict[str, dict[str, float]]:
    import websockets

    from bench.coordinator import hello_fields, rollouts_for

    totals = {kind: {"daphne": 0.0, "postgres": 0.0, "n": 0, "bytes": 0} for kind in dict.fromkeys(ROUND)}
    async with websockets.connect(url + "/ws/worker/", max_size=16 * 1024 * 1024) as ws:

        async def request(kind: str, **fields) -> dict:
            frame = msgspec.json.encode({"type": kind, "id": "1", **fields}).decode()
            started = meter.start()
            await ws.send(frame)
            reply = json.loads(await ws.recv())
            while "reply_to" not in reply:  # a push, not the reply
                reply = json.loads(await ws.recv())
            spent = meter.spent(started)
            total = totals[kind]
            total["daphne"] += spent["daphne"]
            total["postgres"] += spent["postgres"]
            total["n"] += 1
            total["bytes"] += len(frame.encode())
            return reply

        await ws.send(
            msgspec.json.encode({"type": "hello", "id": "1", **hello_fields(token, "messages-0")}).decode()
        )
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        await asyncio.sleep(1.0)
        for number in range(rounds):
            lease = await request("lease_request", round=number)
            assert lease["type"] == "lease", lease
            rollouts = rollouts_for(lease, "messages-0", mix)
            ack = await request(
                "submit", submission_id=f"m-{number}", lease_id=lease["lease_id"], rollouts=rollouts
            )
            assert ack["type"] == "submit_ack", ack
            assert (await request("sample_request", round=number, count=4))["type"] == "samples"
            assert (await request("metrics", round=number, metrics={"loss": 0.1}))["type"] == "metrics_ack"
            for _ in range(ROUND.count("heartbeat")):
                assert (await request("heartbeat"))["type"] == "heartbeat_ack"
    return totals


async def echo_ms(url: str, size: int, count: int, meter: Meter) -> float:
    """Server CPU per echo of a ``size``-byte text frame (milliseconds)."""
    import websockets

    payload = "x" * size
    spent_ms = 0.0
    async with websockets.connect(url + "/ws/echo/", max_size=16 * 1024 * 1024) as ws:
        for _ in range(count):
            started = meter.start()
            await ws.send(payload)
            await ws.recv()
            spent = meter.spent(started)
            spent_ms += 1000 * (spent["daphne"] + spent["postgres"])
    return spent_ms / count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="the background's measurement")
    args = parser.parse_args()
    setup_django()
    from django.db import connection

    from bench.coordinator import ServerCpu, floor, make_campaign
    from tests.servers import asgi_server

    with contextlib.redirect_stdout(sys.stderr):
        floor_ms = floor()
    campaign, token = make_campaign(f"bench-messages-{time.time():.0f}")
    cpu = ServerCpu(connection.vendor == "postgresql")
    with asgi_server(
        Path(tempfile.mkdtemp()) / "daphne.log",
        SWARM_BENCH_ECHO="1",
        WORKER_RATE_PER_SECOND="1000",
        WORKER_RATE_BURST="1000",
    ) as base:
        url = base.replace("http", "ws", 1)
        time.sleep(2.0)  # the server's start-up work done
        idle = idle_rate(cpu, args.idle_seconds)
        meter = Meter(cpu, idle)
        print(
            f"idle server CPU: daphne {100 * idle['daphne']:.1f}%, postgres {100 * idle['postgres']:.1f}% "
            "of a core (subtracted per request's wall time)"
        )
        totals = asyncio.run(measure(url, token, campaign.settings.mix, args.rounds, meter))
        round_ms = round_echo_ms = 0.0
        for kind, total in totals.items():
            n = total["n"]
            daphne_ms, postgres_ms = 1000 * total["daphne"] / n, 1000 * total["postgres"] / n
            echo = asyncio.run(echo_ms(url, int(total["bytes"] / n), n, meter))
            round_ms += ROUND.count(kind) * (daphne_ms + postgres_ms)
            round_echo_ms += ROUND.count(kind) * echo
            print(
                f"message={kind} n={n} bytes={total['bytes'] / n:.0f} daphne_ms={daphne_ms:.3f} "
                f"postgres_ms={postgres_ms:.3f} echo_ms={echo:.3f} ratio={echo / max(1e-9, daphne_ms + postgres_ms):.2f}"
            )
    print(f"round server_ms={round_ms:.2f} floor_ms={floor_ms:.2f} floor_ratio={floor_ms / round_ms:.2f}")
    # The best floor_ratio any coordinator could reach on this server with these messages: one
    # whose only work besides carrying the round's frames (their echo) is the floor itself.
    print(
        f"transport_bound echo_ms={round_echo_ms:.2f} "
        f"floor_ratio_max={floor_ms / (floor_ms + round_echo_ms):.2f}"
    )


if __name__ == "__main__":
    main()
