"""The volunteer's websocket client without the real coordinator.

A small protocol-speaking coordinator (:class:`FakeCoordinator`, ``websockets`` on a loopback
port, in its own thread) stands in for swarm_app: it validates every frame the client sends
with ``protocol.parse(raw, "worker")``, issues real reasoning-gym questions and re-scores
submissions with the engine's verifier, and can misbehave on cue (drop the connection mid-
request, stay silent, push garbage, refuse the hello) to prove retry, reconnection and
idempotent submission. The end-to-end tests against the real coordinator live with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.wsclient import frame
from worker.client.address import http_url, normalise_url
from worker.client.backoff import Backoff
from worker.client.errors import FATAL_CODES, CampaignFinished, FatalError, LeaseLost, SubmissionRejected
from worker.client.identity import (
    IdentityError,
    checkpoint_path,
    load_identity,
    load_stats,
    lock_data_dir,
    save_stats,
    valid_node_id,
)
from worker.client.transport import WebsocketTransport
from worker.client.volunteer import checkpoint_interval, run_worker
from worker.engine.transport import Lease
from worker.shared import protocol
from worker.shared.campaign import CampaignConfig
from worker.shared.evaluation import eval_index, eval_refs, score_answers
from worker.shared.protocol import ErrorCode, clean_metrics
from worker.shared.questions import QuestionRef, question, ref_at
from worker.shared.rewards import RewardConfig, rewards
from worker.shared.rollout import Rollout
from worker.shared.tiers import TIERS

ROOT = Path(__file__).resolve().parents[3]


def small_config(**overrides: Any) -> CampaignConfig:
    base = CampaignConfig(
        tiers=["tiny-1m"],
        group_size=2,
        questions_per_round=2,
        num_local=2,
        num_external=1,
        rounds=3,
        max_new_tokens=8,
        local_strategy="uniform",  # a barely trained tiny model earns no reward to filter on
        external_strategy="uniform",
    )
    return CampaignConfig.from_json({**base.to_json(), **overrides})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fields(message: Any) -> dict[str, Any]:
    """A parsed message's fields that were set (its envelope left out), as the fake's handlers
    read them."""
    return {
        name: value
        for name in message.__struct_fields__
        if name not in ("id", "reply_to") and (value := getattr(message, name)) is not msgspec.UNSET
    }


class FakeCoordinator:
    """Just enough of swarm_app/coordinator/consumers.py to exercise the client.

    Misbehaviour, each on the first request of a kind only:
    ``drop_first``: abort the connection instead of answering;
    ``store_then_drop``: process the request (a submit is stored), then abort without a reply;
    ``silent_first``: never answer it.
    """

    def __init__(
        self,
        config: CampaignConfig | None = None,
        *,
        port: int = 0,
        state: str = "running",
        heartbeat_seconds: float = 30.0,
        drop_first: set[str] = frozenset(),
        store_then_drop: set[str] = frozenset(),
        silent_first: set[str] = frozenset(),
        hello_error: str | None = None,
        submit_error: str | None = None,
        garbage: bool = False,
        on_message: Callable[[FakeCoordinator, Any], bool] | None = None,
    ) -> None:
        self.config = config or small_config()
        self.mix = self.config.mix
        self.port = port
        self.state = state
        self.heartbeat_seconds = heartbeat_seconds
        self.drop_first = set(drop_first)
        self.store_then_drop = set(store_then_drop)
        self.silent_first = set(silent_first)
        self.hello_error = hello_error
        self.submit_error = submit_error
        self.garbage = garbage
        self.on_message = on_message  # returns True to skip the normal answer
        self.received: list[Any] = []  # the worker messages, as parsed
        self.counts: Counter[str] = Counter()
        self.connections = 0
        self.node_round = 0
        self.leases: dict[str, dict[str, Any]] = {}  # lease_id -> payload (+ "state")
        self.acks: dict[str, dict[str, Any]] = {}  # submission_id -> ack
        self.pool: list[Rollout] = []
        self.metrics: dict[int, dict[str, float]] = {}
        self.eval_sets: dict[str, tuple[int, list[QuestionRef]]] = {}  # eval_id -> (round, refs)
        self.evaluations: dict[int, dict[str, Any]] = {}  # round -> what the node submitted, scored
        self._sockets: set[ServerConnection] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Any = None

    # --- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> FakeCoordinator:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port, max_size=protocol.MAX_MESSAGE_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/worker/"

    def push(self, text: str) -> None:
        async def send_all() -> None:
            for ws in list(self._sockets):
                await ws.send(text)

        asyncio.run_coroutine_threadsafe(send_all(), self._loop).result(5)

    def of_type(self, kind: str) -> list[Any]:
        return [m for m in self.received if protocol.kind(m) == kind]

    # --- the protocol --------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        self._sockets.add(ws)
        try:
            async for raw in ws:
                message = protocol.parse(raw, "worker")  # the client must only send valid frames
                self.received.append(message)
                kind = protocol.kind(message)
                self.counts[kind] += 1
                first = self.counts[kind] == 1
                if self.on_message is not None and self.on_message(self, message):
                    continue
                if first and kind in self.drop_first:
                    ws.transport.abort()
                    return
                if first and kind in self.silent_first:
                    continue
                if kind == "hello" and self.hello_error:
                    await ws.send(protocol.error(ErrorCode(self.hello_error), "refused", message.id))
                    await ws.close(4001 if self.hello_error == ErrorCode.INVALID_TOKEN else 4000)
                    return
                reply = self.answer(message)
                if first and kind in self.store_then_drop:
                    ws.transport.abort()
                    return
                if self.garbage:
                    for junk in (
                        "not json",
                        '{"type": "bogus"}',
                        '{"type": "lease", "reply_to": "x"}',
                        "[1]",
                    ):
                        await ws.send(junk)
                await ws.send(reply)
        except ConnectionClosed:
            pass
        finally:
            self._sockets.discard(ws)

    def answer(self, message: Any) -> str:
        rid = None if message.id is msgspec.UNSET else message.id
        try:
            kind, payload = getattr(self, f"on_{protocol.kind(message)}")(fields(message))
        except protocol.ProtocolError as error:
            return protocol.error(error.code, error.message, rid, getattr(error, "data", None))
        return frame(kind, reply_to=rid, **payload)

    def on_hello(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.state in ("completed", "stopped", "failed"):
            raise protocol.ProtocolError(ErrorCode.CAMPAIGN_NOT_RUNNING, f"campaign is {self.state}")
        return "welcome", {
            "protocol_version": 1,
            "node_id": fields["node_id"],
            "campaign": {"id": 7, "name": "unit", "state": self.state, "config": self.config.to_json()},
            "tier": "tiny-1m",
            "model": TIERS["tiny-1m"].to_json(),
            "resume_round": self.node_round,
            "heartbeat_seconds": self.heartbeat_seconds,
            "limits": {
                "max_message_bytes": protocol.MAX_MESSAGE_BYTES,
                "rate_per_second": 5.0,
                "rate_burst": 20.0,
            },
            "reason": "unit test",
        }

    def on_lease_request(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        round = fields["round"]
        if self.state != "running" or round >= self.config.rounds:
            raise protocol.ProtocolError(ErrorCode.CAMPAIGN_NOT_RUNNING, f"not running (round {round})")
        for payload in self.leases.values():
            if payload["round"] == round and payload["state"] == "active":
                return "lease", {k: v for k, v in payload.items() if k != "state"}
        count = self.config.questions_per_round
        refs = [ref_at(self.mix, self.config.seed, round * count + i) for i in range(count)]
        questions = []
        for ref in refs:
            q = question(self.mix, ref)
            questions.append(
                {"ref": ref.to_json(), "question": q.question, "answer": q.answer, "metadata": q.metadata}
            )
        lease_id = uuid.uuid4().hex
        payload = {
            "lease_id": lease_id,
            "round": round,
            "deadline": time.time() + 120,
            "questions": questions,
        }
        self.leases[lease_id] = {**payload, "state": "active"}
        return "lease", payload

    def on_submit(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if fields["submission_id"] in self.acks:
            error = protocol.ProtocolError(ErrorCode.DUPLICATE_SUBMISSION, "already accepted")
            error.data = self.acks[fields["submission_id"]]
            raise error
        lease = self.leases.get(fields["lease_id"])
        if lease is None:
            raise protocol.ProtocolError(ErrorCode.UNKNOWN_LEASE, "no such lease")
        if self.submit_error:
            raise protocol.ProtocolError(ErrorCode(self.submit_error), "refused by the test")
        rollouts: list[Rollout] = fields["rollouts"]
        assert [r.ref.to_json() for r in rollouts] == [q["ref"] for q in lease["questions"]]
        verified = [
            rewards(self.mix, r.ref, r.completions, RewardConfig(self.config.format_weight)) for r in rollouts
        ]
        ack = {
            "submission_id": fields["submission_id"],
            "lease_id": fields["lease_id"],
            "verified_rewards": verified,
            "rollout_ids": [r.rollout_id for r in rollouts],
        }
        self.acks[fields["submission_id"]] = ack
        lease["state"] = "submitted"
        for rollout, values in zip(rollouts, verified, strict=True):
            self.pool.append(msgspec.structs.replace(rollout, rewards=values))
        return "submit_ack", ack

    def on_eval_request(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        round, config = fields["round"], self.config
        index = eval_index(config.eval_every, config.rounds, round)
        if index is None or round not in self.metrics or round + 1 in self.metrics:  # as the coordinator
            raise protocol.ProtocolError(ErrorCode.EVALUATION_NOT_DUE, f"no evaluation after round {round}")
        refs = eval_refs(self.mix, config.seed, index, config.eval_questions)
        eval_id = uuid.uuid4().hex
        self.eval_sets[eval_id] = (round, refs)
        questions = [{"ref": ref.to_json(), "question": question(self.mix, ref).question} for ref in refs]
        return "eval_set", {"eval_id": eval_id, "round": round, "questions": questions}

    def on_eval_submit(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        round, refs = self.eval_sets[fields["eval_id"]]
        answers = fields["answers"]
        assert [answer.ref for answer in answers] == refs
        score = score_answers(self.mix, refs, [answer.completion for answer in answers])
        self.evaluations[round] = {
            "answers": answers,
            "claimed": fields.get("claimed_accuracy"),
            "score": score,
        }
        ack = {"eval_id": fields["eval_id"], "round": round, "n": score.n, "accuracy": score.accuracy}
        return "eval_ack", {**ack, "reward": score.reward}

    def on_sample_request(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        # Other nodes' rollouts: this node's own, relabelled (the pool never returns one's own).
        others = [
            msgspec.structs.replace(r, agent_id="other-node", rollout_id=uuid.uuid4().hex) for r in self.pool
        ]
        return "samples", {"rollouts": others[-fields["count"] :] if fields["count"] else []}

    def on_metrics(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.metrics[fields["round"]] = fields["metrics"]
        self.node_round = max(self.node_round, fields["round"] + 1)
        return "metrics_ack", {"round": fields["round"]}

    def on_heartbeat(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "heartbeat_ack", {"campaign_state": self.state}

    def on_release(self, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if fields["lease_id"] in self.leases:
            self.leases[fields["lease_id"]]["state"] = "released"
        return "release_ack", {"lease_id": fields["lease_id"]}


HARDWARE = {"device": "cpu", "vram_bytes": 0, "ram_bytes": 8 << 30, "cpu_count": 2}


def hello(node_id: str = "node-a") -> protocol.Hello:
    return protocol.Hello(
        protocol_versions=[1],
        token="secret",
        node_id=node_id,
        client_version="test",
        hardware=HARDWARE,
        backends=["transformers"],
        generation_tokens_per_second=0.0,
    )


def transport_for(fake: FakeCoordinator, **kwargs: Any) -> WebsocketTransport:
    kwargs.setdefault("backoff", Backoff(base=0.05, cap=0.2))
    return WebsocketTransport(fake.url, hello(), **kwargs)


def rollouts_for(lease: Lease, node_id: str = "node-a", group: int = 2) -> list[Rollout]:
    return [
        Rollout(
            ref=q.ref,
            question=q.question,
            answer=q.answer,
            metadata=q.metadata,
            completions=[f"<answer>{q.answer}</answer>", "wrong"][:group],
            rewards=[0.0] * group,
            advantages=[0.0] * group,
            agent_id=node_id,
            tier="tiny-1m",
            round=lease.round,
            completion_tokens=[1] * group,
            truncated=[False] * group,
        )
        for q in lease.questions
    ]


# --- identity ----------------------------------------------------------------------------------


def test_identity_is_created_once_and_survives_restarts(tmp_path: Path) -> None:
    first = load_identity(tmp_path)
    again = load_identity(tmp_path)
    assert first.node_id == again.node_id
    assert valid_node_id(first.node_id) and len(first.node_id) == 32
    assert json.loads((tmp_path / "node.json").read_text())["node_id"] == first.node_id
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary files left


def test_identity_created_concurrently_is_one_identity(tmp_path: Path) -> None:
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(load_identity(tmp_path).node_id)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1 and len(ids) == 8


@pytest.mark.parametrize("content", ["", "{not json", '{"node_id": "has space"}', "[]"])
def test_damaged_identity_is_reported_not_replaced(tmp_path: Path, content: str) -> None:
    (tmp_path / "node.json").write_text(content)
    with pytest.raises(IdentityError):
        load_identity(tmp_path)
    assert (tmp_path / "node.json").read_text() == content


def test_checkpoint_path_and_stats(tmp_path: Path) -> None:
    assert checkpoint_path(tmp_path, 3, "abc") == tmp_path / "checkpoints" / "campaign-3" / "abc.pt"
    assert load_stats(tmp_path) == {}
    save_stats(tmp_path, generation_tokens_per_second=12.5)
    save_stats(tmp_path, tier="tiny-1m")
    assert load_stats(tmp_path) == {"generation_tokens_per_second": 12.5, "tier": "tiny-1m"}


def test_data_dir_lock_excludes_a_second_worker(tmp_path: Path) -> None:
    with (
        lock_data_dir(tmp_path),
        pytest.raises(IdentityError, match="another swarm-worker"),
        lock_data_dir(tmp_path),
    ):
        pass
    with lock_data_dir(tmp_path):  # released on exit
        pass


def test_data_dir_lock_of_a_killed_worker_is_released(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from worker.client.identity import lock_data_dir\n"
            f"with lock_data_dir({str(tmp_path)!r}):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(60)\n",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(IdentityError), lock_data_dir(tmp_path):
            pass
    finally:
        holder.kill()  # SIGKILL: no cleanup runs in the holder
        holder.wait(10)
    with lock_data_dir(tmp_path):  # the kernel released the dead process's lock
        pass


# --- pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ws://127.0.0.1:8000/ws/worker/", "ws://127.0.0.1:8000/ws/worker/"),
        ("wss://swarm.example.org/ws/worker/", "wss://swarm.example.org/ws/worker/"),
        ("ws://127.0.0.1:8000", "ws://127.0.0.1:8000/ws/worker/"),
        ("http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws/worker/"),
        ("http://127.0.0.1:8000/", "ws://127.0.0.1:8000/ws/worker/"),
        ("https://swarm.example.org", "wss://swarm.example.org/ws/worker/"),
        ("https://swarm.example.org/ws/worker", "wss://swarm.example.org/ws/worker/"),
        ("https://example.org/swarm/", "wss://example.org/swarm/ws/worker/"),
        ("HTTPS://example.org  ", "wss://example.org/ws/worker/"),
        ("ws://host/custom/endpoint", "ws://host/custom/endpoint"),
    ],
)
def test_normalise_url(given: str, expected: str) -> None:
    assert normalise_url(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ws://127.0.0.1:8000/ws/worker/", "http://127.0.0.1:8000"),
        ("wss://swarm.example.org/ws/worker/", "https://swarm.example.org"),
        ("https://example.org/swarm/", "https://example.org/swarm"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_http_url_is_the_web_address_of_the_worker_endpoint(given: str, expected: str) -> None:
    """What `swarm-worker export` asks for the model card's held-out accuracy."""
    assert http_url(given) == expected


