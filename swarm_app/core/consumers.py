"""A bare websocket echo endpoint, routed only when settings.SWARM_BENCH_ECHO is on.

It is the baseline that bench/coordinator.py measures the coordinator against (same ASGI
server, same process, no work per message), and a probe that proxies pass websockets through
(start the servers behind the proxy with SWARM_BENCH_ECHO=1 for that check).
"""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer

# Same bound as the worker protocol's largest message, so the echo cannot be used to make the
# server buffer more than the coordinator itself would.
MAX_ECHO_BYTES = 4 * 1024 * 1024

# daphne's flags for every server this project starts (demo, tests, benchmarks; platform/ files
# spell the same numbers): daphne drops websocket messages over 1 MiB by default; taking twice
# the protocol's 4 MiB lets an oversized message reach the coordinator and get a clear error.
DAPHNE_LIMITS = ["--websocket-max-message-size", "8388608", "--websocket-max-frame-size", "8388608"]


def daphne_command(python: str, port: int) -> list[str]:
    """The command line of a loopback coordinator (demo, tests, benchmarks)."""
    return [
        python,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        *DAPHNE_LIMITS,
        "swarm_app.asgi:application",
    ]


class EchoConsumer(AsyncWebsocketConsumer):
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        size = len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        if size > MAX_ECHO_BYTES:
            await self.close(code=1009)  # 1009: message too big
            return
        await self.send(text_data=text_data, bytes_data=bytes_data)
