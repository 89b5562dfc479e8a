"""Celery tasks of campaigns: the isolated controls' nodes (queue ``controls``), and beat's
housekeeping (the default queue, ``celery``: never behind a control, which holds its slot for the
whole campaign; settings.CELERY_TASK_ROUTES).

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
    """One control's node, to the end of the campaign (long-running; restartable; idempotent)."""
    return controls.run_control(run_id, self.request.id)


@shared_task(name="campaigns.requeue_offline_controls", ignore_result=True)
def requeue_offline_controls() -> list[int]:
    return controls.requeue_offline()


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
    """A warm shutdown stops the control nodes cleanly (they checkpoint) and re-enqueues them."""
    controls.SHUTDOWN.set()