@pytest.mark.parametrize("bad", ["example.org", "ftp://example.org", "http://", ""])
def test_normalise_url_refuses_what_it_cannot_reach(bad: str) -> None:
    with pytest.raises(ValueError, match="coordinator URL"):
        normalise_url(bad)


def test_backoff_full_jitter_bounds() -> None:
    backoff = Backoff(base=0.5, cap=30.0, rng=random.Random(0))
    ceilings = [min(30.0, 0.5 * 2**k) for k in range(12)]
    delays = [backoff.next_delay() for _ in range(12)]
    assert all(0.0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert ceilings[-1] == 30.0 and backoff.ceiling() == 30.0
    assert max(delays) > 2.0  # jitter spreads over the whole range, not just near zero
    backoff.reset()
    assert backoff.ceiling() == 0.5 and backoff.next_delay() <= 0.5
    big = Backoff(base=0.5, cap=30.0)
    big.attempt = 10_000  # no overflow after a very long outage
    assert 0.0 <= big.next_delay() <= 30.0
    with pytest.raises(ValueError, match="base"):
        Backoff(base=0.0)


def test_checkpoint_interval_by_model_size() -> None:
    assert checkpoint_interval(TIERS["tiny-20m"].params) == 1
    assert checkpoint_interval(TIERS["qwen2.5-0.5b"].params) == 5
    assert checkpoint_interval(TIERS["qwen2.5-1.5b"].params) == 15
    assert checkpoint_interval(10**12) == 25


def test_clean_metrics_keeps_finite_numbers_only() -> None:
    cleaned = clean_metrics({"reward": 0.5, "bad": float("nan"), "inf": float("inf"), "flag": True, "n": 3})
    assert cleaned == {"reward": 0.5, "n": 3.0}
    assert len(json.dumps(clean_metrics({f"k{i}": 1.0 for i in range(2000)}))) <= 8000


# --- the transport against a fake coordinator --------------------------------------------------


def test_hello_lease_submit_sample_report_release() -> None:
    with FakeCoordinator() as fake, transport_for(fake) as transport:
        welcome = transport.start(timeout=10)
        assert welcome.tier == "tiny-1m" and transport.campaign_state == "running"
        hello_msg = fake.of_type("hello")[0]
        assert hello_msg.node_id == "node-a" and hello_msg.id

        lease = transport.lease("node-a", 0, 2)
        assert len(lease.questions) == 2 and isinstance(lease.questions[0].ref, QuestionRef)
        assert transport.active_lease is lease
        assert transport.lease("node-a", 0, 2).lease_id == lease.lease_id  # same round, same lease

        sent = rollouts_for(lease)
        verified = transport.submit(lease, sent)
        assert [r.rollout_id for r in verified] == [r.rollout_id for r in sent]
        assert [r.rewards for r in verified] == fake.acks[fake.of_type("submit")[0].submission_id][
            "verified_rewards"
        ]
        assert verified[0].rewards[0] == 1.0 and verified[0].rewards[1] == 0.0  # the verifier's, not ours
        assert transport.active_lease is None

        external = transport.sample_external("node-a", 0, 1, "uniform")
        assert len(external) == 1 and external[0].agent_id == "other-node"
        assert transport.sample_external("node-a", 0, 0, "uniform") == []

        transport.report("node-a", 0, {"reward": 0.5, "tokens_per_second": 42.0, "broken": float("nan")})
        assert fake.metrics[0] == {"reward": 0.5, "tokens_per_second": 42.0}

        second = transport.lease("node-a", 1, 2)
        assert transport.release_active() is True
        assert fake.of_type("release")[0].lease_id == second.lease_id
        assert transport.active_lease is None and transport.release_active() is False
        assert transport.heartbeat() == "running"
    assert transport.connection_state == "closed"


def test_dropped_submit_is_retried_after_reconnect_and_its_replay_counts_as_success() -> None:
    """The coordinator stores the submit, then the connection dies before the ack arrives."""
    with FakeCoordinator(store_then_drop={"submit"}) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        lease = transport.lease("node-a", 0, 2)
        verified = transport.submit(lease, rollouts_for(lease))
        submits = fake.of_type("submit")
        assert len(submits) == 2 and fake.connections == 2
        assert submits[0].submission_id == submits[1].submission_id
        assert submits[0].id != submits[1].id  # a new request id, the same submission
        hellos = fake.of_type("hello")
        assert [h.node_id for h in hellos] == ["node-a", "node-a"]  # resumed as the same node
        assert [r.rewards for r in verified] == fake.acks[submits[0].submission_id]["verified_rewards"]
        assert len(fake.pool) == 2  # stored once
        assert transport.connections == 2


def test_request_dropped_mid_flight_is_sent_again() -> None:
    with FakeCoordinator(drop_first={"lease_request"}) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        lease = transport.lease("node-a", 0, 2)
        assert fake.counts["lease_request"] == 2 and fake.connections == 2
        assert len(lease.questions) == 2


def test_request_without_reply_times_out_reconnects_and_retries() -> None:
    with (
        FakeCoordinator(silent_first={"lease_request"}) as fake,
        transport_for(fake, request_timeout=0.5) as transport,
    ):
        transport.start(timeout=10)
        started = time.monotonic()
        lease = transport.lease("node-a", 0, 2)
        assert time.monotonic() - started >= 0.5
        assert fake.counts["lease_request"] == 2 and fake.connections == 2
        assert lease.round == 0


def test_unreachable_coordinator_is_retried_with_backoff_until_it_starts() -> None:
    port = free_port()
    transport = WebsocketTransport(f"ws://127.0.0.1:{port}/ws/worker/", hello(), backoff=Backoff(0.05, 0.2))
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(welcome=transport.start(timeout=20)))
    thread.start()
    try:
        time.sleep(0.8)  # several refused attempts
        # Counted by the backoff: the state alone reads "connecting" during each attempt and
        # "reconnecting in ..." between them, so under load 0.8 s may fall in either.
        assert not result and transport.backoff.attempt >= 2
        assert transport.connection_state.startswith(("connecting", "reconnecting"))
        with FakeCoordinator(port=port) as fake:
            thread.join(15)
            assert result["welcome"].tier == "tiny-1m" and fake.connections == 1
    finally:
        transport.close()
        thread.join(5)


