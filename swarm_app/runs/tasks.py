"""Celery tasks of campaigns: the isolated-control runs, and beat's housekeeping.

The tasks are thin: the work is in plain functions (controls.py, lifecycle.py, campaigns/rollups.py)
that tests call directly.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_shutting_down

from swarm_app.campaigns import rollups
from swarm_app.runs import controls, lifecycle


@shared_task(name="campaigns.run_control", bind=True, ignore_result=True)
def run_control(self, run_id: int) -> str:
    """One control run, to the end of the campaign (long-running; resumable; idempotent)."""
    return controls.run_control(run_id, controls.default_owner(self.request.id))


@shared_task(name="campaigns.requeue_stale_controls", ignore_result=True)
def requeue_stale_controls() -> list[int]:
    return controls.requeue_stale()


@shared_task(name="campaigns.complete_finished", ignore_result=True)
def complete_finished() -> list[int]:
    return lifecycle.complete_finished()


@shared_task(name="campaigns.refresh_dashboards", ignore_result=True)
def refresh_dashboards() -> dict[str, Any]:
    """Keep the dashboard rollups current, so a first visitor's page loads from them."""
    return rollups.refresh_rollups()


@shared_task(name="campaigns.rebuild_rollups", ignore_result=True)
def rebuild_rollups(campaign_id: int) -> None:
    """A finished campaign's rollups, recomputed from all its rows (exact final figures)."""
    rollups.rebuild_campaign(campaign_id)


@worker_shutting_down.connect
def _hand_back_controls(**_: Any) -> None:
    """A warm shutdown lets the running control finish its round, checkpoint and re-enqueue."""
    controls.SHUTDOWN.set()
