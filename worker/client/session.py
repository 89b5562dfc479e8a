"""The volunteer's websocket client: the engine's Transport over the coordinator's protocol.

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
  That is safe for every request the worker sends: a lease request for the same round returns
  the same active lease; a submit carries a ``submission_id`` chosen once per lease and reused
  on every retry, so a replay of an accepted submission is answered ``duplicate_submission``
  with the original ack, which counts as success; metrics and releases are idempotent.
* **Reconnection** uses exponential backoff with full jitter (delay uniform in
  [0, min(cap, base * 2**attempt)], base 0.5 s, cap 30 s), reset after each accepted hello, so a
  coordinator restart is not met by every volunteer at the same instant. Each new connection
  starts with the same hello (same ``node_id``), so the coordinator resumes the node.
* **Only fatal errors stop the worker**: a bad or revoked token, a banned node, no common
  protocol version (the coordinator closes the socket after those), a hello the coordinator can
  never accept (no tier fits this machine), and submissions it rejected as false (stopping
  before a ban). Everything else is retried or, for optional requests (external samples,
  metrics), logged and skipped.
* **Nothing the coordinator sends can crash the worker**: every frame is validated with
  ``protocol.parse(raw, "coordinator")``; a malformed one is logged and ignored.
* **The campaign's state is followed**: ``campaign_state`` pushes and every ``heartbeat_ack``
  update it. While paused (or pending) a lease request waits, polling by heartbeat, until the
  campaign runs again; once it is stopped, completed or failed the worker finishes cleanly.

:func:`run_worker` is the volunteer's main program (``swarm-worker join``): hello, load the
assigned tier, resume from the checkpoint in the data directory, and run rounds until the
campaign ends, with a rich status line.

Generation speed in the hello: the first hello a new node ever sends reports 0.0 tokens/s (the
model to measure is only known from the welcome). After loading, a short real generation is
measured; later hellos (reconnections, restarts, read from ``node-stats.json``) report it, and
after each round the speed actually observed.

Checkpoints go to ``<data_dir>/checkpoints/campaign-<id>/<node_id>.pt`` (atomic writes): every
round for models up to 100M parameters (the tiny tiers: milliseconds), else every
:func:`checkpoint_interval` rounds, and always on a clean exit when the weights are consistent
(never halfway through a training step).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException
from websockets.protocol import State

from worker import __version__
from worker.client.identity import (
    checkpoint_path,
    load_identity,
    load_stats,
    lock_data_dir,
    save_stats,
)
from worker.engine.transport import Lease
from worker.shared import protocol
from worker.shared.protocol import ErrorCode, Message, ProtocolError
from worker.shared.questions import Question, QuestionRef
from worker.shared.rollout import Rollout

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from worker.engine.agent import Agent
    from worker.shared.hardware import Hardware
    from worker.shared.tiers import ModelSpec

log = logging.getLogger(__name__)
T = TypeVar("T")

WS_PATH = "/ws/worker/"
DEFAULT_REQUEST_TIMEOUT = 60.0  # a submit is re-scored by the coordinator before it answers
RUNNING = "running"
WAITING_STATES = frozenset({"pending", "paused"})
FINISHED_STATES = frozenset({"completed", "failed", "stopped"})
FATAL_CODES = frozenset(
    {ErrorCode.INVALID_TOKEN, ErrorCode.TOKEN_REVOKED, ErrorCode.BANNED, ErrorCode.UNSUPPORTED_VERSION}
)
# Errors worth another try on the same request: the coordinator stored nothing.
TRANSIENT_CODES = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.INTERNAL, ErrorCode.NOT_AUTHENTICATED})
# Errors on a submit that mean "this lease can no longer be submitted": do the round again.
LEASE_LOST_CODES = frozenset({ErrorCode.LEASE_EXPIRED, ErrorCode.UNKNOWN_LEASE, ErrorCode.LEASE_NOT_YOURS})
# The coordinator found our submission false or malformed: stop before it bans the node.
REJECTED_CODES = frozenset(
    {
        ErrorCode.REWARD_MISMATCH,
        ErrorCode.GROUND_TRUTH_MISMATCH,
        ErrorCode.LEASE_MISMATCH,
        ErrorCode.INVALID_MESSAGE,
        ErrorCode.MESSAGE_TOO_LARGE,
    }
)
CLOSE_CODES_FATAL = {4001: ErrorCode.INVALID_TOKEN, 4003: ErrorCode.BANNED}


# --- errors ------------------------------------------------------------------------------------


class ClientError(RuntimeError):
    """Base of the client's errors."""