def test_malformed_messages_from_the_coordinator_are_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="worker.client.connection")
    with FakeCoordinator(garbage=True) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        lease = transport.lease("node-a", 0, 2)
        transport.submit(lease, rollouts_for(lease))
        fake.push('{"type": "campaign_state"}')  # missing its field
        fake.push('{"type": "campaign_state", "state": "running", "extra": 1}')
        assert transport.heartbeat() == "running"
        assert fake.connections == 1  # nothing garbled the connection either
    malformed = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(malformed) >= 6


@pytest.mark.parametrize(
    "code", ["invalid_token", "token_revoked", "banned", "unsupported_version", "no_tier_fits"]
)
def test_fatal_hello_errors_stop_without_retrying(code: str) -> None:
    with FakeCoordinator(hello_error=code) as fake, transport_for(fake) as transport:
        with pytest.raises(FatalError) as raised:
            transport.start(timeout=10)
        assert raised.value.code == code
        time.sleep(0.4)  # backoff is 0.05-0.2 s: a retry would have happened by now
        assert fake.connections == 1 and transport.connection_state == "refused"


def test_a_campaign_this_worker_cannot_read_stops_it_with_the_reason() -> None:
    """A newer coordinator's setting in the welcome: the worker stops and asks to be upgraded,
    instead of ignoring the welcome and waiting for one it can read."""

    def newer_settings(fake: FakeCoordinator, message: Any) -> bool:
        if not isinstance(message, protocol.Hello):
            return False
        _, welcome = fake.on_hello(fields(message))
        welcome["campaign"]["config"]["a_setting_from_the_future"] = 1
        ws = next(iter(fake._sockets))
        fake._loop.create_task(ws.send(frame("welcome", reply_to=message.id, **welcome)))
        return True

    with FakeCoordinator(on_message=newer_settings) as fake, transport_for(fake) as transport:
        with pytest.raises(FatalError, match=r"cannot read the campaign's settings") as stopped:
            transport.start(timeout=10)
        assert stopped.value.code == "unsupported_campaign"
        assert "a_setting_from_the_future" in str(stopped.value)
        assert "join command" in stopped.value.what_to_do


