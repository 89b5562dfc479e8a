"""The workers' websocket endpoint, ``/ws/worker/``.

Each frame is validated by worker/shared/protocol.py before anything is done with it; each request
is answered by its reply or by an ``error`` with a code, and an error never leaves partial
state behind (the service functions it calls are transactional). Fatal errors (bad token,
revoked token, banned node, no common protocol version) close the socket after the error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone
from msgspec import UNSET, UnsetType

from swarm_app.campaigns.broadcast import POINTS, worker_group
from swarm_app.campaigns.metrics import point
from swarm_app.coordinator import (
    control_nodes,
    evaluations,
    groups,
    leases,
    pool,
    sessions,
    submissions,
    telemetry,
)
from swarm_app.coordinator.admission import ADMISSION
from swarm_app.coordinator.database import database_threads, db, queue_limit
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.presence import PRESENCE
from swarm_app.coordinator.storage import store
from swarm_app.coordinator.storage.records import DrawView
from swarm_app.core import messages
from swarm_app.core.consumers import NoDatabaseHopDispatch
from swarm_app.core.limits import TokenBucket, UnexpectedErrorLog
from worker.shared import protocol
from worker.shared.protocol import ErrorCode, ProtocolError

log = logging.getLogger(__name__)

FATAL = {ErrorCode.INVALID_TOKEN, ErrorCode.TOKEN_REVOKED, ErrorCode.BANNED, ErrorCode.UNSUPPORTED_VERSION}
CLOSE_CODES = {ErrorCode.INVALID_TOKEN: 4001, ErrorCode.TOKEN_REVOKED: 4001, ErrorCode.BANNED: 4003}


# Requests that queue for the database threads; heartbeats and releases are cheap and always answered.
DATABASE_WORK = frozenset(
    {
        protocol.LeaseRequest,
        protocol.ExtraLeaseRequest,
        protocol.Submit,
        protocol.SampleRequest,
        protocol.MetricsReport,
        protocol.EvalRequest,
        protocol.EvalSubmit,
    }
)


# Protocol 2 answers a round's follow-up inside the reply to its request; each pair below runs in
# one trip to a database thread (one hand-off, one connection checkout).


def submit_and_draw(
    node: WorkerNode, submission_id: str, lease_id: str, rollouts: list[Any]
) -> tuple[submissions.Submitted, list[dict[str, Any]]]:
    """Store the submission with the round's draw of J_r external groups (pool.py): its first
    chunk in the submission's own statement, and the rest, where that gave fewer than J_r, below
    the same last number of the pool: no read of its own."""
    stored = submissions.submit(node, submission_id, lease_id, rollouts, draw=True)
    view = DrawView(stored.config, stored.pool_before, node.tier, node.replicate)
    count = stored.external_count()
    return stored, pool.sample_external(
        node.campaign_id, node.pk, count, view=view, order=stored.order, drawn=stored.drawn
    )


def report_and_lease(
    node: WorkerNode, round: int, metrics: dict[str, Any], next_lease: bool
) -> tuple[Any, protocol.Lease | UnsetType]:
    """Store the round's metrics; with ``next_lease``, also the lease a lease_request for the
    next round would get, or nothing when that would be an error (the campaign paused or done,
    the node's rounds done, its token revoked): the worker then asks, and is told why. The
    report, the read the lease is decided on and, in the common case, the new lease's insert
    are one statement (Store.record_node_metrics, leases.offer_lease)."""
    # ``metrics`` was validated at the boundary (protocol.MetricsReport): finite, bounded keys.
    now = timezone.now() if next_lease else None
    offer = leases.offer_lease(node, round + 1, now) if now is not None else None
    row, view = store().record_node_metrics(node, round, metrics, now, offer)
    if row is None:
        raise ProtocolError(
            ErrorCode.INVALID_MESSAGE,
            f"metrics for round {round}: no verified rollouts of this node in that round",
        )
    if view is None:
        return row, UNSET
    try:
        return row, leases.issue_lease(node, round + 1, view, offer)
    except ProtocolError:
        return row, UNSET


def report_and_lease_control(
    node: WorkerNode, round: int, metrics: dict[str, Any], next_lease: bool
) -> tuple[Any, protocol.Lease | UnsetType]:
    """:func:`report_and_lease` for a campaign's control node (control_nodes.py)."""
    row = control_nodes.record_metrics(node, round, metrics)
    if not next_lease:
        return row, UNSET
    try:
        return row, control_nodes.issue_lease(node, round + 1)
    except ProtocolError:
        return row, UNSET


def _describe_process() -> None:
    """This process's database threads and busy threshold, for the scrape (idempotent)."""
    telemetry.DB_THREADS.set(database_threads())
    telemetry.DB_QUEUE_LIMIT.set(queue_limit())


class WorkerConsumer(NoDatabaseHopDispatch, AsyncWebsocketConsumer):
    node: WorkerNode | None = None
    hello_timer: asyncio.Future | None = None
    labels: tuple[str, str] = ("", "")  # telemetry's campaign and tier: the node's, after hello
    version = 1  # the protocol version the welcome negotiated

    async def connect(self) -> None:
        self.node = None
        self.labels = ("", "")
        _describe_process()
        self.bucket = TokenBucket(settings.WORKER_RATE_PER_SECOND, settings.WORKER_RATE_BURST)
        self.unexpected = UnexpectedErrorLog(log, "worker message")
        await self.accept()
        self.hello_timer = asyncio.ensure_future(self._close_without_hello(settings.WORKER_HELLO_SECONDS))

    async def _close_without_hello(self, seconds: float) -> None:
        """A socket that never says hello holds a connection slot for nothing: closed (4000)."""
        await asyncio.sleep(seconds)
        if self.node is None:
            await self.send(
                protocol.error(ErrorCode.NOT_AUTHENTICATED, f"no hello within {seconds:g} s of connecting")
            )
            await self.close(code=4000)

    async def disconnect(self, code: int) -> None:
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        if self.node is not None:
            telemetry.child(telemetry.CONNECTED, *self.labels).dec()
            # The database first: the channel layer may be away, the node is disconnected anyway.
            PRESENCE.forget(self.node.pk)
            await db(sessions.disconnected)(self.node)
            for group in self._groups():
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        request_id = None
        started = time.perf_counter()
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
            request_id = None if message.id is UNSET else message.id
            reply = await self.dispatch_message(message)
            await self.send(protocol.encode(reply, reply_to=request_id))
            if type(message) in DATABASE_WORK:
                telemetry.child(telemetry.ACK_SECONDS, *self.labels, protocol.kind(message)).observe(
                    time.perf_counter() - started
                )
                if isinstance(reply, protocol.SubmitAck):
                    telemetry.child(telemetry.ROUNDS_ACKED, *self.labels).inc()
        except ProtocolError as error:
            telemetry.child(telemetry.ERRORS, *self.labels, error.code.value).inc()
            if error.code == ErrorCode.BUSY:
                telemetry.child(telemetry.BUSY, *self.labels).inc()
            await self.send(
                protocol.error(error.code, error.message, request_id or error.request_id, error.data)
            )
            if error.code in FATAL:
                await self.close(code=CLOSE_CODES.get(error.code, 4000))
        except Exception:
            self.unexpected.exception()
            telemetry.child(telemetry.ERRORS, *self.labels, ErrorCode.INTERNAL.value).inc()
            await self.send(
                protocol.error(ErrorCode.INTERNAL, "the coordinator failed on this request", request_id)
            )

    async def dispatch_message(self, message: protocol.WorkerMessage) -> protocol.CoordinatorMessage:
        if isinstance(message, protocol.Hello):
            return await self.on_hello(message)
        if self.node is None:
            raise ProtocolError(ErrorCode.NOT_AUTHENTICATED, f"send hello before {protocol.kind(message)}")
        PRESENCE.touch(self.node.pk)  # any message proves liveness
        if type(message) not in DATABASE_WORK:
            return await self.answer(message)
        ADMISSION.admit()
        queued = telemetry.child(telemetry.DB_IN_FLIGHT, *self.labels)
        queued.inc()
        try:
            return await self.answer(message)
        finally:
            queued.dec()

    async def answer(self, message: protocol.WorkerMessage) -> protocol.CoordinatorMessage:
        """The reply to a welcomed connection's request."""
        node = self.node
        assert node is not None
        match message:
            case protocol.Heartbeat():
                state = await PRESENCE.campaign_state(node.campaign_id)  # no database round trip
                return protocol.HeartbeatAck(campaign_state=state)
            case protocol.Hello():
                raise ProtocolError(
                    ErrorCode.INVALID_MESSAGE, "hello was already accepted on this connection"
                )
            # Held-out evaluation is the same for a control node as for a volunteer's
            # (evaluations.py): the same questions, scored by the same verifiers.
            case protocol.EvalRequest(round=round):
                return await db(evaluations.issue)(node, round)
            case protocol.EvalSubmit(
                submission_id=submission_id, eval_id=eval_id, answers=answers, claimed_accuracy=claimed
            ):
                claimed_accuracy = None if claimed is UNSET else claimed
                return await db(evaluations.submit)(node, submission_id, eval_id, answers, claimed_accuracy)
        if node.is_control:
            return await self.answer_control(node, message)
        match message:
            case protocol.LeaseRequest(round=round):
                return await db(leases.issue_lease)(node, round)
            case protocol.ExtraLeaseRequest():
                raise ProtocolError(ErrorCode.INVALID_MESSAGE, "extra_lease_request: for control nodes only")
            case protocol.Submit(submission_id=submission_id, lease_id=lease_id, rollouts=rollouts):
                if self.version >= 2 and settings.POOL_SAMPLING != "celery":
                    # The round's draw, as its sample_request would have had it, in the same
                    # trip to a database thread as the submit (one hand-off and one connection
                    # checkout a round fewer).
                    stored, samples = await db(submit_and_draw)(node, submission_id, lease_id, rollouts)
                    return protocol.SubmitAck(**stored.ack, samples=samples)
                stored = await db(submissions.submit)(node, submission_id, lease_id, rollouts)
                ack = protocol.SubmitAck(**stored.ack)
                if self.version >= 2:  # drawn by a Celery worker (POOL_SAMPLING=celery)
                    ack.samples = await self._samples(node, stored.external_count())
                return ack
            case protocol.SampleRequest(count=count):
                return protocol.Samples(rollouts=await self._samples(node, count))
            case protocol.MetricsReport(round=round, metrics=metrics):
                row, next_lease = await db(report_and_lease)(node, round, metrics, self.version >= 2)
                POINTS.add(node.campaign_id, point(row))
                return protocol.MetricsAck(round=round, next_lease=next_lease)
            case protocol.Release(lease_id=lease_id):
                await db(leases.release)(node, lease_id)
                return protocol.ReleaseAck(lease_id=lease_id)
        raise AssertionError(f"no handler for {protocol.kind(message)}")  # every WorkerMessage is above

    async def answer_control(
        self, node: WorkerNode, message: protocol.WorkerMessage
    ) -> protocol.CoordinatorMessage:
        """The reply to a control node's request: the same requests, on control_nodes.py's paths
        (its paired questions, its rollouts out of every pool, nothing drawn for it)."""
        match message:
            case protocol.LeaseRequest(round=round):
                return await db(control_nodes.issue_lease)(node, round)
            case protocol.ExtraLeaseRequest(round=round, start=start, count=count):
                return await db(control_nodes.issue_extra_lease)(node, round, start, count)
            case protocol.Submit(submission_id=submission_id, lease_id=lease_id, rollouts=rollouts):
                stored = await db(submissions.submit)(node, submission_id, lease_id, rollouts)
                ack = protocol.SubmitAck(**stored.ack)
                if self.version >= 2:
                    ack.samples = []
                return ack
            case protocol.SampleRequest():
                return protocol.Samples(rollouts=[])
            case protocol.MetricsReport(round=round, metrics=metrics):
                # record_control_metrics pushes the point to the dashboards itself.
                _, next_lease = await db(report_and_lease_control)(node, round, metrics, self.version >= 2)
                return protocol.MetricsAck(round=round, next_lease=next_lease)
            case protocol.Release(lease_id=lease_id):
                # Kept: the control asks for the same round's questions when it comes back.
                return protocol.ReleaseAck(lease_id=lease_id)
        raise AssertionError(f"no handler for {protocol.kind(message)}")

    async def on_hello(self, hello: protocol.Hello) -> protocol.Welcome:
        if self.node is not None:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "hello was already accepted on this connection")
        limits = protocol.Limits(
            max_message_bytes=protocol.MAX_MESSAGE_BYTES,
            rate_per_second=settings.WORKER_RATE_PER_SECOND,
            rate_burst=settings.WORKER_RATE_BURST,
        )
        node, welcome = await db(sessions.hello)(hello, limits)
        self.node, self.version = node, welcome.protocol_version
        self.labels = telemetry.labels(node.campaign_id, node.tier)
        telemetry.child(telemetry.CONNECTED, *self.labels).inc()
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        PRESENCE.pushed_state(node.campaign_id, welcome.campaign.state)
        for group in self._groups():
            await self.channel_layer.group_add(group, self.channel_name)
        return welcome

    async def _samples(self, node: WorkerNode, count: int) -> list[Any]:
        """Up to ``count`` verified records of other nodes' rollouts (the pool's draw)."""
        args = (node.campaign_id, node.pk, count)
        if settings.POOL_SAMPLING == "celery":
            from swarm_app.coordinator.tasks import sample_pool

            result = sample_pool.delay(*args)
            return await db(result.get)(timeout=30)
        return await db(pool.sample_external)(*args)

    def _groups(self) -> list[str]:
        """The groups a welcomed connection joins: state pushes, and the ends of its token's and
        its node's sessions (a revocation, a ban)."""
        assert self.node is not None
        return [
            worker_group(self.node.campaign_id),
            groups.token_group(self.node.token_id),
            groups.node_group(self.node.pk),
        ]

    async def session_end(self, event: dict[str, Any]) -> None:
        """Group event: this connection's token was revoked or its node banned (groups.end_sessions)."""
        end = messages.receive_event(event, messages.SessionEnd)
        if end is None:
            return
        await self.send(protocol.error(end.code, end.message))
        await self.close(code=CLOSE_CODES.get(end.code, 4000))

    async def campaign_state(self, event: dict[str, Any]) -> None:
        """Group event from the web UI: the organizer paused, resumed or stopped the campaign."""
        change = messages.receive_event(event, messages.CampaignStateEvent)
        if change is None:
            return
        if self.node is not None:
            PRESENCE.pushed_state(self.node.campaign_id, change.state)
        await self.send(protocol.encode(protocol.CampaignState(state=change.state)))
