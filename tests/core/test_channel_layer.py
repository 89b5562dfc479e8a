"""The configured channel layer carries group messages between processes, in both modes
(SQLite file in embedded mode, Redis in production): a Celery worker's control run reaches the
dashboards of the ASGI process this way."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from channels.layers import get_channel_layer

from tests.servers import ROOT, server_env

SENDER = """
import asyncio, django
django.setup()
from channels.layers import get_channel_layer
asyncio.run(get_channel_layer().group_send("campaign-test", {"type": "metrics.points", "points": [{"round": 7}]}))
"""


def test_group_message_crosses_processes(db):
    layer = get_channel_layer()

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("campaign-test", channel)
        sender = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SENDER,
            cwd=ROOT,
            env=server_env(DJANGO_SETTINGS_MODULE="swarm_app.settings"),
        )
        assert await sender.wait() == 0
        message = await asyncio.wait_for(layer.receive(channel), timeout=10)
        await layer.group_discard("campaign-test", channel)
        return message

    assert asyncio.run(scenario()) == {"type": "metrics.points", "points": [{"round": 7}]}


def test_discarded_members_get_nothing_and_direct_sends_arrive(db):
    layer = get_channel_layer()

    async def scenario():
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("g-test", a)
        await layer.group_add("g-test", b)
        await layer.group_discard("g-test", b)
        await layer.group_send("g-test", {"type": "x.y", "n": 1})
        got_a = await asyncio.wait_for(layer.receive(a), timeout=5)
        await layer.send(b, {"type": "direct"})
        got_b = await asyncio.wait_for(layer.receive(b), timeout=5)
        return got_a, got_b

    assert asyncio.run(scenario()) == ({"type": "x.y", "n": 1}, {"type": "direct"})


def test_sender_subprocess_is_real():
    # Guard against a vacuous pass: the subprocess must fail loudly on a broken settings module.
    result = subprocess.run(
        [sys.executable, "-c", SENDER],
        cwd=ROOT,
        env=server_env(DJANGO_SETTINGS_MODULE="no.such.settings"),
        capture_output=True,
    )
    assert result.returncode != 0


def test_point_announcements_log_one_line_per_outage(caplog, monkeypatch):
    """Workers' points are announced four times a second: with the channel layer's Redis away,
    that is one warning for the outage, not one per batch."""
    import logging

    from swarm_app.campaigns import broadcast
    from swarm_app.core.redis_layer import ResilientRedisChannelLayer
    from tests.servers import free_port

    layer = ResilientRedisChannelLayer(
        hosts=[{"address": f"redis://127.0.0.1:{free_port()}", "socket_connect_timeout": 0.5}]
    )  # nothing listens there: the real layer, Redis down
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: layer)
    batcher = broadcast.PointBatcher()

    async def batches() -> None:
        for number in range(5):
            batcher.pending = {1: [{"tier": "tiny-1m", "arm": "swarm", "agent": "node:a", "round": number}]}
            await batcher.flush()

    with caplog.at_level(logging.WARNING, logger=broadcast.log.name):
        asyncio.run(batches())
    warnings = [r for r in caplog.records if "could not announce" in r.getMessage()]
    assert len(warnings) == 1 and batcher.failing


def test_a_point_added_while_a_batch_is_being_sent_is_announced(monkeypatch):
    """A report stored while the previous batch's group send is under way (a loaded machine
    makes that send slow) goes out in the next batch, even if no other report follows: the
    campaign's last point was announced never, and the live browser test waited 120 s for it."""
    from swarm_app.campaigns import broadcast
    from swarm_app.core.messages import MetricsPoint

    sent: list[list[int]] = []

    class SlowLayer:  # the first group send takes 0.5 s
        async def group_send(self, group: str, event: dict) -> None:
            sent.append([point["round"] for point in event["points"]])
            if len(sent) == 1:
                await asyncio.sleep(0.5)

    monkeypatch.setattr(broadcast, "get_channel_layer", SlowLayer)
    batcher = broadcast.PointBatcher()

    def point(number: int) -> MetricsPoint:
        return MetricsPoint(arm="swarm", tier="tiny-1m", agent="node:a", round=number, reward=0.5)

    async def reports() -> None:
        batcher.add(1, point(0))
        await asyncio.sleep(batcher.FLUSH_SECONDS + 0.2)  # round 0's batch is being sent
        batcher.add(1, point(1))  # the last report
        await asyncio.sleep(0.5 + 4 * batcher.FLUSH_SECONDS)

    asyncio.run(reports())
    assert sent == [[0], [1]]


