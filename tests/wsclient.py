"""A bare protocol client for tests: real websockets, no engine; sends exactly what a test says."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import msgspec
import websockets

_ids = itertools.count()

CPU_HARDWARE = {
    "device": "cpu",
    "device_name": "test",
    "vram_bytes": 0,
    "ram_bytes": 16 * 1024**3,
    "cpu_count": 2,
}


def frame(kind: str, **fields: Any) -> str:
    """A frame of type ``kind`` with exactly ``fields`` (valid or not: tests send both); Rollout
    values are written as their records."""
    return msgspec.json.encode({"type": kind, **fields}).decode()


def hello_fields(token: str, node_id: str, **overrides: Any) -> dict[str, Any]:
    """A hello of protocol 1 unless ``protocol_versions`` says otherwise: the tests' sessions ask
    for each lease and draw themselves."""
    fields = {
        "protocol_versions": [1],
        "token": token,
        "node_id": node_id,
        "client_version": "test",
        "hardware": CPU_HARDWARE,
        "backends": ["transformers"],
        "generation_tokens_per_second": 100.0,
    }
    fields.update(overrides)
    return fields


class RawSession:
    def __init__(self, ws) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, base_url: str) -> RawSession:
        ws = await websockets.connect(
            base_url.replace("http", "ws", 1) + "/ws/worker/", max_size=8 * 1024 * 1024, open_timeout=10
        )
        return cls(ws)

    async def send_raw(self, frame: str | bytes) -> dict[str, Any]:
        await self.ws.send(frame)
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout=30))

    async def request(self, kind: str, **fields: Any) -> dict[str, Any]:
        request_id = f"r{next(_ids)}"
        reply = await self.send_raw(frame(kind, id=request_id, **fields))
        assert reply.get("reply_to") == request_id, reply
        return reply

    async def hello(self, token: str, node_id: str, **overrides: Any) -> dict[str, Any]:
        return await self.request("hello", **hello_fields(token, node_id, **overrides))

    async def close(self) -> None:
        await self.ws.close()