def test_a_fatal_error_on_a_request_stops_the_transport() -> None:
    def ban(fake: FakeCoordinator, message: Any) -> bool:
        if not isinstance(message, protocol.LeaseRequest):
            return False
        ws = next(iter(fake._sockets))
        fake._loop.create_task(ws.send(protocol.error(ErrorCode.BANNED, "banned", message.id)))
        return True

    with FakeCoordinator(on_message=ban) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        with pytest.raises(FatalError, match="banned"):
            transport.lease("node-a", 0, 2)


def test_finished_campaign_at_hello_is_a_clean_finish() -> None:
    with FakeCoordinator(state="completed") as fake, transport_for(fake) as transport:
        with pytest.raises(CampaignFinished):
            transport.start(timeout=10)
        assert fake.connections == 1


def test_paused_campaign_waits_polling_by_heartbeat_until_running() -> None:
    with FakeCoordinator(state="paused", heartbeat_seconds=1.0) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        assert transport.campaign_state == "paused"
        threading.Timer(1.2, lambda: setattr(fake, "state", "running")).start()  # no push: polled
        started = time.monotonic()
        lease = transport.lease("node-a", 0, 2)
        assert time.monotonic() - started >= 1.0
        assert lease.round == 0 and fake.counts["heartbeat"] >= 1
        assert fake.counts["lease_request"] == 1  # it waited instead of asking while paused