class FatalError(ClientError):
    """The coordinator will not accept this worker as it is; retrying cannot help.

    ``code`` is the protocol's error code (or a client-side one such as ``invalid_url``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} ({code})")
        self.code = str(code)
        self.message = message


class SubmissionRejected(FatalError):
    """The coordinator judged a submission false or malformed; continuing would risk a ban."""


class CampaignFinished(ClientError):
    """The campaign (or this node's share of it) is over: stop cleanly."""


class LeaseLost(ClientError):
    """This round's lease can no longer be submitted (expired, released, unknown): redo the round."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = str(code)


class RequestError(ClientError):
    """The coordinator answered a request with an error that retrying will not fix."""

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = str(code)
        self.message = message
        self.data = data


class TransportClosed(ClientError):
    """The transport was closed (or never started)."""


class _ConnectionLost(Exception):
    """Internal: the connection a request was sent on went away before its reply."""


class _Retry(Exception):
    """Internal: this connection attempt failed in a way worth retrying."""


# --- small pure helpers ------------------------------------------------------------------------


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


def is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


class Backoff:
    """Exponential backoff with full jitter: attempt k waits uniform(0, min(cap, base * 2**k))."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None) -> None:
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.attempt = 0
        self.rng = rng or random.Random()

    def ceiling(self, attempt: int | None = None) -> float:
        k = self.attempt if attempt is None else attempt
        return min(self.cap, self.base * 2 ** min(k, 64))

    def next_delay(self) -> float:
        delay = self.rng.uniform(0.0, self.ceiling())
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


def checkpoint_interval(params: int) -> int:
    """Rounds between checkpoints: 1 up to 100M parameters, then ~1 per 100M (0.5B: 5), at most 25.

    A tiny tier's checkpoint takes milliseconds; a big model's (weights plus Adam states) takes
    seconds and gigabytes, and a crash then costs at most K rounds, which the coordinator's
    ``resume_round`` lets the node skip rather than redo.
    """
    if params <= 100_000_000:
        return 1
    return max(1, min(25, round(params / 100_000_000)))


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Finite numbers only (JSON has no NaN), string keys, small enough for the protocol."""
    cleaned: dict[str, float] = {}
    size = 2  # "{}"
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        name, number = str(key)[:100], float(value)
        entry = len(json.dumps({name: number})) - 2 + 2  # "k": v plus ", "
        if size + entry > 8000:  # the protocol's limit on the metrics object; the rest is dropped
            break
        cleaned[name] = number
        size += entry
    return cleaned


def _question(item: dict[str, Any]) -> Question:
    ref = item["ref"]
    if not isinstance(ref, dict):
        raise TypeError("ref: expected an object")
    question, answer, metadata = item["question"], item["answer"], item["metadata"]
    if not isinstance(question, str) or not isinstance(answer, str) or not isinstance(metadata, dict):
        raise TypeError("question and answer must be strings, metadata an object")
    return Question(QuestionRef.from_json(ref), question, answer, metadata)


def _error_parts(message: Message) -> tuple[str, str, dict[str, Any] | None]:
    fields = message.fields
    return str(fields["code"]), str(fields["message"]), fields.get("data")


# --- the transport -----------------------------------------------------------------------------


class WebsocketTransport:
    """The engine's :class:`~worker.engine.transport.Transport` over the coordinator's websocket.

    Synchronous methods for the main thread; the connection, its reconnection and heartbeats run
    in a background thread's asyncio loop. Use :meth:`start` (blocks until the first welcome,
    returning its fields) and :meth:`close`, or ``with`` (which only closes).
    """

    def __init__(
        self,
        url: str,
        hello: dict[str, Any],
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        open_timeout: float = 20.0,
        backoff: Backoff | None = None,
        max_transient_retries: int = 8,
        ping_interval: float | None = 20.0,
    ) -> None:
        self.url = normalise_url(url)
        self._hello = dict(hello)
        self.request_timeout = request_timeout
        self.open_timeout = open_timeout
        self.backoff = backoff or Backoff()
        self.max_transient_retries = max_transient_retries
        self.ping_interval = ping_interval
        # Read by the main thread (status line, run_worker); written by the loop thread.
        self.welcome: dict[str, Any] | None = None
        self.campaign_state = "unknown"
        self.connection_state = "idle"
        self.heartbeat_seconds = 10.0
        self.connections = 0  # accepted hellos so far
        self.active_lease: Lease | None = None  # leased and not yet submitted
        self._submission_ids: dict[str, str] = {}  # lease_id -> submission_id, reused on retries
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Loop-thread state, created on the loop by _setup.
        self._conn: ClientConnection | None = None
        self._pending: dict[str, tuple[ClientConnection, asyncio.Future[Message]]] = {}
        self._change: asyncio.Event | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._fatal: FatalError | None = None
        self._finished: CampaignFinished | None = None
        self._closing = False

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

    def __enter__(self) -> WebsocketTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update_hello(self, **fields: Any) -> None:
        """Change what the next hello says (e.g. the measured generation speed)."""
        self._hello = {**self._hello, **fields}

    @property
    def node_id(self) -> str:
        return str(self._hello.get("node_id", ""))

    # --- the Transport protocol (main thread) --------------------------------------------------

    def lease(self, agent_id: str, round: int, count: int) -> Lease:
        """This node's questions for ``round``; waits while the campaign is paused.

        Raises :class:`CampaignFinished` when the campaign ended or ``round`` is past its rounds.
        """
        message = self._call(self._lease(round))
        fields = message.fields
        if fields["round"] != round:
            raise RequestError(
                ErrorCode.INVALID_MESSAGE, f"asked for round {round}, got a lease for {fields['round']}"
            )
        try:
            questions = [_question(item) for item in fields["questions"]]
        except (KeyError, TypeError, ValueError) as error:
            raise RequestError(ErrorCode.INVALID_MESSAGE, f"lease {fields['lease_id']}: {error}") from None
        if len(questions) != count:
            log.info(
                "round %d: the coordinator leased %d questions (asked for %d)", round, len(questions), count
            )
        lease = Lease(fields["lease_id"], round, questions)
        self.active_lease = lease
        return lease

    def submit(self, lease: Lease, rollouts: list[Rollout]) -> list[Rollout]:
        """Share the round's rollouts; returns copies carrying the coordinator's verified rewards.

        Raises :class:`LeaseLost` (redo the round with a new lease) or
        :class:`SubmissionRejected` (the coordinator judged them false: stop).
        """
        submission_id = self._submission_ids.setdefault(lease.lease_id, uuid.uuid4().hex)
        fields = {"submission_id": submission_id, "lease_id": lease.lease_id, "rollouts": rollouts}
        try:
            ack = self._call(self._request("submit", fields)).fields
        except RequestError as error:
            ack = self._submit_error(lease, error)
        verified = self._apply_ack(lease, rollouts, ack)
        self._forget(lease)
        return verified

    def sample_external(self, agent_id: str, round: int, count: int, strategy: str) -> list[Rollout]:
        """Up to ``count`` verified rollouts of other nodes; the coordinator applies the campaign's
        strategy. Optional for the round: an error is logged and answered with none."""
        count = max(0, min(count, protocol.MAX_ROLLOUTS_PER_MESSAGE))
        if count == 0:
            return []
        try:
            message = self._call(self._request("sample_request", {"round": round, "count": count}))
        except (RequestError, CampaignFinished) as error:
            log.warning("round %d: no external rollouts (%s)", round, error)
            return []
        return [r for r in message.fields["rollouts"] if r.agent_id != agent_id]

    def report(self, agent_id: str, round: int, metrics: dict[str, float]) -> None:
        """Send the round's metrics (they also advance the coordinator's resume round)."""
        speed = metrics.get("tokens_per_second")
        if isinstance(speed, int | float) and math.isfinite(speed) and speed > 0:
            self.update_hello(generation_tokens_per_second=float(speed))
        try:
            self._call(self._request("metrics", {"round": round, "metrics": clean_metrics(metrics)}))
        except (RequestError, CampaignFinished) as error:
            log.warning("round %d: metrics not recorded (%s)", round, error)

    # --- more requests (main thread) -----------------------------------------------------------

    def heartbeat(self) -> str:
        """One heartbeat now; returns the campaign's state."""
        return self._call(self._refresh_state())

    def release_active(self, timeout: float = 5.0) -> bool:
        """Give the active lease back (the worker is stopping); one quick try, never raises."""
        lease = self.active_lease
        if lease is None or self._loop is None:
            return False
        try:
            self._call(self._release_once(lease.lease_id, timeout), timeout=timeout + 1)
        except Exception as error:  # the coordinator reissues it at its deadline anyway
            log.info("could not release lease %s (%s); it expires at its deadline", lease.lease_id, error)
            return False
        self._forget(lease)
        return True

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

    async def _first_welcome(self) -> dict[str, Any]:
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

    async def _handshake(self, conn: ClientConnection) -> dict[str, Any]:
        """Send the hello and wait for its answer on a fresh connection."""
        hello_id = uuid.uuid4().hex
        await conn.send(protocol.encode("hello", id=hello_id, **self._hello))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.request_timeout, self.open_timeout)
        while True:
            raw = await asyncio.wait_for(conn.recv(), max(0.0, deadline - loop.time()))
            message = self._parse(raw)
            if message is None:
                continue
            if message.type == "campaign_state":
                self._set_campaign_state(message.fields["state"])
                continue
            if message.reply_to != hello_id:
                if message.type == "error":
                    code, text, _ = _error_parts(message)
                    if code in FATAL_CODES:
                        raise FatalError(code, text)
                log.info("ignoring %s before the welcome", message.type)
                continue
            if message.type == "welcome":
                return message.fields
            if message.type != "error":
                raise _Retry(f"the hello was answered by {message.type!r}")
            code, text, _ = _error_parts(message)
            if code == ErrorCode.CAMPAIGN_NOT_RUNNING:
                raise CampaignFinished(text)
            if code in TRANSIENT_CODES:
                raise _Retry(f"{text} ({code})")
            raise FatalError(code, text)  # bad token, version, no tier fits, a hello it cannot read

    def _accept(self, welcome: dict[str, Any]) -> bool:
        """Take in a welcome; False when this process cannot continue with it."""
        first = self.welcome
        if first is not None and welcome["tier"] != first["tier"]:
            self._set_fatal(
                FatalError(
                    "tier_changed",
                    f"the coordinator now assigns tier {welcome['tier']!r}, this worker runs "
                    f"{first['tier']!r}; restart the worker",
                )
            )
            return False
        self.welcome = welcome
        self.connections += 1
        self.heartbeat_seconds = max(1.0, float(welcome["heartbeat_seconds"]))
        campaign = welcome["campaign"]
        if isinstance(campaign.get("state"), str):
            self._set_campaign_state(campaign["state"])
        if self.connections > 1:
            log.info("reconnected to the coordinator")
        return True

    def _parse(self, raw: str | bytes) -> Message | None:
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

    def _dispatch(self, message: Message) -> None:
        if message.type == "error":
            code, text, _ = _error_parts(message)
            if code in FATAL_CODES:
                self._set_fatal(FatalError(code, text))
        if message.reply_to is not None and message.reply_to in self._pending:
            _, future = self._pending[message.reply_to]
            if not future.done():
                future.set_result(message)
        elif message.type == "campaign_state":
            self._set_campaign_state(message.fields["state"])
        elif message.type == "error":
            log.warning("the coordinator reports: %s (%s)", message.fields["message"], message.fields["code"])
        else:
            log.debug("ignoring an unexpected %s message", message.type)

    def _set_campaign_state(self, state: str) -> None:
        if state != self.campaign_state:
            if self.campaign_state != "unknown" or state != RUNNING:
                log.info("campaign is %s", state)
            self.campaign_state = state
            self._notify()

    async def _heartbeats(self, conn: ClientConnection) -> None:
        timeout = max(10.0, 2 * self.heartbeat_seconds)
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                message = await self._exchange(conn, "heartbeat", {}, timeout)
            except TimeoutError:
                log.warning("no heartbeat reply within %.0f s; reconnecting", timeout)
                await self._abort(conn)
                return
            except _ConnectionLost:
                return
            if message.type == "heartbeat_ack":
                self._set_campaign_state(message.fields["campaign_state"])

    # --- loop thread: requests -----------------------------------------------------------------

    async def _exchange(
        self, conn: ClientConnection, kind: str, fields: dict[str, Any], reply_seconds: float
    ) -> Message:
        """One request on one connection: its reply (possibly an error), or an exception."""
        request_id = uuid.uuid4().hex
        text = protocol.encode(kind, id=request_id, **fields)
        if len(text.encode()) > protocol.MAX_MESSAGE_BYTES:
            raise RequestError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"{kind} of {len(text.encode())} bytes exceeds the protocol's {protocol.MAX_MESSAGE_BYTES}",
            )
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (conn, future)
        try:
            try:
                await conn.send(text)
            except ConnectionClosed:
                raise _ConnectionLost(request_id) from None
            return await asyncio.wait_for(future, reply_seconds)
        finally:
            self._pending.pop(request_id, None)

    async def _request(self, kind: str, fields: dict[str, Any]) -> Message:
        """Send ``kind`` until it is answered by its reply type; see the module docstring."""
        timeout = self.request_timeout
        expected = protocol.WORKER_MESSAGES[kind].reply
        retry = Backoff(base=1.0, cap=15.0)
        failures = 0
        while True:
            conn = await self._connection()
            try:
                message = await self._exchange(conn, kind, fields, timeout)
            except _ConnectionLost:
                log.info("%s: connection lost before the reply; sending it again after reconnecting", kind)
                await self._sleep(0.05)  # yield, so the supervisor can notice the dropped connection
                continue
            except TimeoutError:
                log.warning("%s: no reply within %.0f s; reconnecting to send it again", kind, timeout)
                await self._abort(conn)
                await self._sleep(0.05)  # let the reader notice the dropped connection
                continue
            if message.type == expected:
                return message
            if message.type == "error":
                code, text, data = _error_parts(message)
                if code in FATAL_CODES:
                    raise self._fatal or FatalError(code, text)
                if code not in TRANSIENT_CODES:
                    raise RequestError(code, text, data)
                problem = f"{text} ({code})"
            else:
                problem = f"answered by {message.type!r}, expected {expected!r}"
            failures += 1
            if failures > self.max_transient_retries:
                raise RequestError(ErrorCode.INTERNAL, f"{kind}: {problem}, {failures} times")
            if message.type == "error" and message.fields["code"] == ErrorCode.NOT_AUTHENTICATED:
                await self._abort(conn)  # a fresh connection says hello again
            delay = retry.next_delay()
            log.warning("%s: %s; trying again in %.1f s", kind, problem, delay)
            await self._sleep(delay)

    async def _refresh_state(self) -> str:
        message = await self._request("heartbeat", {})
        self._set_campaign_state(message.fields["campaign_state"])
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

    def _campaign_rounds(self) -> int | None:
        config = (self.welcome or {}).get("campaign", {}).get("config", {})
        rounds = config.get("rounds") if isinstance(config, dict) else None
        return rounds if isinstance(rounds, int) else None

    async def _lease(self, round: int) -> Message:
        while True:
            await self._wait_running()
            try:
                return await self._request("lease_request", {"round": round})
            except RequestError as error:
                if error.code != ErrorCode.CAMPAIGN_NOT_RUNNING:
                    raise
                rounds = self._campaign_rounds()
                if rounds is not None and round >= rounds:
                    raise CampaignFinished(error.message) from None
                # Paused or stopped since the last news: ask, then wait it out (or finish).
                if await self._refresh_state() == RUNNING:
                    await self._sleep(self.heartbeat_seconds)

    async def _release_once(self, lease_id: str, reply_seconds: float) -> None:
        conn = self._conn
        if conn is None:
            raise _ConnectionLost("not connected")
        message = await self._exchange(conn, "release", {"lease_id": lease_id}, reply_seconds)
        if message.type == "error":
            raise RequestError(*_error_parts(message))

    # --- submit helpers ------------------------------------------------------------------------

    def _submit_error(self, lease: Lease, error: RequestError) -> dict[str, Any]:
        """The ack a failed submit still yields (a replay), or the exception it means."""
        if error.code == ErrorCode.DUPLICATE_SUBMISSION and error.data:
            try:
                ack = protocol.parse(json.dumps({"type": "submit_ack", **error.data}), "coordinator")
            except ProtocolError as bad:
                log.warning("duplicate_submission with an unreadable ack: %s", bad)
            else:
                log.info("lease %s: submission was already stored (a retried submit)", lease.lease_id)
                return ack.fields
        if error.code in LEASE_LOST_CODES or error.code == ErrorCode.DUPLICATE_SUBMISSION:
            self._forget(lease)
            raise LeaseLost(error.code, f"lease {lease.lease_id}: {error.message}") from None
        if error.code in REJECTED_CODES:
            raise SubmissionRejected(
                error.code,
                f"the coordinator rejected this worker's rollouts: {error.message}. Stopping before "
                "the node is banned; check that worker and coordinator run the same versions",
            ) from None
        raise error

    def _apply_ack(self, lease: Lease, rollouts: list[Rollout], ack: dict[str, Any]) -> list[Rollout]:
        ours = [r.rollout_id for r in rollouts]
        verified = ack["verified_rewards"]
        if ack["lease_id"] != lease.lease_id or ack["rollout_ids"] != ours or len(verified) != len(rollouts):
            # An ack for other rollouts (e.g. an earlier process's): its rewards are not for these.
            self._forget(lease)
            raise LeaseLost(
                ErrorCode.DUPLICATE_SUBMISSION, f"lease {lease.lease_id} was submitted by another attempt"
            )
        result = []
        for rollout, rewards in zip(rollouts, verified, strict=True):
            if len(rewards) != rollout.group_size:
                raise RequestError(
                    ErrorCode.INVALID_MESSAGE, "verified rewards do not match the rollouts' groups"
                )
            result.append(dataclasses.replace(rollout, rewards=[float(r) for r in rewards]))
        return result

    def _forget(self, lease: Lease) -> None:
        self._submission_ids.pop(lease.lease_id, None)
        if self.active_lease is not None and self.active_lease.lease_id == lease.lease_id:
            self.active_lease = None


