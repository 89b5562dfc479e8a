"""What the health check reads that no other table holds: the housekeeping heartbeat."""

from __future__ import annotations

from django.db import models


class Heartbeat(models.Model):
    """One row: when Celery beat last sent the heartbeat task (``sent_at``, stamped in beat's
    process as it publishes) and when a worker of the default queue last ran it (``ran_at``).
    swarm_app/core/health.py reads both."""

    name = models.CharField(max_length=40, primary_key=True)
    sent_at = models.DateTimeField(null=True)
    ran_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.name}: sent {self.sent_at}, ran {self.ran_at}"