def test_pause_pushed_mid_run_then_resume_pushed() -> None:
    with FakeCoordinator() as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        fake.state = "paused"
        fake.push(protocol.encode(protocol.CampaignState(state="paused")))

        def resume() -> None:
            fake.state = "running"
            fake.push(protocol.encode(protocol.CampaignState(state="running")))

        threading.Timer(0.5, resume).start()
        time.sleep(0.2)
        assert transport.campaign_state == "paused"
        assert transport.lease("node-a", 0, 2).round == 0


def test_lease_refused_because_paused_waits_for_running() -> None:
    """The lease request races a pause: campaign_not_running, then a heartbeat tells why."""
    with FakeCoordinator(heartbeat_seconds=1.0) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        fake.state = "paused"  # not pushed: the client only learns from the refusal
        threading.Timer(1.0, lambda: setattr(fake, "state", "running")).start()
        assert transport.lease("node-a", 0, 2).round == 0
        assert fake.counts["lease_request"] == 2


@pytest.mark.parametrize("state", ["stopped", "completed", "failed"])
def test_pushed_stop_finishes_cleanly(state: str) -> None:
    with FakeCoordinator() as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        fake.state = state
        fake.push(protocol.encode(protocol.CampaignState(state=state)))
        with pytest.raises(CampaignFinished):
            transport.lease("node-a", 0, 2)