def test_the_embedded_broker_never_shows_a_message_before_it_is_whole(tmp_path, monkeypatch):
    """kombu's filesystem transport created the message file before serialising into it, so a
    consumer could take an empty file (the demo's Celery worker died of it). Ours renames a whole
    file into place: while the payload is being serialised, no message file is visible yet."""
    from kombu import Connection
    from kombu.transport import filesystem

    from swarm_app.core import file_broker

    file_broker.register()
    seen: list[list[str]] = []
    serialise = file_broker.dumps

    def watching_dumps(payload):  # what a consumer listing the folder would see at this moment
        seen.append([n for n in os.listdir(tmp_path) if n.partition(".")[2].endswith(".msg")])
        return serialise(payload)

    monkeypatch.setattr(file_broker, "dumps", watching_dumps)
    monkeypatch.setattr(filesystem, "dumps", watching_dumps)
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path), "store_processed": False}
    for url in ("swarmfs://localhost/", "filesystem://localhost/"):
        seen.clear()
        with Connection(url, transport_options=options) as connection:
            queue = connection.SimpleQueue("q")
            queue.put({"n": 1})
            assert queue.get(timeout=5).payload == {"n": 1}
            queue.close()
        visible_while_serialising = any(seen)
        assert visible_while_serialising == (url.startswith("filesystem")), (url, seen)


def test_a_membership_left_while_redis_was_being_repaired_does_not_come_back(tmp_path):
    """When Redis is back, the layer adds every live membership again, one by one. A socket that
    closes meanwhile (the layer still marked down, so its discard is only local) must not stay a
    member in Redis: CI saw 'asgi:group:campaign-N-workers' left behind after every worker had
    gone (tests/system/test_faults.py, Redis restarted mid-campaign)."""
    from swarm_app.core.redis_layer import ResilientRedisChannelLayer
    from tests.servers import free_port, kill, start_redis

    port = free_port()
    layer = ResilientRedisChannelLayer(
        hosts=[{"address": f"redis://127.0.0.1:{port}", "socket_connect_timeout": 0.5}], retry_seconds=0.05
    )
    redis = None

    async def scenario() -> tuple[bool, int]:
        nonlocal redis
        key = layer._group_key("g-repair")
        channels = [f"specific.test!{number}" for number in range(400)]
        for channel in channels:  # nothing listens yet: the first add marks the outage
            await layer.group_add("g-repair", channel)
        assert layer.down
        redis = start_redis(port, tmp_path / "redis.log")
        for _ in range(100_000):  # until the repair has begun adding again...
            if await layer.connection(0).zcard(key):
                break
        down_while_leaving = layer.down  # ...and is not done: these discards are only local
        for channel in channels:
            await layer.group_discard("g-repair", channel)
        for _ in range(1000):  # until the repair is done (at most 10 s)
            if not layer.down:
                break
            await asyncio.sleep(0.01)
        return down_while_leaving, await layer.connection(0).zcard(key)

    try:
        down_while_leaving, left_in_redis = asyncio.run(scenario())
    finally:
        if redis is not None:
            kill(redis)
    assert down_while_leaving  # else the test did not exercise the race
    assert left_in_redis == 0 and layer.membership_count == 0


def test_discards_reach_a_redis_that_dropped_the_connections_but_kept_its_data(tmp_path):
    """Redis drops every client connection but keeps its data (a network blip; after a restart
    the same holds for what the repair added again). The pooled connection fails once on its
    next use: CI saw a worker's last group_discard lost that way, leaving the closed socket a
    member. The discard is retried at once; one made while the layer counts as down is made by
    the repair."""
    from swarm_app.core.redis_layer import ResilientRedisChannelLayer
    from tests.servers import free_port, kill, redis_cli, start_redis

    port = free_port()
    redis = start_redis(port, tmp_path / "redis.log")
    layer = ResilientRedisChannelLayer(
        hosts=[{"address": f"redis://127.0.0.1:{port}", "socket_connect_timeout": 0.5}], retry_seconds=0.5
    )

    async def scenario() -> tuple[bool, list[str]]:
        key = layer._group_key("g-blip")
        await layer.group_add("g-blip", "specific.x!a")
        await layer.group_add("g-blip", "specific.x!b")
        assert redis_cli(port, "client", "kill", "type", "normal") == ["1"]  # the layer's one
        await layer.group_discard("g-blip", "specific.x!b")  # stale connection: fails once
        down_after_blip = layer.down  # the lost connection counts as an outage (repair pending)
        await layer.group_discard("g-blip", "specific.x!a")  # while down: only the repair can
        for _ in range(500):
            if not layer.down:
                break
            await asyncio.sleep(0.01)
        members = await layer.connection(0).zrange(key, 0, -1)
        return down_after_blip, sorted(m.decode() for m in members)

    try:
        down_after_blip, members = asyncio.run(scenario())
    finally:
        kill(redis)
    assert down_after_blip
    assert members == [] and layer.membership_count == 0 and not layer.pending_discards