# --- backend choice ----------------------------------------------------------------------------


def choose_backend(requested: str, hardware: Hardware) -> tuple[str, str]:
    """(backend name, reason) for the startup line (worker/engine/generation/select.py decides)."""
    from worker.engine.generation.select import BackendUnavailable
    from worker.engine.generation.select import choose_backend as select

    try:
        return select(requested, hardware)
    except (BackendUnavailable, ValueError) as error:
        raise FatalError("backend_unavailable", str(error)) from None


def build_backend(
    name: str,
    model: Any,
    tokenizer: Any,
    model_dir: str | Path,
    spec: ModelSpec,
    hardware: Hardware,
    seed: int,
) -> Any:
    """The generation backend object for ``name``, sharing (transformers) or synced from (vLLM)
    the policy module."""
    from worker.engine.generation.select import BackendUnavailable, make_backend

    try:
        return make_backend(
            name,
            model,
            tokenizer,
            model_dir,
            spec,
            hardware=hardware,
            seed=seed,
            log=lambda m: log.info("%s", m),
        )
    except BackendUnavailable as error:
        raise FatalError("backend_unavailable", str(error)) from None


def measure_generation_speed(backend: Any, tokenizer: Any, system_prompt: str = "default") -> float:
    """Tokens per second of a short real generation (2 prompts x 2 samples x 16 tokens)."""
    from worker.shared.prompts import render_prompt

    prompts = [render_prompt(tokenizer, "What is 17 + 25?", system_prompt)] * 2
    start = time.perf_counter()
    groups = backend.generate(prompts, n=2, max_new_tokens=16, temperature=1.0, seed=0)
    elapsed = time.perf_counter() - start
    tokens = sum(len(sample.token_ids) for group in groups for sample in group)
    return tokens / elapsed if elapsed > 0 else 0.0