def test_lease_past_the_campaign_rounds_finishes() -> None:
    with FakeCoordinator() as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        with pytest.raises(CampaignFinished):
            transport.lease("node-a", fake.config.rounds, 2)


def test_expired_lease_is_lost_and_rejected_rollouts_stop_the_worker() -> None:
    with FakeCoordinator(submit_error="lease_expired") as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        lease = transport.lease("node-a", 0, 2)
        with pytest.raises(LeaseLost) as lost:
            transport.submit(lease, rollouts_for(lease))
        assert lost.value.code == "lease_expired" and transport.active_lease is None
    with FakeCoordinator(submit_error="reward_mismatch") as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        lease = transport.lease("node-a", 0, 2)
        with pytest.raises(SubmissionRejected, match="before the node is banned"):
            transport.submit(lease, rollouts_for(lease))
        assert fake.counts["submit"] == 1  # never retried: each retry would count towards a ban


def test_heartbeats_flow_while_the_main_thread_is_busy() -> None:
    with FakeCoordinator(heartbeat_seconds=1.0) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        deadline = time.monotonic() + 2.6
        while time.monotonic() < deadline:  # a stand-in for a training step holding the main thread
            sum(i * i for i in range(20_000))
        assert fake.counts["heartbeat"] >= 2


def test_no_heartbeat_while_requests_are_answered_and_heartbeats_again_when_quiet() -> None:
    """Any answered request proves both ends alive: a worker that talks sends no heartbeat."""
    with FakeCoordinator(heartbeat_seconds=1.0) as fake, transport_for(fake) as transport:
        transport.start(timeout=10)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # a request every 0.3 s, three heartbeat periods long
            transport.sample_external("node-a", 0, 1, "uniform")
            time.sleep(0.3)
        talking = fake.counts["heartbeat"]
        time.sleep(2.6)
        assert talking == 0 and fake.counts["sample_request"] >= 9
        assert fake.counts["heartbeat"] >= 2  # quiet again: heartbeats every period


