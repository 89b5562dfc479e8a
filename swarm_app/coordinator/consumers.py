"""The workers' websocket endpoint, ``/ws/worker/``.

Each frame is validated by worker/shared/protocol.py before anything is done with it; each request
is answered by its reply or by an ``error`` with a code, and an error never leaves partial
state behind (the service functions it calls are transactional). Fatal errors (bad token,
revoked token, banned node, no common protocol version) close the socket after the error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import DatabaseSyncToAsync
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from swarm_app.campaigns.broadcast import worker_group
from swarm_app.coordinator import groups, leases, pool, sessions, submissions
from swarm_app.coordinator.models import WorkerNode
from worker.shared import protocol
from worker.shared.protocol import ErrorCode, ProtocolError

log = logging.getLogger(__name__)
UNEXPECTED_LOG_SECONDS = 60.0  # a connection's internal errors log one traceback per window

FATAL = {ErrorCode.INVALID_TOKEN, ErrorCode.TOKEN_REVOKED, ErrorCode.BANNED, ErrorCode.UNSUPPORTED_VERSION}
CLOSE_CODES = {ErrorCode.INVALID_TOKEN: 4001, ErrorCode.TOKEN_REVOKED: 4001, ErrorCode.BANNED: 4003}


class TokenBucket:
    """At most ``rate`` messages a second on average, bursts of ``burst``."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _database_threads() -> int:
    """Threads for database work: one per pooled PostgreSQL connection; 0 on SQLite.

    Channels' ``database_sync_to_async`` runs every call of a process on ONE thread, so while
    one request waits on PostgreSQL (about half of a submission's time) no other request of
    that process makes progress. The service functions are written for many concurrent
    connections (several ASGI servers share one database: row locks, conditional updates,
    unique constraints), so on PostgreSQL they run on a pool of threads instead, one per
    connection of the process's psycopg pool. SQLite allows one writer at a time: there the
    calls stay on the single thread.
    """
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        return 0
    pool = database.get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        return int(pool.get("max_size", 8))
    return 8 if pool else 4  # psycopg's default pool, or no pool: a few connections of its own


_THREADS = _database_threads()
_EXECUTOR = ThreadPoolExecutor(_THREADS, thread_name_prefix="coordinator-db") if _THREADS else None


def db(function: Callable[..., Any]) -> Callable[..., Any]:
    """``database_sync_to_async(function)``, on the database thread pool where there is one."""
    if _EXECUTOR is None:
        return DatabaseSyncToAsync(function)
    return DatabaseSyncToAsync(function, thread_sensitive=False, executor=_EXECUTOR)


class WorkerConsumer(AsyncWebsocketConsumer):
    node: WorkerNode | None = None
    unexpected = 0  # internal errors on this connection
    unexpected_logged_at = float("-inf")  # when the last traceback was logged

    async def connect(self) -> None:
        self.node = None
        self.bucket = TokenBucket(settings.WORKER_RATE_PER_SECOND, settings.WORKER_RATE_BURST)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.node is not None:
            for group in self._groups():
                await self.channel_layer.group_discard(group, self.channel_name)
            await db(sessions.disconnected)(self.node)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        request_id = None
        try:
            if not self.bucket.take():
                request_id = protocol.peek_id(text_data) if text_data is not None else None
                raise ProtocolError(
                    ErrorCode.RATE_LIMITED,
                    f"too many messages; at most {settings.WORKER_RATE_PER_SECOND:g} a second on average",
                )
            if text_data is None:
                raise ProtocolError(ErrorCode.MALFORMED_JSON, "binary frames are not part of the protocol")
            message = protocol.parse(text_data, "worker")
            request_id = message.id
            reply_type, fields = await self.dispatch_message(message)
            await self.send(protocol.encode(reply_type, reply_to=request_id, **fields))
        except ProtocolError as error:
            await self.send(
                protocol.error(error.code, error.message, request_id or error.request_id, error.data)
            )
            if error.code in FATAL:
                await self.close(code=CLOSE_CODES.get(error.code, 4000))
        except Exception:
            self._log_unexpected()
            await self.send(
                protocol.error(ErrorCode.INTERNAL, "the coordinator failed on this request", request_id)
            )

    def _log_unexpected(self) -> None:
        """A bug's traceback, at most once a minute per connection (each says how many failed so
        far): a client that finds a failing input must not fill the disks at its message rate."""
        now = time.monotonic()
        self.unexpected += 1
        if now - self.unexpected_logged_at >= UNEXPECTED_LOG_SECONDS:
            self.unexpected_logged_at = now
            log.exception("worker message failed (%d on this connection so far)", self.unexpected)

    async def dispatch_message(self, message: protocol.Message) -> tuple[str, dict[str, Any]]:
        if message.type == "hello":
            return "welcome", await self.on_hello(message.fields)
        if self.node is None:
            raise ProtocolError(ErrorCode.NOT_AUTHENTICATED, f"send hello before {message.type}")
        handler = getattr(self, f"on_{message.type}")
        return await handler(message.fields)

    async def on_hello(self, fields: dict[str, Any]) -> dict[str, Any]:
        if self.node is not None:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "hello was already accepted on this connection")
        limits = {
            "rate_per_second": settings.WORKER_RATE_PER_SECOND,
            "rate_burst": settings.WORKER_RATE_BURST,
        }
        node, welcome = await db(sessions.hello)(fields, limits)
        self.node = node
        for group in self._groups():
            await self.channel_layer.group_add(group, self.channel_name)
        return welcome

    def _groups(self) -> list[str]:
        """The groups a welcomed connection joins: state pushes, and the ends of its token's and
        its node's sessions (a revocation, a ban)."""
        assert self.node is not None
        return [
            worker_group(self.node.campaign_id),
            groups.token_group(self.node.token_id),
            groups.node_group(self.node.pk),
        ]

    async def on_lease_request(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "lease", await db(leases.issue_lease)(self.node, fields["round"])

    async def on_submit(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ack = await db(submissions.submit)(
            self.node, fields["submission_id"], fields["lease_id"], fields["rollouts"]
        )
        return "submit_ack", ack

    async def on_sample_request(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        args = (self.node.campaign_id, self.node.pk, fields["count"])
        if settings.POOL_SAMPLING == "celery":
            from swarm_app.coordinator.tasks import sample_pool

            result = sample_pool.delay(*args)
            records = await db(result.get)(timeout=30)
        else:
            records = await db(pool.sample_external)(*args)
        return "samples", {"rollouts": records}

    async def on_metrics(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        from swarm_app.campaigns.metrics import record_node_metrics

        await db(record_node_metrics)(self.node, fields["round"], fields["metrics"])
        return "metrics_ack", {"round": fields["round"]}

    async def on_heartbeat(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        state = await db(sessions.heartbeat)(self.node)
        return "heartbeat_ack", {"campaign_state": state}

    async def on_release(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        await db(leases.release)(self.node, fields["lease_id"])
        return "release_ack", {"lease_id": fields["lease_id"]}

    async def session_end(self, event: dict[str, Any]) -> None:
        """Group event: this connection's token was revoked or its node banned (sessions.end_sessions)."""
        code = ErrorCode(event["code"])
        await self.send(protocol.error(code, event["message"]))
        await self.close(code=CLOSE_CODES.get(code, 4000))

    async def campaign_state(self, event: dict[str, Any]) -> None:
        """Group event from the web UI: the organizer paused, resumed or stopped the campaign."""
        await self.send(protocol.encode("campaign_state", state=event["state"]))