# --- the volunteer's program -------------------------------------------------------------------


@dataclass
class WorkerResult:
    """How a :func:`run_worker` call ended (the CLI prints it)."""

    node_id: str
    campaign_id: Any = None
    tier: str = ""
    start_round: int = 0  # the round this run started at
    next_round: int = 0  # the round a later run would start at
    rounds_run: int = 0
    reason: str = ""  # completed, max_rounds, campaign_<state>, interrupted
    message: str = ""
    checkpoint: Path | None = None


class StatusLine:
    """The live one-line status (a rich renderable, re-read on every refresh)."""

    def __init__(self, transport: WebsocketTransport) -> None:
        self.transport = transport
        self.phase = "starting"
        self.round = 0
        self.rounds: int | None = None
        self.tier = ""
        self.reward: float | None = None
        self.tokens_per_second: float | None = None
        self.external_fraction: float | None = None

    def update(self, metrics: dict[str, float]) -> None:
        self.reward = metrics.get("reward")
        self.tokens_per_second = metrics.get("tokens_per_second")
        self.external_fraction = metrics.get("external_fraction")

    def render(self) -> str:
        total = f"/{self.rounds}" if self.rounds else ""
        parts = [f"round {self.round}{total}"]
        if self.tier:
            parts.append(self.tier)
        parts.append(self.phase)
        parts.append("reward " + ("-" if self.reward is None else f"{self.reward:.3f}"))
        parts.append(("-" if self.tokens_per_second is None else f"{self.tokens_per_second:.0f}") + " tok/s")
        parts.append(
            "external " + ("-" if self.external_fraction is None else f"{100 * self.external_fraction:.0f}%")
        )
        connection = self.transport.connection_state
        if self.transport.campaign_state not in (RUNNING, "unknown"):
            connection += f", campaign {self.transport.campaign_state}"
        parts.append(f"coordinator: {connection}")
        return " | ".join(parts)

    def __rich__(self) -> Text:
        from rich.text import Text

        return Text(self.render())


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (systemd, docker stop) stops the worker like Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def hello_fields(
    token: str, node_id: str, hardware: Hardware, preferred_tier: str | None, tokens_per_second: float
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "protocol_versions": list(protocol.SUPPORTED_VERSIONS),
        "token": token,
        "node_id": node_id,
        "client_version": __version__,
        "hardware": hardware.to_json(),
        "backends": list(hardware.backends)[:8],
        "generation_tokens_per_second": max(0.0, float(tokens_per_second)),
    }
    if preferred_tier:
        fields["preferred_tier"] = preferred_tier
    return fields


