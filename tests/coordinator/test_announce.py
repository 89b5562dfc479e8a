"""Workers' reports reach the campaign's dashboards live, announced in batches by the coordinator
(campaigns/broadcast.PointBatcher) rather than one group send per report from a database thread."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from swarm_app.coordinator.models import PoolRollout
from tests.coordinator.helpers import run, submit_round
from tests.wsclient import RawSession


async def next_points(ws, seconds: float = 10.0) -> dict:
    async with asyncio.timeout(seconds):
        while True:
            message = json.loads(await ws.recv())
            if message["type"] == "points":
                return message


def test_reports_of_several_workers_reach_a_dashboard_live(coordinator, campaign, token):
    mix = campaign.settings.mix
    nodes = ["node-a", "node-b", "node-c"]

    async def scenario() -> tuple[dict, float]:
        dashboard = await websockets.connect(
            coordinator.replace("http", "ws", 1) + f"/ws/campaigns/{campaign.pk}/",
            origin=coordinator,
            open_timeout=10,
        )
        await dashboard.send(json.dumps({"type": "watch", "agents": [f"node:{n}" for n in nodes]}))
        sessions = []
        for name in nodes:
            s = await RawSession.open(coordinator)
            assert (await s.hello(token, name))["type"] == "welcome"
            ack = await submit_round(s, name, mix)
            assert ack["type"] == "submit_ack", ack
            sessions.append(s)
        await asyncio.sleep(0.5)  # the watch is applied before the reports
        reported = time.monotonic()
        # The three reports at once: within one batch window of the coordinator's announcer.
        replies = await asyncio.gather(
            *(s.request("metrics", round=0, metrics={"loss": 0.5}) for s in sessions)
        )
        assert [r["type"] for r in replies] == ["metrics_ack"] * 3, replies
        agents: list[dict] = []
        while len(agents) < 3:
            message = await next_points(dashboard)
            agents += message["agents"]
        latency = time.monotonic() - reported
        for s in sessions:
            await s.close()
        await dashboard.close()
        return {"agents": agents, "aggregate": message["points"]}, latency

    seen, latency = run(scenario())
    verified = {
        f"node:{n}": sum(r.mean_reward for r in PoolRollout.objects.filter(node__node_id=n, round=0)) / 2
        for n in nodes
    }
    assert sorted((a["agent"], a["round"]) for a in seen["agents"]) == [(f"node:{n}", 0) for n in nodes]
    for point in seen["agents"]:
        assert point["reward"] == pytest.approx(verified[point["agent"]])
    assert latency < 2.0, latency
