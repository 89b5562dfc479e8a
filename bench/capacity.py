"""How many volunteers one coordinator holds at the protocol's pace, and at what latency.

N simulated volunteers (bench/coordinator.py's cheap clients: canned, truthfully scored rollouts
of realistic size, no model) connect over real websockets to one real daphne process and each
does what a worker does: a round every ``--round-seconds`` (default 30 s: lease, submit 8
questions x G = 8, sample J = 4, metrics; with ``--protocol 2``, the default and the worker
client's, the draw comes with the submit's answer and the next lease with the metrics', so a
round is two requests) and a heartbeat once 10 s pass without an answered
request (the worker client's rule, worker/client/connection.py: two per such round; with
``--heartbeats fixed``, every 10 s whatever else was sent, as the client did before: three), each
volunteer starting at a random point of its period so that the offered load is flat
(N / round_seconds rounds a second). A ``busy`` answer is waited out as the worker client does
(``retry_after`` plus 0-50% jitter, same connection); a dropped connection reconnects, says
hello again and continues.

It prints one line per run:

    volunteers=N rounds_per_s=... (offered ...) ack_p50_ms=... ack_p99_ms=... lost=... doubled=...
        connected=...% busy=... floor_ratio=... pool_sampling=... admitted_p99_ms=... settle_s=... [servers=N]

* ``ack_*``: submit to submit_ack, in the steady window only, ``busy`` answers and their waits
  included; ``admitted_p99_ms``: the same acks' last try alone (from the frame sent to its ack:
  what an admitted request waits). The steady window starts once every volunteer is connected
  and has had a round acked (the start's backlog is through), at least a round and 5 s after the
  pass began: ``settle_s``, the seconds that took (the cost of N volunteers arriving within one
  round, as after a coordinator's restart);
* ``lost``: submissions acked to a client but not stored; ``doubled``: node rounds stored twice
  (both read from the database after the run);
* ``connected``: volunteers connected at the end over N;
* ``floor_ratio``: bench/coordinator.py's floor (the irreducible server CPU of one round,
  measured in this run) over the measured server CPU per acked round (daphne + PostgreSQL
  processes, from /proc); 1.0 would be the limit.

With ``--echo``, each run's coordinator pass is followed by an echo pass on the same server (the
same number of volunteers at the same pace send the same frames, the coordinator pass's mean size
per request type, to the bare echo endpoint) and then by a second coordinator pass (new
volunteers of the same campaign): the echo falls between two coordinator passes, whose figures
are reported together (each pass's CPU per round is printed too), so that a drift of the
machine's speed within the run weighs on both sides of ``server_per_echo``. It prints

    echo volunteers=N rounds_per_s=... connected=...% server_ms_per_round=... floor_ratio_max=...
        server_per_echo=...

where floor_ratio_max = floor / (floor + the echo's server CPU per round): the floor_ratio of a
coordinator whose only work besides carrying its frames were the floor, the most this server
allows at this pace; and server_per_echo = the coordinator's server CPU per round over the
echo's (the same protocol's request frames, echoed), the multiple of bare transport it costs.

With ``--pool-sampling celery`` the draws run on a Celery worker of the default queue (the
setting ``POOL_SAMPLING=celery``, started as platform/Procfile starts it; its CPU counts as the
server's); ``--pool-sampling both`` runs the inline coordinator, then the Celery one, and prints

    pool_sampling volunteers=N ratio=... (server CPU per round, celery over inline) ...

With ``--servers N`` the coordinator is N daphne processes sharing one listening port
(tests/servers.py ``asgi_servers``: each accepted connection goes to one of them), the one-box
form of docs/deploy.md's "Scaling out"; their CPU is summed as the server's.

Client and server share the machine: the clients' own CPU (one process, asyncio) is printed too,
and what else ran should be said beside any figure.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/swarm_bench REDIS_URL=redis://127.0.0.1:6379/13 \
        SECRET_KEY=$(openssl rand -hex 32) .venv/bin/python bench/capacity.py --volunteers 1000 [--seconds 120] \
        [--round-seconds 30] [--volunteers 3000 ...] [--echo] [--pool-sampling both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._django import percentile, setup_django

HEARTBEAT_SECONDS = 10.0
CELERY_PROCESSES = 2  # the default queue's worker with POOL_SAMPLING=celery: Celery's default, one per core
REPLY_SECONDS = 60.0  # a client waits this long for a reply before it reconnects


@dataclass
class Tally:
    acks: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds) of each ack
    admitted: list[tuple[float, float]] = field(
        default_factory=list
    )  # (when, seconds) of each ack's last try
    acked_ids: set[str] = field(default_factory=set)
    busy: int = 0
    reconnects: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    connected: int = 0
    frame_bytes: dict[str, list[int]] = field(default_factory=dict)  # request type: [total, count]
    reported: list[tuple[float, int]] = field(default_factory=list)  # (when, round) of each metrics_ack
    nodes_acked: set[str] = field(default_factory=set)  # volunteers with at least one round acked


async def exchange(ws, lock: asyncio.Lock, tally: Tally, kind: str, fields: dict) -> dict:
    """One request and its reply, ``busy`` waited out as the worker client does."""
    frame = msgspec.json.encode({"type": kind, "id": "1", **fields}).decode()
    sizes = tally.frame_bytes.setdefault(kind, [0, 0])
    sizes[0] += len(frame.encode())
    sizes[1] += 1
    while True:
        async with lock:
            sent = time.perf_counter()
            await ws.send(frame)
            reply = json.loads(await asyncio.wait_for(ws.recv(), REPLY_SECONDS))
            while "reply_to" not in reply:  # a push (campaign_state): not the reply
                reply = json.loads(await asyncio.wait_for(ws.recv(), REPLY_SECONDS))
        if reply.get("type") == "error" and reply.get("code") == "busy":
            tally.busy += 1
            await asyncio.sleep(float(reply["data"]["retry_after"]) * random.uniform(1.0, 1.5))
            continue
        if kind == "submit" and reply.get("type") == "submit_ack":
            tally.admitted.append((time.monotonic(), time.perf_counter() - sent))
        return reply


async def heartbeats(send, answered: list[float], fixed: bool) -> None:
    """A volunteer's heartbeats: once HEARTBEAT_SECONDS pass without an answered request (the
    worker client's rule), or every HEARTBEAT_SECONDS whatever else was sent (``fixed``)."""
    while True:
        quiet = time.monotonic() - answered[0]
        if fixed or quiet >= HEARTBEAT_SECONDS:
            await asyncio.sleep(HEARTBEAT_SECONDS if fixed else 0)
            await send()
        else:  # none while requests are answered
            await asyncio.sleep(HEARTBEAT_SECONDS - quiet)


