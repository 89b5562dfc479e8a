"""Machine websockets of the core app: the bare echo, only when SWARM_BENCH_ECHO enables it
(bench/coordinator.py measures the coordinator against it); in production it does not exist."""

from django.conf import settings
from django.urls import path

from swarm_app.core.consumers import EchoConsumer

websocket_urlpatterns = [path("ws/echo/", EchoConsumer.as_asgi())] if settings.SWARM_BENCH_ECHO else []
