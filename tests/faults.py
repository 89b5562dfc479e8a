"""A fault-injecting TCP proxy between worker processes and the coordinator, in the manner of
Nous Psyche's coordinator tests: the test decides when the network fails, relative to what the
worker was just told, instead of hoping that a sleep lands mid-round.

Coordinator-to-worker websocket frames are unmasked (and daphne negotiates no compression), so
the proxy can see which message it is forwarding ("type" is its first key). A trigger fires once,
on the first chunk holding its marker:

* ``"cut"``: forward the chunk, then close every connection and refuse new ones for ``seconds``
  (the worker has its lease, then loses the coordinator);
* ``"freeze"``: forward the chunk, then hold every byte in both directions until :meth:`thaw`
  (the worker cannot submit while the test restarts the coordinator or pauses the campaign);
* ``"drop"``: do not forward the chunk; call ``action`` (e.g. kill the worker) at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Trigger:
    marker: bytes
    kind: str  # "cut" | "freeze" | "drop"
    seconds: float = 0.0
    action: Callable[[], None] | None = None
    fired: threading.Event | None = None

    def __post_init__(self) -> None:
        self.fired = threading.Event()


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.triggers: list[Trigger] = []
        self.refuse_until = 0.0
        self._flowing: asyncio.Event | None = None  # cleared: bytes are held (the loop's own)
        self.connections = 0  # accepted since start, refused ones excluded
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()

        async def flowing() -> asyncio.Event:
            event = asyncio.Event()
            event.set()
            return event

        self._flowing = asyncio.run_coroutine_threadsafe(flowing(), self._loop).result(10)
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        self.thaw()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def arm(
        self, marker: str, kind: str, seconds: float = 0.0, action: Callable[[], None] | None = None
    ) -> Trigger:
        trigger = Trigger(f'{{"type":"{marker}"'.encode(), kind, seconds, action)
        self.triggers.append(trigger)
        return trigger

    def thaw(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self.refuse_until:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:  # the coordinator is down: so is the proxy, to the worker
            writer.close()
            return
        self.connections += 1
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer, downstream=False),
            self._pipe(up_reader, writer, downstream=True),
            return_exceptions=True,
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, downstream: bool
    ) -> None:
        while chunk := await reader.read(65536):
            await self._flowing.wait()
            trigger = self._fires(chunk) if downstream else None
            if trigger is not None and trigger.kind == "drop":
                if trigger.action is not None:
                    trigger.action()
                trigger.fired.set()
                continue
            writer.write(chunk)
            await writer.drain()
            if trigger is None:
                continue
            if trigger.kind == "cut":
                self.refuse_until = time.monotonic() + trigger.seconds
                for w in list(self._writers):
                    w.close()
            elif trigger.kind == "freeze":
                self._flowing.clear()
            trigger.fired.set()
        writer.close()

    def _fires(self, chunk: bytes) -> Trigger | None:
        for trigger in self.triggers:
            if not trigger.fired.is_set() and trigger.marker in chunk:
                return trigger
        return None