def run_worker(
    url: str,
    token: str,
    data_dir: Path | str,
    backend: str = "auto",
    max_rounds: int | None = None,
    preferred_tier: str | None = None,
    status: bool = True,
    *,
    torch_threads: int | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    console: Console | None = None,
) -> WorkerResult:
    """Join the coordinator at ``url`` and train until the campaign ends (or ``max_rounds`` rounds
    of this run). Returns how it ended; Ctrl-C and SIGTERM end it cleanly (reason
    ``interrupted``). Raises :class:`FatalError` when the coordinator refuses the worker and
    :class:`~worker.client.identity.IdentityError` when the data directory is unusable or in use.

    ``torch_threads`` (else ``$SWARM_TORCH_THREADS``) sets torch's intra-op threads.
    """
    url = normalise_url(url)
    if not token:
        raise ValueError("a worker token is required (--token or $SWARM_TOKEN)")
    if max_rounds is not None and max_rounds < 0:
        raise ValueError("max_rounds must be >= 0")
    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    threads = torch_threads or int(os.environ.get("SWARM_TORCH_THREADS") or 0)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    if not is_loopback(url) and url.startswith("ws://"):
        log.warning("%s is not encrypted: the token travels in clear text; prefer wss://", url)
    identity = load_identity(data_dir)
    with lock_data_dir(data_dir), _sigterm_as_interrupt():
        run = _WorkerRun(url, token, data_dir, identity.node_id, backend, max_rounds, preferred_tier)
        run.request_timeout = request_timeout
        return run.run(status, console)


