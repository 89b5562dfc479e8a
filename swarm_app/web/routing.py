"""Browser websockets of campaigns (mounted behind AllowedHostsOriginValidator and
AuthMiddlewareStack in swarm_app/asgi.py: they carry the viewer's session)."""

from django.urls import path

from swarm_app.web.consumers import DashboardConsumer

websocket_urlpatterns = [
    path("ws/campaigns/<int:campaign_id>/", DashboardConsumer.as_asgi()),
]
