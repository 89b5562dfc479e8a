"""The Swarm coordinator: a Django project (settings, ASGI, URLs, Celery) and its apps."""

from swarm_app.celery import app as celery_app

__all__ = ["celery_app"]