class _WorkerRun:
    """One run of :func:`run_worker`: its state, and the cleanup that depends on it."""

    def __init__(
        self,
        url: str,
        token: str,
        data_dir: Path,
        node_id: str,
        backend: str,
        max_rounds: int | None,
        preferred_tier: str | None,
    ) -> None:
        self.url = url
        self.token = token
        self.data_dir = data_dir
        self.node_id = node_id
        self.requested_backend = backend
        self.max_rounds = max_rounds
        self.preferred_tier = preferred_tier
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.result = WorkerResult(node_id)
        self.agent: Agent | None = None
        self.phase = "starting"  # starting, generate, train, idle
        self.saved_round = -1
        self.every = 1

    def run(self, status: bool, console: Console | None) -> WorkerResult:
        from rich.console import Console
        from rich.live import Live

        from worker.engine.hardware import detect

        hardware = detect(self.data_dir)
        backend_name, reason = choose_backend(self.requested_backend, hardware)
        log.info("backend: %s (%s)", backend_name, reason)
        speed = load_stats(self.data_dir).get("generation_tokens_per_second", 0.0)
        speed = float(speed) if isinstance(speed, int | float) and math.isfinite(speed) else 0.0
        hello = hello_fields(self.token, self.node_id, hardware, self.preferred_tier, speed)
        transport = WebsocketTransport(self.url, hello, request_timeout=self.request_timeout)
        line = StatusLine(transport)
        console = console or Console(stderr=True)
        live: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if status and console.is_terminal:
            live = Live(line, console=console, refresh_per_second=2, transient=True)
        try:
            with live:
                log.info("node %s: connecting to %s", self.node_id, self.url)
                welcome = transport.start()
                self._train(transport, welcome, hardware, backend_name, line)
        except KeyboardInterrupt:
            self._stopped(transport)
        except CampaignFinished as finished:
            state = transport.campaign_state
            if state in FINISHED_STATES:
                self.result.reason = f"campaign_{state}"
            else:  # past the campaign's rounds, or refused at hello
                self.result.reason = "completed" if self.agent is not None else "campaign_not_running"
            self.result.message = str(finished)
        finally:
            self._save_if_consistent()
            transport.close()
        if self.agent is not None:
            self.result.next_round = self.agent.round
        log.info("stopped: %s", self.result.message or self.result.reason)
        return self.result

    def _stopped(self, transport: WebsocketTransport) -> None:
        self.result.reason = "interrupted"
        self.result.message = "interrupted"
        if self.phase == "generate" and transport.active_lease is not None:
            lease = transport.active_lease
            if transport.release_active():
                self.result.message = f"interrupted; released the lease of round {lease.round}"
        elif self.phase == "train":
            self.result.message = (
                "interrupted during a training step; its weights are discarded, the next run resumes "
                f"from the checkpoint of round {max(self.saved_round, 0)}"
            )

    def _save_if_consistent(self) -> None:
        """Checkpoint unless the weights are halfway through a training step."""
        agent = self.agent
        if agent is None or self.phase == "train" or agent.round <= self.saved_round:
            return
        self._save()

    def _save(self) -> None:
        assert self.agent is not None and self.result.checkpoint is not None
        self.agent.save(self.result.checkpoint)
        self.saved_round = self.agent.round

    def _train(
        self,
        transport: WebsocketTransport,
        welcome: dict[str, Any],
        hardware: Hardware,
        backend_name: str,
        line: StatusLine,
    ) -> None:
        from worker.engine.agent import Agent
        from worker.engine.policy import load_policy, resolve
        from worker.shared.campaign import CampaignConfig, ConfigError
        from worker.shared.config import stable_seed
        from worker.shared.tiers import ModelSpec, model_cache_dir, tier

        campaign = welcome["campaign"]
        try:
            config = CampaignConfig.from_json(campaign.get("config") or {})
        except ConfigError as error:
            raise FatalError(
                "unsupported_campaign",
                f"this worker cannot read the campaign's settings ({error}); upgrade it",
            ) from None
        tier_name = welcome["tier"]
        try:
            spec = ModelSpec(**welcome["model"])
        except TypeError:
            spec = tier(tier_name)
        self.result.campaign_id = campaign.get("id")
        self.result.tier = tier_name
        log.info(
            "joined campaign %r (%s) as tier %s: %s",
            campaign.get("name"),
            campaign.get("state"),
            tier_name,
            welcome.get("reason", ""),
        )
        line.tier, line.rounds, line.phase = tier_name, config.rounds, "loading model"
        device = "cuda" if hardware.device == "cuda" else "cpu"
        cache = model_cache_dir(self.data_dir)
        model_dir = resolve(spec, cache, log=lambda m: log.info("%s", m))  # builds a tiny tier once
        model, tokenizer = load_policy(spec, cache, device, log=lambda m: log.info("%s", m))
        seed = stable_seed(config.seed, self.node_id)
        generation = build_backend(backend_name, model, tokenizer, model_dir, spec, hardware, seed)
        speed = measure_generation_speed(generation, tokenizer, config.system_prompt)
        log.info("generation speed: %.0f tokens/s", speed)
        transport.update_hello(generation_tokens_per_second=speed)
        save_stats(self.data_dir, generation_tokens_per_second=speed, tier=tier_name, measured_at=time.time())

        agent = Agent(
            self.node_id,
            tier_name,
            model,
            tokenizer,
            generation,
            transport,
            config.mix,
            config.agent_config(tier_name, seed),
        )
        self.every = checkpoint_interval(spec.params)
        self.result.checkpoint = checkpoint_path(self.data_dir, campaign.get("id"), self.node_id)
        self._resume(agent, self.result.checkpoint, welcome["resume_round"])
        self.agent = agent
        self.saved_round = agent.round if self.result.checkpoint.exists() else -1
        self.result.start_round = agent.round
        self._loop(transport, agent, config.rounds, line)

    def _resume(self, agent: Agent, path: Path, resume_round: int) -> None:
        checkpoint_round = 0
        if path.exists():
            try:
                agent.load(path)
            except Exception as error:  # another model's or a damaged file: keep it, start fresh
                aside = path.with_name(f"{path.name}.unusable-{int(time.time())}")
                path.rename(aside)
                log.warning("checkpoint %s is unusable (%s); moved to %s, starting fresh", path, error, aside)
            else:
                checkpoint_round = agent.round
                log.info("resumed from %s (round %d)", path, checkpoint_round)
        if resume_round > checkpoint_round:
            log.info(
                "the coordinator expects round %d, the checkpoint is of round %d: continuing from "
                "round %d with the checkpoint's weights",
                resume_round,
                checkpoint_round,
                resume_round,
            )
        elif checkpoint_round > resume_round:
            log.info(
                "the checkpoint (round %d) is ahead of the coordinator's record (round %d; metrics "
                "were not recorded): continuing from round %d",
                checkpoint_round,
                resume_round,
                checkpoint_round,
            )
        agent.round = max(checkpoint_round, resume_round)

    def _loop(self, transport: WebsocketTransport, agent: Agent, rounds: int, line: StatusLine) -> None:
        lost_in_a_row = 0
        self.phase = "idle"
        while True:
            line.round = agent.round
            if agent.round >= rounds:
                self.result.reason = "completed"
                self.result.message = f"this node finished the campaign's {rounds} rounds"
                return
            if self.max_rounds is not None and self.result.rounds_run >= self.max_rounds:
                self.result.reason = "max_rounds"
                self.result.message = f"ran {self.result.rounds_run} rounds (--max-rounds)"
                return
            if transport.campaign_state in FINISHED_STATES:
                self.result.reason = f"campaign_{transport.campaign_state}"
                self.result.message = f"the campaign is {transport.campaign_state}"
                return
            self.phase, line.phase = "generate", "generating"
            try:
                agent.generate_phase()
            except LeaseLost as lost:
                lost_in_a_row += 1
                if lost_in_a_row >= 5:
                    raise FatalError(
                        "lease_expired",
                        f"{lost_in_a_row} leases in a row were lost before this worker could submit "
                        f"them ({lost}); this machine may be too slow for the campaign's lease time",
                    ) from None
                log.warning("round %d: %s; generating the round again with a new lease", agent.round, lost)
                self.phase = "idle"
                continue
            lost_in_a_row = 0
            self.phase = "train"
            line.phase = "training"
            metrics = agent.train_phase()
            self.phase = "idle"
            line.phase = "idle"
            self.result.rounds_run += 1
            line.update(metrics)
            line.round = agent.round
            log.info(
                "round %d: reward %.3f, %.0f tokens/s, external %.0f%%, %.1f s",
                agent.round - 1,
                metrics.get("reward", float("nan")),
                metrics.get("tokens_per_second", float("nan")),
                100 * metrics.get("external_fraction", 0.0),
                metrics.get("round_time", float("nan")),
            )
            if agent.round % self.every == 0:
                self._save()


__all__ = [
    "Backoff",
    "CampaignFinished",
    "ClientError",
    "FatalError",
    "LeaseLost",
    "RequestError",
    "StatusLine",
    "SubmissionRejected",
    "TransportClosed",
    "WebsocketTransport",
    "WorkerResult",
    "build_backend",
    "checkpoint_interval",
    "choose_backend",
    "clean_metrics",
    "hello_fields",
    "measure_generation_speed",
    "normalise_url",
    "run_worker",
]
