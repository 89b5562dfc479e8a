"""A bare websocket echo endpoint, routed only when settings.SWARM_BENCH_ECHO is on.

It is the baseline that bench/coordinator.py measures the coordinator against (same ASGI
server, same process, no work per message), and a probe that proxies pass websockets through
(start the servers behind the proxy with SWARM_BENCH_ECHO=1 for that check).
"""

from __future__ import annotations

from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

# Same bound as the worker protocol's largest message, so the echo cannot be used to make the
# server buffer more than the coordinator itself would.
MAX_ECHO_BYTES = 4 * 1024 * 1024

# daphne's flags for every server this project starts (demo, tests, benchmarks; platform/ files
# spell the same numbers): daphne drops websocket messages over 1 MiB by default; taking twice
# the protocol's 4 MiB lets an oversized message reach the coordinator and get a clear error.
DAPHNE_LIMITS = ["--websocket-max-message-size", "8388608", "--websocket-max-frame-size", "8388608"]


def daphne_command(python: str, port: int | None = None, *, fd: int | None = None) -> list[str]:
    """The command line of a loopback coordinator (demo, tests, benchmarks): on ``port``, or on
    the inherited listening socket ``fd`` (several processes sharing one port, the kernel
    handing each new connection to one of them)."""
    bind = ["--fd", str(fd)] if fd is not None else ["-b", "127.0.0.1", "-p", str(port)]
    return [python, "-m", "daphne", *bind, *DAPHNE_LIMITS, "swarm_app.asgi:application"]


class NoDatabaseHopDispatch:
    """Channels' dispatch without its ``aclose_old_connections()`` before every event.

    That call is a hop to the one thread-sensitive sync thread per frame (heartbeats included):
    it serialised every connection's messages behind it and cost ~8% of daphne's CPU at 300
    volunteers (py-spy, issue #15). For a consumer that touches the database only through
    calls that close stale connections around themselves (the coordinator's ``db()``, whose
    DatabaseSyncToAsync does), or not at all (the echo).
    """

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class EchoConsumer(NoDatabaseHopDispatch, AsyncWebsocketConsumer):
    """The bare transport: what the coordinator's worker socket costs before any work (same
    dispatch as the worker consumer, so the baseline carries the same per-frame path)."""

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        size = len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        if size > MAX_ECHO_BYTES:
            # 4413, as the browser socket: autobahn refuses 1009 from an application (it allows
            # 1000 and 3000-4999 only), and the close became a traceback.
            await self.close(code=4413)
            return
        await self.send(text_data=text_data, bytes_data=bytes_data)
