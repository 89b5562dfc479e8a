from django.urls import path

from swarm_app.coordinator.consumers import WorkerConsumer

websocket_urlpatterns = [
    path("ws/worker/", WorkerConsumer.as_asgi()),
]