async def volunteer(
    url: str,
    token: str,
    node_id: str,
    mix,
    round_seconds: float,
    until: float,
    tally: Tally,
    heartbeats_fixed: bool = False,
    version: int = 2,
) -> None:
    import websockets

    from bench.coordinator import hello_fields, rollouts_for

    hello = hello_fields(token, node_id, version)
    await asyncio.sleep(random.uniform(0, round_seconds))  # a flat offered load
    round = 0
    next_round = time.monotonic()
    while time.monotonic() < until:
        try:
            async with websockets.connect(
                url + "/ws/worker/", max_size=16 * 1024 * 1024, open_timeout=60
            ) as ws:
                lock = asyncio.Lock()
                answered = [time.monotonic()]  # when a request of this connection was last answered

                async def request(kind: str, ws=ws, lock=lock, answered=answered, **fields) -> dict:
                    reply = await exchange(ws, lock, tally, kind, fields)
                    answered[0] = time.monotonic()
                    return reply

                welcome = await request("hello", **hello)
                if welcome["type"] != "welcome":
                    raise RuntimeError(f"hello: {welcome}")
                round = max(round, welcome["resume_round"])
                held = None  # protocol 2: the next round's lease, from the metrics' answer
                tally.connected += 1
                try:
                    beating = asyncio.ensure_future(
                        heartbeats(lambda request=request: request("heartbeat"), answered, heartbeats_fixed)
                    )
                    try:
                        while time.monotonic() < until:
                            await asyncio.sleep(max(0.0, next_round - time.monotonic()))
                            next_round += round_seconds
                            lease = held if held and held["round"] == round else None
                            lease = lease or await request("lease_request", round=round)
                            if lease["type"] == "error" and lease["code"] == "round_submitted":
                                await request("metrics", round=round, metrics={"resumed_submitted": 1.0})
                                round += 1
                                continue
                            if lease["type"] != "lease":
                                raise RuntimeError(f"lease: {lease}")
                            submission_id = f"{node_id}-{round}"
                            rollouts = rollouts_for(lease, node_id, mix)
                            start = time.perf_counter()
                            ack = await request(
                                "submit",
                                submission_id=submission_id,
                                lease_id=lease["lease_id"],
                                rollouts=rollouts,
                            )
                            if ack["type"] == "error" and ack["code"] == "duplicate_submission":
                                ack = {"type": "submit_ack"}  # stored before a reconnect
                            if ack["type"] != "submit_ack":
                                raise RuntimeError(f"submit: {ack}")
                            tally.acks.append((time.monotonic(), time.perf_counter() - start))
                            tally.acked_ids.add(submission_id)
                            tally.nodes_acked.add(node_id)
                            if "samples" not in ack:  # protocol 1, or a replayed submission
                                await request("sample_request", round=round, count=4)
                            reported = await request(
                                "metrics", round=round, metrics={"loss": 0.1, "reward": 0.5}
                            )
                            if reported.get("type") == "metrics_ack":
                                tally.reported.append((time.monotonic(), round))
                            held = reported.get("next_lease")
                            round += 1
                    finally:
                        beating.cancel()
                finally:
                    tally.connected -= 1
        except Exception as error:  # a dropped or timed-out connection: reconnect, as a worker does
            kind = type(error).__name__
            tally.errors[kind] = tally.errors.get(kind, 0) + 1
            tally.reconnects += 1
            await asyncio.sleep(random.uniform(0.5, 2.0))


