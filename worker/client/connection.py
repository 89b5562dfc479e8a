"""The websocket session with the coordinator: one logical session over successive connections.

Why it is built this way:

* **torch stays in the main thread.** The engine's round loop (worker/engine/agent.py) calls the
  :class:`~worker.engine.transport.Transport` methods synchronously between generation and training.
  The websocket lives in a background thread with its own asyncio loop, so heartbeats keep
  flowing (and the coordinator keeps counting the node alive) while the main thread spends
  minutes in ``generate`` or an optimizer step. The main thread hands each request to that loop
  and blocks on the reply.
* **Every request survives a dropped connection.** Requests carry an ``id`` and replies are
  matched by ``reply_to``. A request whose connection drops, or that gets no reply within its
  timeout, is sent again after reconnecting (the connection is presumed dead and replaced).
  Why that is safe for every request the worker sends is told in worker/client/transport.py.
* **Reconnection** uses exponential backoff with full jitter (delay uniform in
  [0, min(cap, base * 2**attempt)], base 0.5 s, cap 30 s), reset after each accepted hello, so a
  coordinator restart is not met by every volunteer at the same instant. Each new connection
  starts with the same hello (same ``node_id``), so the coordinator resumes the node.
* **Nothing the coordinator sends can crash the worker**: every frame is validated with
  ``protocol.parse(raw, "coordinator")``; a malformed one is logged and ignored (a welcome whose
  campaign settings this worker cannot read stops it: it must be upgraded). Which errors
  stop the worker and which are retried is worker/client/errors.py's policy.
* **The campaign's state is followed**: ``campaign_state`` pushes and every ``heartbeat_ack``
  update it. While paused (or pending) a lease request waits, polling by heartbeat, until the
  campaign runs again; once it is stopped, completed or failed the worker finishes cleanly.

:class:`Connection` is that session (lifecycle, reconnection, heartbeats, request and reply);
:class:`~worker.client.transport.WebsocketTransport` adds the round's requests on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException
from websockets.protocol import State

from worker import __version__
from worker.client.address import normalise_url
from worker.client.backoff import Backoff, busy_delay
from worker.client.errors import (
    CLOSE_CODES_FATAL,
    FATAL_CODES,
    TRANSIENT_CODES,
    CampaignFinished,
    FatalError,
    RequestError,
    TransportClosed,
    error_parts,
)
from worker.shared import protocol
from worker.shared.protocol import ErrorCode, ProtocolError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_REQUEST_TIMEOUT = 60.0  # a submit is re-scored by the coordinator before it answers
RUNNING = "running"
FINISHED_STATES = frozenset({"completed", "failed", "stopped"})


class _ConnectionLost(Exception):
    """Internal: the connection a request was sent on went away before its reply."""


class _Retry(Exception):
    """Internal: this connection attempt failed in a way worth retrying."""


class Connection:
    """The session with the coordinator's websocket, across reconnections.

    Synchronous methods for the main thread; the connection, its reconnection and heartbeats run
    in a background thread's asyncio loop. Use :meth:`start` (blocks until the first welcome,
    returning it) and :meth:`close`, or ``with`` (which only closes). Subclasses send their
    requests with ``self._call(self._request(protocol.LeaseRequest(round=...)))``.
    """

    def __init__(
        self,
        url: str,
        hello: protocol.Hello,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        open_timeout: float = 20.0,
        backoff: Backoff | None = None,
        max_transient_retries: int = 8,
        ping_interval: float | None = 20.0,
    ) -> None:
        self.url = normalise_url(url)
        self._hello = hello
        self.request_timeout = request_timeout
        self.open_timeout = open_timeout
        self.backoff = backoff or Backoff()
        self.max_transient_retries = max_transient_retries
        self.ping_interval = ping_interval
        # Read by the main thread (status line, run_worker); written by the loop thread.
        self.welcome: protocol.Welcome | None = None
        self.campaign_state = "unknown"
        self.connection_state = "idle"
        self.heartbeat_seconds = 10.0
        self.connections = 0  # accepted hellos so far
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Loop-thread state, created on the loop by _setup.
        self._conn: ClientConnection | None = None
        self._pending: dict[str, tuple[ClientConnection, asyncio.Future[Any]]] = {}
        self._change: asyncio.Event | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._fatal: FatalError | None = None
        self._finished: CampaignFinished | None = None
        self._closing = False
        self._answered_at = 0.0  # loop time of the last reply to one of this worker's requests

    # --- lifecycle (main thread) ---------------------------------------------------------------

    def start(self, timeout: float | None = None) -> dict[str, Any]:
        """Connect and say hello; block until the coordinator's welcome and return its fields.

        Keeps retrying an unreachable coordinator (with backoff) until ``timeout`` (None: for
        ever); raises :class:`FatalError` or :class:`CampaignFinished` when the hello is refused.
        """
        if self._loop is not None:
            raise RuntimeError("this transport was already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._run_loop, name="swarm-websocket", daemon=True)
        self._thread.start()
        self._call(self._setup())
        return self._call(self._first_welcome(), timeout)

    def close(self) -> None:
        """Close the socket and stop the background thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            self.connection_state = "closed"
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self.connection_state = "closed"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update_hello(self, **fields: Any) -> None:
        """Change what the next hello says (e.g. the measured generation speed)."""
        self._hello = msgspec.structs.replace(self._hello, **fields)

    @property
    def node_id(self) -> str:
        return self._hello.node_id

    def heartbeat(self) -> str:
        """One heartbeat now; returns the campaign's state."""
        return self._call(self._refresh_state())

    # --- main thread <-> loop ------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop thread and wait for it; Ctrl-C cancels it."""
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise TransportClosed("the websocket transport is not running")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                # Short waits keep the main thread responsive to signals on every platform.
                wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                try:
                    return future.result(wait)
                except TimeoutError:
                    if future.done():
                        raise  # the coroutine itself raised TimeoutError
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
        except BaseException:
            future.cancel()
            raise

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    # --- loop thread: connection supervisor ----------------------------------------------------

    async def _setup(self) -> None:
        self._change = asyncio.Event()
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())

    async def _shutdown(self) -> None:
        self._closing = True
        self._notify()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 3)
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _notify(self) -> None:
        """Wake everything waiting for a change (connection, campaign state, fatal, closing)."""
        if self._change is not None:
            self._change.set()
            self._change = asyncio.Event()

    async def _wait_change(self, seconds: float) -> None:
        event = self._change
        assert event is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)

    def _raise_if_done(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._finished is not None:
            raise self._finished
        if self._closing:
            raise TransportClosed("the websocket transport was closed")

    async def _first_welcome(self) -> protocol.Welcome:
        while self.welcome is None:
            self._raise_if_done()
            await self._wait_change(1.0)
        return self.welcome

    async def _connection(self) -> ClientConnection:
        while True:
            self._raise_if_done()
            conn = self._conn
            if conn is not None and conn.state is State.OPEN:
                return conn
            await self._wait_change(1.0)

    def _set_fatal(self, error: FatalError) -> None:
        if self._fatal is None:
            log.error("the coordinator refused this worker: %s", error)
            self._fatal = error
        self.connection_state = "refused"
        self._notify()

    async def _sleep(self, delay: float) -> None:
        """Sleep, waking early when the transport closes or fails."""
        end = asyncio.get_running_loop().time() + delay
        while not (self._closing or self._fatal):
            left = end - asyncio.get_running_loop().time()
            if left <= 0:
                return
            await self._wait_change(left)

    async def _supervise(self) -> None:
        """Run the connection; a bug in it must stop the worker, not leave requests waiting."""
        try:
            await self._connections()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.exception("the websocket client failed")
            self._set_fatal(FatalError("client_error", f"the websocket client failed: {error!r}"))

    async def _connections(self) -> None:
        """Connect, hello, read until the connection drops; again, with backoff, until told to stop."""
        while not (self._closing or self._fatal or self._finished):
            self.connection_state = "connecting" if self.connections == 0 else "reconnecting"
            try:
                conn = await connect(
                    self.url,
                    max_size=protocol.MAX_MESSAGE_BYTES,
                    open_timeout=self.open_timeout,
                    close_timeout=3,
                    ping_interval=self.ping_interval,
                    ping_timeout=self.ping_interval,
                    user_agent_header=f"swarm-worker/{__version__}",
                )
            except InvalidURI as error:
                self._set_fatal(FatalError("invalid_url", str(error)))
                break
            except (OSError, TimeoutError, WebSocketException) as error:
                await self._wait_before_retry(f"cannot reach {self.url}: {error or type(error).__name__}")
                continue
            try:
                welcome = await self._handshake(conn)
            except (FatalError, CampaignFinished) as error:
                if isinstance(error, FatalError):
                    self._set_fatal(error)
                else:
                    self._finished = error
                    self.connection_state = "finished"
                    self._notify()
                await self._abort(conn)
                break
            except (_Retry, ConnectionClosed, TimeoutError, OSError) as error:
                await self._abort(conn)
                await self._wait_before_retry(f"hello failed: {error or type(error).__name__}")
                continue
            if not self._accept(welcome):
                await self._abort(conn)
                break
            self._conn = conn
            self.connection_state = "connected"
            self.backoff.reset()
            self._notify()
            heartbeats = asyncio.get_running_loop().create_task(self._heartbeats(conn))
            try:
                await self._read(conn)
            finally:
                heartbeats.cancel()
                self._conn = None
                for request_id, (owner, future) in list(self._pending.items()):
                    if owner is conn and not future.done():
                        future.set_exception(_ConnectionLost(request_id))
                self._notify()
            code = conn.close_code
            if code in CLOSE_CODES_FATAL and self._fatal is None:
                self._set_fatal(
                    FatalError(CLOSE_CODES_FATAL[code], f"the coordinator closed with code {code}")
                )
            if self._closing or self._fatal:
                break
            await self._wait_before_retry(f"connection lost (close code {code})")
        if self._closing:
            self.connection_state = "closed"

    async def _wait_before_retry(self, reason: str) -> None:
        delay = self.backoff.next_delay()
        log.warning("%s; reconnecting in %.1f s", reason, delay)
        self.connection_state = f"reconnecting in {delay:.0f}s"
        await self._sleep(delay)

    async def _abort(self, conn: ClientConnection) -> None:
        """Drop a connection now (no closing handshake): its peer is presumed unresponsive."""
        transport = getattr(conn, "transport", None)
        if transport is not None:
            transport.abort()
        else:  # pragma: no cover - websockets always has one
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 1)

    async def _handshake(self, conn: ClientConnection) -> protocol.Welcome:
        """Send the hello and wait for its answer on a fresh connection."""
        hello_id = uuid.uuid4().hex
        await conn.send(protocol.encode(msgspec.structs.replace(self._hello, id=hello_id)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.request_timeout, self.open_timeout)
        while True:
            raw = await asyncio.wait_for(conn.recv(), max(0.0, deadline - loop.time()))
            try:
                message = protocol.parse(raw, "coordinator")
            except ProtocolError as error:
                if error.path.startswith("campaign.config"):  # a newer coordinator's settings
                    raise FatalError(
                        "unsupported_campaign",
                        f"this worker cannot read the campaign's settings ({error.message})",
                    ) from None
                log.warning("ignoring a malformed message from the coordinator: %s", error)
                continue
            if isinstance(message, protocol.CampaignState):
                self._set_campaign_state(message.state)
                continue
            if message.reply_to != hello_id:
                if isinstance(message, protocol.Error):
                    code, text, _ = error_parts(message)
                    if code in FATAL_CODES:
                        raise FatalError(code, text)
                log.info("ignoring %s before the welcome", protocol.kind(message))
                continue
            if isinstance(message, protocol.Welcome):
                return message
            if not isinstance(message, protocol.Error):
                raise _Retry(f"the hello was answered by {protocol.kind(message)!r}")
            code, text, _ = error_parts(message)
            if code == ErrorCode.CAMPAIGN_NOT_RUNNING:
                raise CampaignFinished(text)
            if code in TRANSIENT_CODES:
                raise _Retry(f"{text} ({code})")
            raise FatalError(code, text)  # bad token, version, no tier fits, a hello it cannot read

    def _accept(self, welcome: protocol.Welcome) -> bool:
        """Take in a welcome; False when this process cannot continue with it."""
        first = self.welcome
        if first is not None and welcome.tier != first.tier:
            self._set_fatal(
                FatalError(
                    "tier_changed",
                    f"the coordinator now assigns tier {welcome.tier!r}, this worker runs "
                    f"{first.tier!r}; restart the worker",
                )
            )
            return False
        self.welcome = welcome
        self.connections += 1
        self.heartbeat_seconds = max(1.0, float(welcome.heartbeat_seconds))
        self._set_campaign_state(welcome.campaign.state)
        if self.connections > 1:
            log.info("reconnected to the coordinator")
        return True

    def _parse(self, raw: str | bytes) -> protocol.CoordinatorMessage | None:
        try:
            return protocol.parse(raw, "coordinator")
        except ProtocolError as error:
            log.warning("ignoring a malformed message from the coordinator: %s", error)
            return None

    async def _read(self, conn: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in conn:
                message = self._parse(raw)
                if message is not None:
                    self._dispatch(message)

    def _dispatch(self, message: protocol.CoordinatorMessage) -> None:
        if isinstance(message, protocol.Error):
            code, text, _ = error_parts(message)
            if code in FATAL_CODES:
                self._set_fatal(FatalError(code, text))
        if message.reply_to and message.reply_to in self._pending:
            self._answered_at = asyncio.get_running_loop().time()
            _, future = self._pending[message.reply_to]
            if not future.done():
                future.set_result(message)
        elif isinstance(message, protocol.CampaignState):
            self._set_campaign_state(message.state)
        elif isinstance(message, protocol.Error):
            log.warning("the coordinator reports: %s (%s)", message.message, message.code)
        else:
            log.debug("ignoring an unexpected %s message", protocol.kind(message))

    def _set_campaign_state(self, state: str) -> None:
        if state != self.campaign_state:
            if self.campaign_state != "unknown" or state != RUNNING:
                log.info("campaign is %s", state)
            self.campaign_state = state
            self._notify()

    async def _heartbeats(self, conn: ClientConnection) -> None:
        """A heartbeat once ``heartbeat_seconds`` pass without an answered request.

        Any message proves the node alive to the coordinator (swarm_app/coordinator/presence.py)
        and an answer proves this connection alive, so a worker that is talking anyway sends no
        heartbeat: each one costs the coordinator about as much CPU as a lease request's
        transport (bench/messages.py), and at a 30 s round, one in three was redundant."""
        timeout = max(10.0, 2 * self.heartbeat_seconds)
        loop = asyncio.get_running_loop()
        self._answered_at = loop.time()  # the welcome
        while True:
            quiet = loop.time() - self._answered_at
            if quiet < self.heartbeat_seconds:
                await asyncio.sleep(self.heartbeat_seconds - quiet)
                continue
            try:
                message = await self._exchange(conn, protocol.Heartbeat(), timeout)
            except TimeoutError:
                log.warning("no heartbeat reply within %.0f s; reconnecting", timeout)
                await self._abort(conn)
                return
            except _ConnectionLost:
                return
            if isinstance(message, protocol.HeartbeatAck):
                self._set_campaign_state(message.campaign_state)

    # --- loop thread: requests -----------------------------------------------------------------

    async def _exchange(
        self, conn: ClientConnection, request: protocol.WorkerMessage, reply_seconds: float
    ) -> protocol.CoordinatorMessage:
        """One request on one connection: its reply (possibly an error), or an exception."""
        request_id = uuid.uuid4().hex
        text = protocol.encode(msgspec.structs.replace(request, id=request_id))
        if len(text.encode()) > protocol.MAX_MESSAGE_BYTES:
            raise RequestError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"{protocol.kind(request)} of {len(text.encode())} bytes exceeds the protocol's "
                f"{protocol.MAX_MESSAGE_BYTES}",
            )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (conn, future)
        try:
            try:
                await conn.send(text)
            except ConnectionClosed:
                raise _ConnectionLost(request_id) from None
            return await asyncio.wait_for(future, reply_seconds)
        finally:
            self._pending.pop(request_id, None)

    async def _request(self, request: protocol.WorkerMessage) -> Any:
        """Send ``request`` until it is answered by its reply type (returned); see the module
        docstring."""
        timeout = self.request_timeout
        kind = protocol.kind(request)
        expected = protocol.REPLIES[type(request)]
        retry = Backoff(base=1.0, cap=15.0)
        failures = 0
        while True:
            conn = await self._connection()
            try:
                message = await self._exchange(conn, request, timeout)
            except _ConnectionLost:
                log.info("%s: connection lost before the reply; sending it again after reconnecting", kind)
                await self._sleep(0.05)  # yield, so the supervisor can notice the dropped connection
                continue
            except TimeoutError:
                log.warning("%s: no reply within %.0f s; reconnecting to send it again", kind, timeout)
                await self._abort(conn)
                await self._sleep(0.05)  # let the reader notice the dropped connection
                continue
            if isinstance(message, expected):
                return message
            if isinstance(message, protocol.Error):
                code, text, data = error_parts(message)
                if code in FATAL_CODES:
                    raise self._fatal or FatalError(code, text)
                if code == ErrorCode.BUSY:  # the coordinator is behind: wait as told, same connection
                    await self._sleep(busy_delay(data))
                    continue
                if code not in TRANSIENT_CODES:
                    raise RequestError(code, text, data)
                problem = f"{text} ({code})"
            else:
                problem = f"answered by {protocol.kind(message)!r}, expected {protocol.kind(expected)!r}"
            failures += 1
            if failures > self.max_transient_retries:
                raise RequestError(ErrorCode.INTERNAL, f"{kind}: {problem}, {failures} times")
            if isinstance(message, protocol.Error) and message.code == ErrorCode.NOT_AUTHENTICATED:
                await self._abort(conn)  # a fresh connection says hello again
            delay = retry.next_delay()
            log.warning("%s: %s; trying again in %.1f s", kind, problem, delay)
            await self._sleep(delay)

    async def _refresh_state(self) -> str:
        message = await self._request(protocol.Heartbeat())
        self._set_campaign_state(message.campaign_state)
        return self.campaign_state

    async def _wait_running(self) -> None:
        announced = False
        while True:
            self._raise_if_done()
            state = self.campaign_state
            if state in FINISHED_STATES:
                raise CampaignFinished(f"the campaign is {state}")
            if state in (RUNNING, "unknown"):
                return
            if not announced:
                log.info("campaign is %s: waiting until it runs", state)
                announced = True
            await self._wait_change(self.heartbeat_seconds)

    async def _try_once(self, request: protocol.WorkerMessage, reply_seconds: float) -> Any:
        """One try of ``kind`` on the current connection, never sent again: its reply, or
        :class:`RequestError` for an error reply (or _ConnectionLost, TimeoutError)."""
        conn = self._conn
        if conn is None:
            raise _ConnectionLost("not connected")
        message = await self._exchange(conn, request, reply_seconds)
        if isinstance(message, protocol.Error):
            raise RequestError(*error_parts(message))
        return message
