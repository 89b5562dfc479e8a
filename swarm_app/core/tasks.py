"""The housekeeping heartbeat: beat sends it every HEALTH_HEARTBEAT_SECONDS to the default queue
(the queue of liveness, completion and the dashboards), and the worker that runs it stamps the
time (swarm_app/core/health.py)."""

from __future__ import annotations

from celery import shared_task

from swarm_app.core import health


@shared_task(name=health.HEARTBEAT_TASK)
def heartbeat() -> None:
    health.stamp(ran=True)