@pytest.fixture
def restore_logging() -> Any:
    """`swarm-worker join` configures logging for its process; put the test process's back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    worker_level = logging.getLogger("worker").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("worker").setLevel(worker_level)


# --- run_worker: the whole volunteer against the fake, with the tiny-1m tier -------------------


@pytest.fixture
def worker_env(tiny_1m_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reuse the session's built tiny-1m; one torch thread."""
    monkeypatch.setenv("SWARM_MODEL_CACHE", str(tiny_1m_dir.parent))
    monkeypatch.setenv("SWARM_TORCH_THREADS", "1")


@pytest.mark.timeout(300)
def test_run_worker_trains_checkpoints_and_resumes(
    worker_env: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="worker")
    data_dir = tmp_path / "volunteer"
    with FakeCoordinator(store_then_drop={"submit"}) as fake:
        first = run_worker(fake.url, "secret", data_dir, max_rounds=2, status=False)
        assert (first.reason, first.rounds_run, first.start_round, first.next_round) == (
            "max_rounds",
            2,
            0,
            2,
        )
        assert first.checkpoint is not None and first.checkpoint.exists()
        assert first.checkpoint == checkpoint_path(data_dir, 7, first.node_id)
        assert sorted(fake.metrics) == [0, 1] and fake.node_round == 2
        assert len(fake.of_type("submit")) == 3  # the first dropped and replayed
        hello_fields = fields(fake.of_type("hello")[0])
        assert (
            hello_fields["node_id"] == first.node_id and hello_fields["generation_tokens_per_second"] == 0.0
        )
        assert "backend: transformers" in caplog.text
        # the coordinator joined, for `swarm-worker export`'s held-out accuracy (never the token)
        assert load_stats(data_dir)["coordinator"] == normalise_url(fake.url)
        assert "secret" not in json.dumps(load_stats(data_dir))

        second = run_worker(fake.url, "secret", data_dir, status=False)
        assert second.node_id == first.node_id
        assert (second.reason, second.start_round, second.next_round, second.rounds_run) == (
            "completed",
            2,
            3,
            1,
        )
        assert sorted(fake.metrics) == [0, 1, 2]
        last_hello = fields(fake.of_type("hello")[-1])
        assert last_hello["generation_tokens_per_second"] > 0  # measured by the first run
        assert fake.metrics[2]["external_fraction"] > 0  # external rollouts were trained on

        # The coordinator is ahead of the checkpoint (e.g. checkpoints every K rounds): follow it.
        fake.config = small_config(rounds=6)
        fake.node_round = 5
        third = run_worker(fake.url, "secret", data_dir, status=False)
        assert (third.start_round, third.next_round, third.reason) == (5, 6, "completed")
        assert "continuing from round 5 with the checkpoint's weights" in caplog.text


@pytest.mark.timeout(300)
def test_sigterm_mid_round_releases_the_lease_and_exits_cleanly(worker_env: None, tmp_path: Path) -> None:
    def terminate_on_submit(fake: FakeCoordinator, message: Any) -> bool:
        if isinstance(message, protocol.Submit):
            os.kill(os.getpid(), signal.SIGTERM)
            return True  # never answered: the worker is blocked waiting for it
        return False

    previous = signal.getsignal(signal.SIGTERM)
    with FakeCoordinator(on_message=terminate_on_submit) as fake:
        result = run_worker(fake.url, "secret", tmp_path / "volunteer", status=False)
        assert result.reason == "interrupted" and "released the lease of round 0" in result.message
        (lease_id,) = fake.leases
        assert [m.lease_id for m in fake.of_type("release")] == [lease_id]
        assert fake.leases[lease_id]["state"] == "released"
        # Interrupted while generating: the weights are round 0's, so a checkpoint was written.
        assert result.checkpoint is not None and result.checkpoint.exists()
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler was put back


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_join_command_in_a_subprocess(tiny_1m_dir: Path, tmp_path: Path) -> None:
    """What the coordinator's end-to-end tests run: `swarm-worker join URL` with $SWARM_TOKEN."""
    with FakeCoordinator() as fake:
        env = {
            **os.environ,
            "SWARM_TOKEN": "secret-from-env",
            "SWARM_MODEL_CACHE": str(tiny_1m_dir.parent),
            "OMP_NUM_THREADS": "1",
        }
        http_url = f"http://127.0.0.1:{fake.port}"  # converted to ws://.../ws/worker/
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "worker.cli",
                "join",
                http_url,
                "--data-dir",
                str(tmp_path),
                "--max-rounds",
                "1",
                "--no-status",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr
        assert fake.of_type("hello")[0].token == "secret-from-env"
        assert sorted(fake.metrics) == [0]
        assert "backend: transformers" in proc.stderr and "1 this run" in proc.stderr


