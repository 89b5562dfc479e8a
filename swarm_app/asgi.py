"""ASGI entry point: HTTP through Django, websockets through Channels' URL router.

Run with ``daphne swarm_app.asgi:application`` (or any ASGI server).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "swarm_app.settings")
# Django must be set up before anything imports models (the routing modules do).
django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path  # noqa: E402

from swarm_app.coordinator.routing import websocket_urlpatterns as worker_ws  # noqa: E402
from swarm_app.core.origin import SameOriginValidator  # noqa: E402
from swarm_app.core.routing import websocket_urlpatterns as core_ws  # noqa: E402
from swarm_app.web.routing import websocket_urlpatterns as dashboard_ws  # noqa: E402

if settings.SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_http = ASGIStaticFilesHandler(django_http)

# Machine clients (workers, benchmarks) authenticate with tokens and send no Origin header;
# browser sockets carry a session cookie, so only this site's own pages may open them
# (scheme, host and port: swarm_app/core/origin.py).
machine_routes = [*core_ws, *worker_ws]
browser_routes: list = [*dashboard_ws]

browser_app = SameOriginValidator(AuthMiddlewareStack(URLRouter(browser_routes)))
# The wrapper hides the inner URLRouter from the outer one, which would then treat path("") as
# an endpoint matching only the empty path; this flag makes "" a prefix, as for a nested router.
browser_app._path_routing = True

application = ProtocolTypeRouter(
    {
        "http": django_http,
        "websocket": URLRouter([*machine_routes, path("", browser_app)]),
    }
)

# Loaded: what exists now is frozen out of the cyclic collector's reach (swarm_app/core/collector.py).
from swarm_app.core.collector import settle_for_serving  # noqa: E402

settle_for_serving()
