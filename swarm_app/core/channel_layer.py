"""A channel layer in a SQLite file, for the embedded mode: no server, several processes.

Channels' in-memory layer only reaches consumers in its own process; in embedded mode the
Celery worker (isolated controls) must reach dashboards served by the ASGI process. This
layer keeps messages and group memberships in ``<data dir>/channels.sqlite3`` (WAL mode), which
every process on the machine can open. Receiving polls the file: every POLL_MIN seconds while
messages flow, backing off to POLL_MAX when idle, which bounds both latency (< POLL_MAX) and
the idle cost. It is meant for one machine and a handful of consumers; production uses
channels-redis.

Semantics follow the channels layer spec: at-most-once delivery, messages expire after
``expiry`` seconds, group memberships after ``group_expiry``, a full channel (``capacity``)
raises ``ChannelFull``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer

POLL_MIN = 0.02
POLL_MAX = 0.25

SCHEMA = """
CREATE TABLE IF NOT EXISTS message (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    body TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS message_channel ON message (channel, id);
CREATE TABLE IF NOT EXISTS membership (
    grp TEXT NOT NULL,
    channel TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (grp, channel)
);
"""


class SQLiteChannelLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(
        self, path: str, expiry: int = 60, group_expiry: int = 86400, capacity: int = 1000, **kwargs
    ) -> None:
        super().__init__(expiry=expiry, capacity=capacity, **kwargs)
        self.path = Path(path)
        self.group_expiry = group_expiry
        self.client_prefix = uuid.uuid4().hex[:12]
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _db(self) -> sqlite3.Connection:
        # One connection per thread: sqlite3 connections must not cross threads.
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._connect()
        return db

    # --- blocking parts, run in a worker thread --------------------------------------------
    def _send(self, channels: list[str], body: str) -> None:
        db = self._db()
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM message WHERE expires < ?", (now,))
            for channel in channels:
                (queued,) = db.execute(
                    "SELECT COUNT(*) FROM message WHERE channel = ?", (channel,)
                ).fetchone()
                if queued >= self.get_capacity(channel):
                    if len(channels) == 1:
                        raise ChannelFull(channel)
                    continue  # group sends drop for full members, as channels-redis does
                db.execute(
                    "INSERT INTO message (channel, body, expires) VALUES (?, ?, ?)",
                    (channel, body, now + self.expiry),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _pop(self, channel: str) -> str | None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT id, body FROM message WHERE channel = ? AND expires >= ? ORDER BY id LIMIT 1",
                (channel, time.time()),
            ).fetchone()
            if row is not None:
                db.execute("DELETE FROM message WHERE id = ?", (row[0],))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return row[1] if row else None

    def _execute(self, sql: str, params: tuple) -> None:
        self._db().execute(sql, params)

    def _members(self, group: str) -> list[str]:
        rows = (
            self._db()
            .execute("SELECT channel FROM membership WHERE grp = ? AND expires >= ?", (group, time.time()))
            .fetchall()
        )
        return [channel for (channel,) in rows]

    # --- the layer API ---------------------------------------------------------------------
    async def send(self, channel: str, message: dict) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        await asyncio.to_thread(self._send, [channel], json.dumps(message))

    async def receive(self, channel: str) -> dict:
        self.require_valid_channel_name(channel)
        delay = POLL_MIN
        while True:
            body = await asyncio.to_thread(self._pop, channel)
            if body is not None:
                return json.loads(body)
            await asyncio.sleep(delay)
            delay = min(POLL_MAX, delay * 1.5)

    async def new_channel(self, prefix: str = "specific.") -> str:
        return f"{prefix}{self.client_prefix}!{uuid.uuid4().hex}"

    async def group_add(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        await asyncio.to_thread(
            self._execute,
            "INSERT OR REPLACE INTO membership (grp, channel, expires) VALUES (?, ?, ?)",
            (group, channel, time.time() + self.group_expiry),
        )

    async def group_discard(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        await asyncio.to_thread(
            self._execute, "DELETE FROM membership WHERE grp = ? AND channel = ?", (group, channel)
        )

    async def group_send(self, group: str, message: dict) -> None:
        self.require_valid_group_name(group)
        body = json.dumps(message)

        def send_to_members() -> None:
            members = self._members(group)
            if members:
                self._send(members, body)

        await asyncio.to_thread(send_to_members)

    async def flush(self) -> None:
        def clear() -> None:
            self._db().executescript("DELETE FROM message; DELETE FROM membership;")

        await asyncio.to_thread(clear)
