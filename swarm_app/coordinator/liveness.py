"""Node liveness, moved by the periodic Celery task ``update_liveness`` (beat).

    healthy -> stale    no heartbeat for STALE_AFTER seconds
    stale   -> offline  no heartbeat for OFFLINE_AFTER seconds
    any     -> healthy  on the next hello or heartbeat
    banned              final

Overdue leases expire on the same beat, so their questions are reissued even when no worker
of that campaign asks for a lease meanwhile.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from swarm_app.coordinator.leases import expire_overdue
from swarm_app.coordinator.models import WorkerNode

STALE_AFTER = 30.0  # three missed heartbeats
OFFLINE_AFTER = 120.0


def update_liveness() -> dict[str, int]:
    now = timezone.now()
    live = WorkerNode.objects.exclude(state=WorkerNode.State.BANNED)
    stale = live.filter(
        state=WorkerNode.State.HEALTHY, last_seen__lt=now - timedelta(seconds=STALE_AFTER)
    ).update(state=WorkerNode.State.STALE)
    offline = live.filter(
        state__in=[WorkerNode.State.HEALTHY, WorkerNode.State.STALE],
        last_seen__lt=now - timedelta(seconds=OFFLINE_AFTER),
    ).update(state=WorkerNode.State.OFFLINE, connected=False)
    return {"stale": stale, "offline": offline, "expired_leases": expire_overdue()}
