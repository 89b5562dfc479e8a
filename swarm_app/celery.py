"""The Celery application; its broker and beat schedule come from Django settings (CELERY_*)."""

import os

from celery import Celery
from celery.signals import before_task_publish

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "swarm_app.settings")

from swarm_app.core.file_broker import register as register_file_broker

register_file_broker()  # the embedded broker's swarmfs:// (swarm_app/core/file_broker.py)
app = Celery("swarm_app")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@before_task_publish.connect
def stamp_heartbeat_sent(sender: str | None = None, **kwargs: object) -> None:
    """Beat publishes the heartbeat: record when (swarm_app/core/health.py)."""
    from swarm_app.core import health

    if sender == health.HEARTBEAT_TASK:
        health.stamp(sent=True)
