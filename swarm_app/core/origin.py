"""Which pages may open a browser websocket: this site's own, by scheme, host and port.

A browser sends the page's origin with every websocket handshake and the session cookie along
with it, whatever page opened the socket; a socket is therefore accepted only when its
``Origin`` is the origin the socket itself was opened on (the same-origin rule Django's CSRF
check applies to unsafe requests), or is listed in ``CSRF_TRUSTED_ORIGINS``.

Channels' ``AllowedHostsOriginValidator`` compares host names only: with ``localhost`` in
ALLOWED_HOSTS (the health check needs it) any ``http://localhost:<port>`` page was accepted.

The socket's own origin: the scheme is ``https`` when the socket came over TLS, or when the
proxy header of ``SECURE_PROXY_SSL_HEADER`` says so (as ``request.is_secure()`` decides for
HTTP); host and port are the ``Host`` header's, which must be in ALLOWED_HOSTS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}


def normalised(origin: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin such as ``https://swarm.example:8443``, with the
    scheme's default port filled in; None for anything that is not an http(s) origin."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:  # a port out of range or not a number
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def own_origin(scope: dict[str, Any], headers: dict[bytes, bytes]) -> tuple[str, str, int] | None:
    """The origin this socket was opened on, or None when its Host is not one this site serves."""
    host = headers.get(b"host", b"").decode("latin-1")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") == "wss"
    if settings.SECURE_PROXY_SSL_HEADER:
        name, value = settings.SECURE_PROXY_SSL_HEADER
        # HTTP_X_FORWARDED_PROTO -> x-forwarded-proto
        header = name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        forwarded = headers.get(header, b"").decode("latin-1").split(",")[0].strip()
        secure = secure or forwarded == value
    return normalised(f"{'https' if secure else 'http'}://{host}")


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = dict(scope.get("headers", []))
    origin = normalised(headers.get(b"origin", b"").decode("latin-1"))
    if origin is None:
        return False
    return origin == own_origin(scope, headers) or any(
        trusted_match(origin, item) for item in settings.CSRF_TRUSTED_ORIGINS
    )


def trusted_match(origin: tuple[str, str, int], trusted: str) -> bool:
    """Whether ``origin`` is the CSRF_TRUSTED_ORIGINS entry ``trusted``; as for Django's CSRF
    check, ``https://*.example.com`` stands for every subdomain of example.com."""
    pattern = normalised(trusted.replace("://*.", "://wildcard.", 1))
    if pattern is None:
        return False
    scheme, host, port = pattern
    if "://*." in trusted:
        return (
            origin[0] == scheme
            and origin[2] == port
            and is_same_domain(origin[1], host.replace("wildcard", "", 1))
        )
    return origin == pattern


class SameOriginValidator:
    """ASGI middleware for browser websockets: the handshake is refused (HTTP 403) unless
    :func:`origin_allowed`."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator serves websockets only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
