"""Health of every part (swarm_app/core/health.py): a real daphne, a real Celery worker and a real
beat (their own processes), and a redis-server of the test's own, each stopped in turn. /healthz
(load balancers) stays 200 while the database answers; /healthz/all (monitors) answers 503 when
any part is down and says which; /metrics has the same as swarm_part_up; the campaign page says
when housekeeping is not running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from django.test import Client

from swarm_app.campaigns.models import Campaign
from tests.factories import tiny_campaign_config
from tests.servers import ROOT, asgi_server, celery_worker, free_port, server_env, start_redis, stop

FAST = {"HEALTH_HEARTBEAT_SECONDS": "1"}  # a part is down after 3 s + 10 s without a heartbeat


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait_for(url: str, test: Callable[[int, dict], bool], timeout: float, what: str) -> tuple[int, dict]:
    deadline = time.monotonic() + timeout
    status, body = get(url)
    while not test(status, body):
        assert time.monotonic() < deadline, f"{what}: last {status} {body}"
        time.sleep(0.5)
        status, body = get(url)
    return status, body


def start_beat(tmp_path: Path) -> subprocess.Popen:
    log = open(tmp_path / "beat.log", "ab")  # noqa: SIM115  (the process keeps it)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "swarm_app",
            "beat",
            "-l",
            "info",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
        cwd=ROOT,
        env=server_env(**FAST),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def up(part: str) -> Callable[[int, dict], bool]:
    return lambda _status, body: body["parts"][part]["ok"]


def down(part: str) -> Callable[[int, dict], bool]:
    return lambda _status, body: not body["parts"][part]["ok"]


def test_health_with_beat_stopped_then_the_worker_stopped(transactional_db, tmp_path, settings):
    settings.HEALTH_HEARTBEAT_SECONDS = 1
    campaign = Campaign.objects.create(
        name="running", state=Campaign.State.RUNNING, config=tiny_campaign_config(3, 8).to_json()
    )
    with asgi_server(tmp_path / "daphne.log", **FAST) as site:
        status, body = get(f"{site}/healthz/all")
        assert status == 503 and not body["parts"]["beat"]["ok"]  # nothing ran yet
        assert 'id="housekeeping-warning"' in Client().get(campaign.get_absolute_url()).content.decode()
        with celery_worker(tmp_path / "celery.log", **FAST) as worker:
            beat = start_beat(tmp_path)
            try:
                status, body = wait_for(f"{site}/healthz/all", lambda s, _b: s == 200, 90, "every part up")
                assert all(part["ok"] for part in body["parts"].values())
                # Redis is used in the PostgreSQL + Redis mode only.
                assert body["parts"]["redis"] == {"ok": True, "used": bool(os.environ.get("REDIS_URL"))}
                assert (
                    'id="housekeeping-warning"'
                    not in Client().get(campaign.get_absolute_url()).content.decode()
                )
                metrics = urllib.request.urlopen(f"{site}/metrics", timeout=10).read().decode()
                assert 'swarm_part_up{part="beat"} 1.0' in metrics

                stop(beat)
                status, body = wait_for(f"{site}/healthz/all", down("beat"), 60, "beat reported down")
                assert (
                    status == 503 and body["parts"]["celery_worker"]["ok"] and body["parts"]["database"]["ok"]
                )
                assert get(f"{site}/healthz")[0] == 200  # a load balancer keeps the server
                metrics = urllib.request.urlopen(f"{site}/metrics", timeout=10).read().decode()
                assert 'swarm_part_up{part="beat"} 0.0' in metrics
                page = Client().get(campaign.get_absolute_url()).content.decode()
                assert 'id="housekeeping-warning"' in page

                beat = start_beat(tmp_path)
                wait_for(f"{site}/healthz/all", lambda s, _b: s == 200, 90, "beat back")
                stop(worker)
                status, body = wait_for(
                    f"{site}/healthz/all", down("celery_worker"), 60, "the worker reported down"
                )
                assert status == 503 and body["parts"]["beat"]["ok"]
            finally:
                stop(beat)


def test_health_with_redis_stopped(transactional_db, tmp_path):
    port = free_port()
    redis = start_redis(port, tmp_path / "redis.log")
    try:
        with asgi_server(tmp_path / "daphne.log", REDIS_URL=f"redis://127.0.0.1:{port}/0") as site:
            status, body = get(f"{site}/healthz")
            assert status == 200 and body["mode"] == "production"
            assert body["parts"]["redis"] == {"ok": True, "used": True}
            redis.terminate()
            redis.wait(timeout=10)
            status, body = wait_for(f"{site}/healthz/all", down("redis"), 30, "Redis reported down")
            assert status == 503 and body["parts"]["redis"]["used"] and body["parts"]["database"]["ok"]
            status, body = get(f"{site}/healthz")
            assert status == 200 and not body["parts"]["redis"]["ok"]  # workers train through it
            metrics = urllib.request.urlopen(f"{site}/metrics", timeout=10).read().decode()
            assert 'swarm_part_up{part="redis"} 0.0' in metrics
    finally:
        if redis.poll() is None:
            redis.kill()
            redis.wait()
