"""Where the coordinator is: its worker endpoint as a websocket URL, from what a volunteer types."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

WS_PATH = "/ws/worker/"


def normalise_url(url: str) -> str:
    """The coordinator's worker endpoint as a ws(s) URL.

    ``ws://`` and ``wss://`` URLs are kept as given (``/ws/worker/`` is added when there is no
    path at all); ``http(s)://host[/prefix]`` becomes ``ws(s)://host[/prefix]/ws/worker/``.
    """
    text = url.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss", "http", "https") or not parts.netloc:
        raise ValueError(
            f"coordinator URL {url!r}: expected ws://, wss://, http:// or https:// with a host, "
            "e.g. wss://swarm.example.org/ws/worker/"
        )
    path = parts.path
    if scheme in ("http", "https"):
        scheme = "ws" if scheme == "http" else "wss"
        if not path.rstrip("/").endswith(WS_PATH.rstrip("/")):
            path = path.rstrip("/") + WS_PATH
        elif not path.endswith("/"):
            path += "/"
    elif path in ("", "/"):
        path = WS_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def http_url(url: str) -> str:
    """The coordinator's web address (``http(s)://host[/prefix]``, no trailing slash) from what a
    volunteer types or :func:`normalise_url` gives: the inverse of the websocket endpoint."""
    parts = urlsplit(normalise_url(url))
    scheme = "http" if parts.scheme == "ws" else "https"
    path = parts.path.removesuffix(WS_PATH).rstrip("/")
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (where an unencrypted ws:// is harmless)."""
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")
