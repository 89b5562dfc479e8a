"""Celery tasks of the coordinator: pool sampling off the ASGI servers, liveness and the pool's
archive (beat)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from swarm_app.coordinator import archive, liveness, pool


@shared_task(name="coordinator.sample_pool")
def sample_pool(
    campaign_id: int, node_pk: int, count: int, strategy: str | None = None
) -> list[dict[str, Any]]:
    return pool.sample_external(campaign_id, node_pk, count, strategy)


@shared_task(name="coordinator.update_liveness", ignore_result=True)
def update_liveness() -> dict[str, int]:
    return liveness.update_liveness()


@shared_task(name="coordinator.archive_pool", ignore_result=False)
def archive_pool() -> dict[str, int]:
    """Rollouts no draw can reach any more out of the hot pool table (archive.py)."""
    return {str(pk): count for pk, count in archive.archive_all().items()}