# --- viewers: dashboard sockets (--viewers) --------------------------------------------------

VIEWER_GRACE_SECONDS = (
    5.0  # a viewer keeps recording this long after the window: a point up to 5 s late is late, not missed
)
VIEWER_WATCH_EVERY = 10  # every 10th viewer watches one volunteer's curve (a per-viewer part of the frame)


class _Round(msgspec.Struct):
    round: int


class _ViewerFrame(msgspec.Struct):
    """What a viewer keeps of a server frame: its type and the rounds of a points frame (every
    other field is skipped by the decoder, as a page would ignore what it does not draw)."""

    type: str
    points: list[_Round] = []


async def dashboard_viewer(
    url: str, origin: str, campaign_id: int, watch: str | None, record: list, state: dict
) -> None:
    """One campaign page's socket: opens ``/ws/campaigns/<id>/`` as the page does (same origin),
    sends a ``watch`` if given, then reads every frame, recording for each points frame its
    receive time and the rounds it carries."""
    import websockets

    decoder = msgspec.json.Decoder(_ViewerFrame)
    async with websockets.connect(
        f"{url}/ws/campaigns/{campaign_id}/", origin=origin, max_size=64 * 1024 * 1024, open_timeout=120
    ) as ws:
        if watch:
            await ws.send(json.dumps({"type": "watch", "agents": [watch]}))
        state["open"] += 1
        try:
            async for raw in ws:
                at = time.monotonic()
                frame = decoder.decode(raw)
                state["frames"][frame.type] = state["frames"].get(frame.type, 0) + 1
                if frame.type == "points":
                    record.append((at, sorted({p.round for p in frame.points})))
        finally:
            state["open"] -= 1