def test_join_without_a_token_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli import main

    monkeypatch.delenv("SWARM_TOKEN", raising=False)
    assert main(["join", "ws://127.0.0.1:1/ws/worker/"]) == 2
    assert "--token" in capsys.readouterr().err


def test_join_with_a_refused_token_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    from worker.cli import main

    with FakeCoordinator(hello_error="invalid_token") as fake:
        code = main(["join", fake.url, "--token", "nope", "--data-dir", str(tmp_path), "--no-status"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot continue" in err and "what to do: copy the token again" in err


@pytest.mark.parametrize("code", sorted(FATAL_CODES | {"unsupported_campaign", "invalid_url"}))
def test_every_refusal_says_what_to_do(code: str) -> None:
    assert FatalError(code, "refused").what_to_do
    assert "join command" in FatalError("unsupported_campaign", "refused").what_to_do


@pytest.mark.timeout(300)
def test_a_backfill_campaign_asks_the_coordinator_for_exactly_what_it_fills(
    worker_env: None, tmp_path: Path
) -> None:
    """Issue #29 on the volunteer's path: a campaign's batch_rule reaches the agent, each round's
    sample_request asks for B minus the informative own groups, and the round's metrics carry
    that count and the compute (generated and trained completions and tokens)."""
    config = small_config(
        batch_rule="backfill",
        questions_per_round=4,
        num_local=4,
        num_external=4,
        group_size=4,
        local_strategy="nonzero_advantage",
        external_strategy="nonzero_advantage",
    )
    with FakeCoordinator() as fake:
        fake.config = config
        result = run_worker(fake.url, "secret", tmp_path / "volunteer", status=False)
        assert result.reason == "completed" and sorted(fake.metrics) == [0, 1, 2]
        asked = [m.count for m in fake.of_type("sample_request")]
    wanted = []
    for r in range(3):
        m = fake.metrics[r]
        informative = m["generation/questions"] - m["filtered/local"]
        assert m["batch/local_used"] == informative and m["batch/external_requested"] == 4 - informative
        assert m["generation/completions"] == 16 and m["generation/tokens"] > 0
        assert m["train/completions"] == 4 * (m["batch/local_used"] + m["batch/external_used"])
        wanted += [int(m["batch/external_requested"])] if m["batch/external_requested"] else []
    assert asked == wanted


@pytest.mark.timeout(300)
def test_a_node_evaluates_at_the_cadence_with_greedy_answers(worker_env: None, tmp_path: Path) -> None:
    """Issue #48 on the volunteer's path: after every eval_every-th round and the last, the node
    asks for the evaluation's set and answers each question once, with its own score of its
    answers as a claim only."""
    with FakeCoordinator(small_config(rounds=3, eval_every=2, eval_questions=3)) as fake:
        result = run_worker(fake.url, "secret", tmp_path / "volunteer", status=False)
    assert result.reason == "completed" and sorted(fake.metrics) == [0, 1, 2]
    assert sorted(fake.evaluations) == [1, 2]  # after round 1 (the cadence) and round 2 (the last)
    asked = [m.round for m in fake.of_type("eval_request")]
    assert asked == [1, 2]
    for evaluation in fake.evaluations.values():
        assert len(evaluation["answers"]) == 3 * 2
        assert evaluation["claimed"] == pytest.approx(evaluation["score"].accuracy)
    assert result.eval_seconds > 0


def test_hub_telemetry_is_off_unless_the_volunteer_opts_in() -> None:
    from worker.cli import hub_telemetry_off

    environ: dict[str, str] = {}
    hub_telemetry_off(environ)
    assert environ == {"HF_HUB_DISABLE_TELEMETRY": "1"}
    opted_in = {"HF_HUB_DISABLE_TELEMETRY": "0"}
    hub_telemetry_off(opted_in)
    assert opted_in == {"HF_HUB_DISABLE_TELEMETRY": "0"}