def viewers_process(url: str, origin: str, campaign_id: int, viewers: int, volunteers: int, conn) -> None:
    """The viewers' own process (the volunteers' clients run in the bench's): opens ``viewers``
    sockets, says so, gets the window (start, end) on the shared monotonic clock, records until
    end + VIEWER_GRACE_SECONDS, and sends back per viewer its points frames, the number of sockets
    still open at the window's end, the frame counts and its own CPU seconds within the window."""

    async def main() -> dict:
        loop = asyncio.get_running_loop()
        records: list[list] = [[] for _ in range(viewers)]
        state = {"open": 0, "frames": {}}
        tasks = []
        for i in range(viewers):
            watch = f"node:v{i % max(1, volunteers)}" if i % VIEWER_WATCH_EVERY == 0 else None
            tasks.append(
                asyncio.ensure_future(dashboard_viewer(url, origin, campaign_id, watch, records[i], state))
            )
            if i % 50 == 49:
                await asyncio.sleep(0.2)  # 50 pages at a time, not one burst of handshakes
        deadline = time.monotonic() + 120
        while state["open"] < viewers and time.monotonic() < deadline:
            if all(task.done() for task in tasks):
                break
            await asyncio.sleep(0.1)
        conn.send(state["open"])
        start, end = await loop.run_in_executor(None, conn.recv)
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        before = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        after = resource.getrusage(resource.RUSAGE_SELF)
        still_open = state["open"]
        await asyncio.sleep(VIEWER_GRACE_SECONDS)
        await stop(tasks)
        failures = [
            type(r).__name__
            for r in await asyncio.gather(*tasks, return_exceptions=True)
            if isinstance(r, Exception) and not isinstance(r, asyncio.CancelledError)
        ]
        return {
            "records": records,
            "open": still_open,
            "frames": state["frames"],
            "failures": failures,
            "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        }

    conn.send(asyncio.run(main()))


def point_latencies(
    reported: list[tuple[float, int]], records: list[list], end: float
) -> tuple[list[float], int]:
    """Per viewer and per metrics_ack (when, round) in the window: the time from the ack to the
    first points frame received at or after it that carries that round; missed: pairs with no
    such frame by ``end``."""
    import bisect

    latencies: list[float] = []
    missed = 0
    for frames in records:
        by_round: dict[int, list[float]] = {}
        for at, rounds in frames:
            for number in rounds:
                by_round.setdefault(number, []).append(at)  # frames arrive in order: sorted
        for when, number in reported:
            times = by_round.get(number, [])
            i = bisect.bisect_left(times, when)
            if i < len(times) and times[i] <= end:
                latencies.append(times[i] - when)
            else:
                missed += 1
    return latencies, missed


# A round's requests by protocol version (worker/shared/protocol.py): version 2 folds the draw
# into the submit's answer and the next lease into the metrics'.
ROUND_REQUESTS = {1: ("lease_request", "submit", "sample_request", "metrics"), 2: ("submit", "metrics")}


async def echo_volunteer(
    url: str,
    sizes: dict[str, int],
    round_seconds: float,
    until: float,
    tally: Tally,
    heartbeats_fixed: bool,
    version: int = 2,
) -> None:
    """A volunteer's pace and frames against the bare echo: each round the protocol's requests'
    frames (of the coordinator pass's mean sizes) one after another, each waiting for its echo,
    and the same heartbeat rule. What carrying a round costs this server before any work is done
    (an echo answers with the request's bytes: a version-2 answer that carries a draw or a lease
    is larger than that)."""
    import websockets

    frames = {kind: "x" * size for kind, size in sizes.items()}
    await asyncio.sleep(random.uniform(0, round_seconds))
    next_round = time.monotonic()
    async with websockets.connect(url + "/ws/echo/", max_size=16 * 1024 * 1024, open_timeout=60) as ws:
        lock = asyncio.Lock()
        answered = [time.monotonic()]

        async def echo(kind: str) -> None:
            async with lock:
                await ws.send(frames[kind])
                await asyncio.wait_for(ws.recv(), REPLY_SECONDS)
            answered[0] = time.monotonic()

        tally.connected += 1
        beating = asyncio.ensure_future(heartbeats(lambda: echo("heartbeat"), answered, heartbeats_fixed))
        try:
            while time.monotonic() < until:
                await asyncio.sleep(max(0.0, next_round - time.monotonic()))
                next_round += round_seconds
                start = time.perf_counter()
                for kind in ROUND_REQUESTS[version]:
                    await echo(kind)
                tally.acks.append((time.monotonic(), time.perf_counter() - start))
        finally:
            beating.cancel()
            tally.connected -= 1


TIMELINE_SECONDS = 10.0


async def sample_timeline(cpu, timeline: list[tuple[float, dict[str, float]]]) -> None:
    """The server's CPU seconds by process every TIMELINE_SECONDS, from the pass's start."""
    while True:
        timeline.append((time.monotonic(), cpu.sample()))
        await asyncio.sleep(TIMELINE_SECONDS)


def print_timeline(timeline: list[tuple[float, dict[str, float]]], tally: Tally, window: float) -> None:
    """Per TIMELINE_SECONDS of a pass, ramp included: acks, their p99, and the cores the daphne
    and PostgreSQL processes used; the steady window starts at ``window``."""
    from bench.coordinator import ServerCpu

    cells = []
    for (start, before), (end, after) in itertools.pairwise(timeline):
        acks = [s for at, s in tally.acks if start <= at < end]
        spent = ServerCpu.spent(before, after)
        mark = "*" if start >= window - 1.0 else ""
        cells.append(
            f"{mark}{start - timeline[0][0]:.0f}s: {len(acks)} acks p99 "
            f"{1000 * percentile(acks, 99) if acks else 0:.0f} ms, daphne {spent['daphne'] / (end - start):.2f} "
            f"pg {spent['postgres'] / (end - start):.2f} cores"
        )
    print("  timeline (* in the steady window): " + "; ".join(cells))


SETTLE_LIMIT = 300.0  # the longest a pass waits past its ramp for every volunteer's first ack


async def phase(
    cpu,
    coroutines,
    ramp: float,
    seconds: float,
    tally: Tally,
    timeline: list | None = None,
    settle: bool = False,
) -> tuple[dict, int, float, float]:
    """Run the volunteers; after ``ramp`` (and with ``settle``, once every volunteer is connected
    and has had a round acked: the ramp's backlog is through, at most SETTLE_LIMIT more seconds)
    measure ``seconds``: server CPU spent, volunteers connected at the end, the window's start,
    the clients' own CPU seconds. With ``timeline``, the server's CPU is sampled into it
    throughout (print_timeline)."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    volunteers = len(tasks)
    if timeline is not None:
        tasks.append(asyncio.ensure_future(sample_timeline(cpu, timeline)))
    await asyncio.sleep(ramp)
    limit = time.monotonic() + SETTLE_LIMIT
    while settle and time.monotonic() < limit:
        if tally.connected >= volunteers and len(tally.nodes_acked) >= volunteers:
            break
        await asyncio.sleep(0.5)
    before, client_before, started = (
        cpu.sample(),
        resource.getrusage(resource.RUSAGE_SELF),
        time.monotonic(),
    )
    await asyncio.sleep(seconds)
    after, client_after = cpu.sample(), resource.getrusage(resource.RUSAGE_SELF)
    connected = tally.connected
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    client_cpu = (client_after.ru_utime + client_after.ru_stime) - (
        client_before.ru_utime + client_before.ru_stime
    )
    return type(cpu).spent(before, after), connected, started, client_cpu


def lost_and_doubled(campaign, tally: Tally) -> tuple[int, int]:
    """Submissions acked to a client but not stored, and node rounds stored twice (read from the
    database after the run)."""
    from swarm_app.coordinator.models import Lease

    stored = Lease.objects.filter(campaign=campaign, state=Lease.State.SUBMITTED)
    lost = len(tally.acked_ids - set(stored.values_list("submission_id", flat=True)))
    per_round = list(stored.values_list("node_id", "round"))
    return lost, len(per_round) - len(set(per_round))


def run(
    volunteers: int,
    seconds: float,
    round_seconds: float,
    round_floor_ms: float,
    heartbeats_fixed: bool = False,
    echo: bool = False,
    version: int = 2,
    pool_sampling: str = "inline",
    servers: int = 1,
) -> dict:
    from django.db import connection

    from bench.coordinator import ServerCpu, make_campaign
    from tests.servers import asgi_server, asgi_servers, celery_worker

    campaign, token = make_campaign(f"bench-capacity-{volunteers}-{pool_sampling}")
    mix = campaign.settings.mix
    cpu = ServerCpu(connection.vendor == "postgresql")
    tally = Tally()
    ramp = round_seconds + 5  # every volunteer has started its first round
    logs = Path(tempfile.mkdtemp())
    with contextlib.ExitStack() as stack:
        if pool_sampling == "celery":  # the default queue's worker as platform/Procfile runs it
            stack.enter_context(celery_worker(logs / "celery.log", processes=CELERY_PROCESSES))
        server_env = {
            # the per-connection rate limit is far above a volunteer's pace; the bench measures capacity
            "WORKER_RATE_PER_SECOND": "1000",
            "WORKER_RATE_BURST": "1000",
            "POOL_SAMPLING": pool_sampling,
            **({"SWARM_BENCH_ECHO": "1"} if echo else {}),
        }
        base = stack.enter_context(
            asgi_server(logs / "daphne.log", **server_env)
            if servers == 1
            else asgi_servers(logs, servers, **server_env)
        )
        url = base.replace("http", "ws", 1)

        timeline: list = []

        def coordinator_pass(
            prefix: str, counted: Tally, timeline: list | None = None
        ) -> tuple[dict, int, float, float]:
            """``volunteers`` volunteers named ``prefix``0, 1, ... through one phase."""
            until = (
                time.monotonic() + ramp + SETTLE_LIMIT + seconds + round_seconds
            )  # cancelled after the window
            return asyncio.run(
                phase(
                    cpu,
                    [
                        volunteer(
                            url,
                            token,
                            f"{prefix}{i}",
                            mix,
                            round_seconds,
                            until,
                            counted,
                            heartbeats_fixed,
                            version,
                        )
                        for i in range(volunteers)
                    ],
                    ramp,
                    seconds,
                    counted,
                    timeline,
                    settle=True,
                )
            )

        begun = time.monotonic()
        spent, connected, started, client_cpu = coordinator_pass("v", tally, timeline)
        if echo:
            sizes = {kind: total // max(1, n) for kind, (total, n) in tally.frame_bytes.items()}
            echo_tally = Tally()
            until = time.monotonic() + ramp + seconds + round_seconds
            echo_spent, echo_connected, echo_started, _ = asyncio.run(
                phase(
                    cpu,
                    [
                        echo_volunteer(
                            url, sizes, round_seconds, until, echo_tally, heartbeats_fixed, version
                        )
                        for _ in range(volunteers)
                    ],
                    ramp,
                    seconds,
                    echo_tally,
                )
            )
            # The coordinator again, new volunteers of the same campaign: the echo falls between
            # two coordinator passes, so that a drift of the machine's speed (1.5x within minutes
            # was seen, docs/coordinator-bench.md) weighs on both sides of server_per_echo alike.
            again = Tally()
            spent_again, connected_again, started_again, _ = coordinator_pass("w", again)

    passes = [(tally, started, spent)]
    if echo:
        passes.append((again, started_again, spent_again))
        connected = min(connected, connected_again)
        tally.busy += again.busy
        tally.reconnects += again.reconnects
        for code, n in again.errors.items():
            tally.errors[code] = tally.errors.get(code, 0) + n
        tally.acked_ids |= again.acked_ids
    per_pass = []
    admitted = []
    for one, start, cost in passes:
        rounds = [s for at, s in one.acks if start <= at <= start + seconds]
        per_pass.append((rounds, cost))
        admitted += [s for at, s in one.admitted if start <= at <= start + seconds]
    spent = {key: sum(cost[key] for _, cost in per_pass) for key in ("daphne", "postgres", "celery")}
    latencies = [s for rounds, _ in per_pass for s in rounds]
    rounds_per_s = len(latencies) / (seconds * len(per_pass))
    lost, doubled = lost_and_doubled(campaign, tally)
    server_ms = 1000 * sum(spent.values()) / max(1, len(latencies))
    result = {
        "pool_sampling": pool_sampling,
        "server_ms_per_round": server_ms,
        "protocol": version,
        "volunteers": volunteers,
        "rounds_per_s": rounds_per_s,
        "offered": volunteers / round_seconds,
        "ack_p50_ms": 1000 * percentile(latencies, 50),
        "ack_p99_ms": 1000 * percentile(latencies, 99),
        "admitted_p99_ms": 1000 * percentile(admitted, 99),
        "settle_s": started - begun,
        "lost": lost,
        "doubled": doubled,
        "connected": 100 * connected / volunteers,
        "busy": tally.busy,
        "floor_ratio": round_floor_ms / server_ms if latencies else 0.0,
    }
    print(
        f"protocol={version} volunteers={volunteers} rounds_per_s={rounds_per_s:.1f} (offered {result['offered']:.1f}) "
        f"ack_p50_ms={result['ack_p50_ms']:.0f} ack_p99_ms={result['ack_p99_ms']:.0f} lost={lost} "
        f"doubled={doubled} connected={result['connected']:.1f}% busy={tally.busy} "
        f"floor_ratio={result['floor_ratio']:.2f} pool_sampling={pool_sampling} "
        f"admitted_p99_ms={result['admitted_p99_ms']:.0f} settle_s={result['settle_s']:.0f}"
        + (f" servers={servers}" if servers > 1 else "")
    )
    print(
        f"  server CPU per round {server_ms:.2f} ms (daphne {1000 * spent['daphne'] / max(1, len(latencies)):.2f}, "
        f"postgres {1000 * spent['postgres'] / max(1, len(latencies)):.2f}, "
        f"celery {1000 * spent['celery'] / max(1, len(latencies)):.2f}); floor {round_floor_ms:.2f} ms; "
        f"clients' CPU {client_cpu / seconds * 100:.0f}% of a core; reconnects {tally.reconnects} {tally.errors}"
    )
    print_timeline(timeline, tally, started)
    if echo:
        before_echo, after_echo = (
            1000 * sum(cost.values()) / max(1, len(rounds)) for rounds, cost in per_pass
        )
        print(
            f"  coordinator passes before and after the echo: {before_echo:.2f} and {after_echo:.2f} ms "
            "per round (the figures above are both together)"
        )
        echo_rounds = [at for at, _ in echo_tally.acks if echo_started <= at <= echo_started + seconds]
        echo_ms = 1000 * (echo_spent["daphne"] + echo_spent["postgres"]) / max(1, len(echo_rounds))
        result["echo_ms"] = echo_ms
        result["floor_ratio_max"] = round_floor_ms / (round_floor_ms + echo_ms)
        result["server_per_echo"] = server_ms / echo_ms if echo_ms else 0.0
        print(
            f"echo volunteers={volunteers} rounds_per_s={len(echo_rounds) / seconds:.1f} "
            f"connected={100 * echo_connected / volunteers:.1f}% server_ms_per_round={echo_ms:.2f} "
            f"floor_ratio_max={result['floor_ratio_max']:.2f} server_per_echo={result['server_per_echo']:.2f}"
        )
        per_echo_round = 1000 / max(1, len(echo_rounds))
        print(
            f"  echo's server CPU per round: daphne {echo_spent['daphne'] * per_echo_round:.2f} ms, postgres "
            f"{echo_spent['postgres'] * per_echo_round:.2f} ms (PostgreSQL's is background work only)"
        )
        print(
            "  the same pace and frame sizes ("
            + ", ".join(f"{k} {v} B" for k, v in sizes.items())
            + ") against the bare echo on the same server: floor_ratio_max = floor / (floor + the echo's "
            "server CPU per round), the floor_ratio of a coordinator whose only work besides carrying "
            "its frames is the floor"
        )
    return result


async def stop(tasks: list[asyncio.Task]) -> None:
    """Cancel the tasks, again while some still run: Python 3.11's wait_for can swallow a
    cancellation that comes as its inner wait completes (a volunteer would go on)."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)


def viewers_run(
    volunteers: int,
    viewers: int,
    seconds: float,
    round_seconds: float,
    round_floor_ms: float,
    heartbeats_fixed: bool = False,
    version: int = 2,
) -> dict:
    """``volunteers`` volunteers on one campaign through two steady windows of ``seconds``: the
    first alone, the second with ``viewers`` dashboard sockets open on the campaign (opened in a
    second process between the windows). Prints the viewers' line and the volunteers' usual line
    (of the second window)."""
    import multiprocessing

    from django.db import connection

    from bench.coordinator import ServerCpu, make_campaign
    from swarm_app.campaigns.rollups import refresh_rollups
    from tests.servers import asgi_server

    # What beat does in a deployment (none runs here): earlier runs' reports rolled up, so that
    # the pages' incremental refresh is not refused as a backlog past COLD_ROWS (rollups.py).
    refresh_rollups(rebuild=True)
    campaign, token = make_campaign(f"bench-viewers-{volunteers}-{viewers}")
    mix = campaign.settings.mix
    cpu = ServerCpu(connection.vendor == "postgresql")
    tally = Tally()
    ramp = round_seconds + 5  # every volunteer has started its first round
    logs = Path(tempfile.mkdtemp())
    spawn = multiprocessing.get_context("spawn")

    async def window() -> tuple[dict, float, float, float]:
        """One steady window: server CPU spent, the bench process's CPU seconds, start, end."""
        before, client_before, start = (
            cpu.sample(),
            resource.getrusage(resource.RUSAGE_SELF),
            time.monotonic(),
        )
        await asyncio.sleep(seconds)
        after, client_after, end = cpu.sample(), resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        client = (client_after.ru_utime + client_after.ru_stime) - (
            client_before.ru_utime + client_before.ru_stime
        )
        return type(cpu).spent(before, after), client, start, end

    with asgi_server(logs / "daphne.log", WORKER_RATE_PER_SECOND="1000", WORKER_RATE_BURST="1000") as base:
        url = base.replace("http", "ws", 1)

        async def main() -> tuple:
            loop = asyncio.get_running_loop()
            until = time.monotonic() + ramp + 2 * seconds + 300  # cancelled after the second window
            tasks = [
                asyncio.ensure_future(
                    volunteer(
                        url, token, f"v{i}", mix, round_seconds, until, tally, heartbeats_fixed, version
                    )
                )
                for i in range(volunteers)
            ]
            await asyncio.sleep(ramp)
            alone = await window()
            ours, theirs = spawn.Pipe()
            process = spawn.Process(
                target=viewers_process,
                args=(url, base, campaign.pk, viewers, volunteers, theirs),
                daemon=True,
            )
            process.start()
            theirs.close()  # the child's end: a child that dies ends our recv with EOFError

            def answer(timeout: float):
                if not ours.poll(timeout):
                    raise TimeoutError(f"the viewers' process did not answer within {timeout:.0f} s")
                return ours.recv()

            opened = await loop.run_in_executor(None, answer, 180.0)
            print(f"  {opened} of {viewers} viewers open", file=sys.stderr)
            start = time.monotonic() + 5.0  # the pages have had their first tables
            ours.send((start, start + seconds))
            await asyncio.sleep(start - time.monotonic())
            watched = await window()
            connected = tally.connected
            await stop(tasks)
            seen = await loop.run_in_executor(None, answer, VIEWER_GRACE_SECONDS + 120.0)
            process.join(10)
            return alone, watched, connected, opened, seen

        alone, watched, connected, opened, seen = asyncio.run(main())

    def acked(start: float, end: float) -> list[float]:
        return [s for at, s in tally.acks if start <= at <= end]

    spent_alone, _, start_alone, end_alone = alone
    spent, client_cpu, start, end = watched
    latencies, latencies_alone = acked(start, end), acked(start_alone, end_alone)
    reported = [(at, number) for at, number in tally.reported if start <= at <= end]
    points, missed = point_latencies(reported, seen["records"], end + VIEWER_GRACE_SECONDS)
    lost, doubled = lost_and_doubled(campaign, tally)
    extra = sum(spent.values()) - sum(spent_alone.values())
    result = {
        "viewers": viewers,
        "volunteers": volunteers,
        "point_p50_ms": 1000 * percentile(points, 50),
        "point_p99_ms": 1000 * percentile(points, 99),
        "point_max_ms": 1000 * max(points, default=float("nan")),
        "missed": missed,
        "ack_p50_ms": 1000 * percentile(latencies, 50),
        "ack_p99_ms": 1000 * percentile(latencies, 99),
        "ack_p99_ms_alone": 1000 * percentile(latencies_alone, 99),
        "server_ms_per_viewer_second": 1000 * extra / max(1, viewers * seconds),
        # daphne's alone: PostgreSQL's processes are the whole server's (others' too on a shared box)
        "daphne_ms_per_viewer_second": 1000
        * (spent["daphne"] - spent_alone["daphne"])
        / max(1, viewers * seconds),
        "rounds_per_s": len(latencies) / seconds,
    }
    print(
        f"viewers={viewers} volunteers={volunteers} point_p50_ms={result['point_p50_ms']:.0f} "
        f"point_p99_ms={result['point_p99_ms']:.0f} missed={missed} ack_p99_ms={result['ack_p99_ms']:.0f} "
        f"server_ms_per_viewer_second={result['server_ms_per_viewer_second']:.2f} "
        f"daphne_ms_per_viewer_second={result['daphne_ms_per_viewer_second']:.2f}"
    )
    print(
        f"  points: {len(points)} (report, viewer) pairs, max {result['point_max_ms']:.0f} ms, missed {missed} of "
        f"{len(points) + missed}; sockets open {opened} at the start, {seen['open']} at the end of {viewers}; "
        f"frames received {seen['frames']}; viewer failures {len(seen['failures'])} {sorted(set(seen['failures']))}"
    )
    print(
        f"  server CPU: {sum(spent.values()):.1f} s with viewers (daphne {spent['daphne']:.1f}, postgres "
        f"{spent['postgres']:.1f}), {sum(spent_alone.values()):.1f} s without (daphne {spent_alone['daphne']:.1f}, "
        f"postgres {spent_alone['postgres']:.1f}) over {seconds:.0f} s windows; volunteers' ack p99 without "
        f"viewers {result['ack_p99_ms_alone']:.0f} ms; clients' CPU: volunteers {client_cpu / seconds * 100:.0f}% "
        f"of a core (bench process), viewers {seen['cpu'] / seconds * 100:.0f}% (their own process)"
    )
    print(
        f"protocol={version} volunteers={volunteers} rounds_per_s={result['rounds_per_s']:.1f} "
        f"(offered {volunteers / round_seconds:.1f}) ack_p50_ms={result['ack_p50_ms']:.0f} "
        f"ack_p99_ms={result['ack_p99_ms']:.0f} lost={lost} doubled={doubled} "
        f"connected={100 * connected / volunteers:.1f}% busy={tally.busy} "
        f"floor_ratio={round_floor_ms / (1000 * sum(spent.values()) / max(1, len(latencies))):.2f} pool_sampling=inline"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--volunteers", type=int, action="append", help="repeat for several runs (default 1000)"
    )
    parser.add_argument("--seconds", type=float, default=120.0, help="steady window per run")
    parser.add_argument("--round-seconds", type=float, default=30.0, help="a volunteer's round period")
    parser.add_argument(
        "--heartbeats",
        choices=["client", "fixed"],
        default="client",
        help="client: after 10 s without an answered request (the worker client's rule, default); "
        "fixed: every 10 s whatever else was sent (the client before issue #15's second pass)",
    )
    parser.add_argument(
        "--echo",
        action="store_true",
        help="after each run, the same volunteers' frames against the bare echo on the same server "
        "(prints floor_ratio_max: what the transport alone leaves)",
    )
    parser.add_argument(
        "--protocol",
        type=int,
        choices=[1, 2],
        default=2,
        help="the volunteers' protocol version: 2 (the worker client's: a round is submit and metrics) "
        "or 1 (lease_request, submit, sample_request, metrics)",
    )
    parser.add_argument(
        "--pool-sampling",
        choices=["inline", "celery", "both"],
        default="inline",
        help="where the pool's draws run (settings.POOL_SAMPLING): inline in daphne (the default), on "
        f"a Celery worker of the default queue ({CELERY_PROCESSES} processes, counted as server CPU), or "
        "both, one after the other, printing ratio= celery's server CPU per round over inline's",
    )
    parser.add_argument(
        "--viewers",
        type=int,
        default=0,
        help="N > 0: after a steady window of the volunteers alone, N dashboard sockets on their "
        "campaign (a second process) and a second window; prints viewers=N ... point_p99_ms= ... "
        "server_ms_per_viewer_second=",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=1,
        help="daphne processes sharing the coordinator's one port (tests/servers.py asgi_servers: "
        "the kernel hands each connection to one of them); default 1",
    )
    args = parser.parse_args()
    setup_django()
    from bench.coordinator import floor

    with contextlib.redirect_stdout(sys.stderr):
        round_floor = floor()
    if args.viewers:
        for volunteers in args.volunteers or [1000]:
            viewers_run(
                volunteers,
                args.viewers,
                args.seconds,
                args.round_seconds,
                round_floor,
                args.heartbeats == "fixed",
                args.protocol,
            )
        return
    modes = ["inline", "celery"] if args.pool_sampling == "both" else [args.pool_sampling]
    for volunteers in args.volunteers or [1000]:
        results = {
            mode: run(
                volunteers,
                args.seconds,
                args.round_seconds,
                round_floor,
                args.heartbeats == "fixed",
                args.echo,
                args.protocol,
                mode,
                args.servers,
            )
            for mode in modes
        }
        if len(results) == 2:
            inline, celery = results["inline"], results["celery"]
            print(
                f"pool_sampling volunteers={volunteers} ratio={celery['server_ms_per_round'] / inline['server_ms_per_round']:.2f} "
                f"(server CPU per round, celery over inline: {celery['server_ms_per_round']:.2f} / "
                f"{inline['server_ms_per_round']:.2f} ms) ack_p99_ms celery={celery['ack_p99_ms']:.0f} "
                f"inline={inline['ack_p99_ms']:.0f} rounds_per_s celery={celery['rounds_per_s']:.1f} "
                f"inline={inline['rounds_per_s']:.1f}"
            )


if __name__ == "__main__":
    main()
