"""A property-based fuzzer of the worker endpoint: generated and mutated frames against a real
coordinator (daphne, the test database, the channel layer), one frame at a time on a live socket.

Every frame must be answered (a reply, or a documented close), never with ``internal_error``;
a refused frame must change nothing stored; the server must stay up and log no traceback.
Frames come from three sources: shapes of the protocol's own messages (worker/shared/protocol.py)
with arbitrary JSON values; valid frames of each type, mutated (a field dropped, replaced or
added, a NUL, a huge integer, deep nesting, a truncation); and arbitrary text or bytes.

The example budget is ``SWARM_FUZZ_EXAMPLES`` (default 300, what CI runs in each mode). A longer
run, e.g. 20,000 frames:

    SWARM_FUZZ_EXAMPLES=20000 ./scripts/test.sh tests/coordinator/test_fuzz.py -s
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm_app.campaigns.models import Campaign
from tests.coordinator.test_protocol import stored_state
from tests.servers import asgi_server
from tests.wsclient import RawSession, hello_fields
from worker.shared import protocol
from worker.shared.campaign import CampaignConfig
from worker.shared.protocol import ErrorCode

EXAMPLES = int(os.environ.get("SWARM_FUZZ_EXAMPLES", "300"))
DOCUMENTED_CLOSES = {1000, 1009, 4000, 4001, 4003}
FATAL_CODES = {"invalid_token", "token_revoked", "banned", "unsupported_version"}  # answer, then close
ERROR_CODES = {code.value for code in ErrorCode} - {ErrorCode.INTERNAL.value}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)
FIELD_NAMES = sorted({name for cls in protocol.WORKER_MESSAGES.values() for name in cls.__struct_fields__})


def valid_frames(token: str) -> dict[str, dict[str, Any]]:
    """One well-formed frame of each worker message type (what a real worker might send)."""
    return {
        "hello": {"type": "hello", "id": "h", **hello_fields(token, "fuzz-node")},
        "hello_unknown_token": {"type": "hello", "id": "h", **hello_fields("swt_no-such-token", "fuzz-b")},
        "lease_request": {"type": "lease_request", "id": "l", "round": 0},
        "sample_request": {"type": "sample_request", "id": "s", "round": 0, "count": 4},
        "metrics": {"type": "metrics", "id": "m", "round": 0, "metrics": {"reward": 0.5, "loss": 0.1}},
        "heartbeat": {"type": "heartbeat", "id": "b"},
        "release": {"type": "release", "id": "r", "lease_id": "no-such-lease"},
        "submit": {
            "type": "submit",
            "id": "u",
            "submission_id": "x",
            "lease_id": "no-such-lease",
            "rollouts": [],
        },
    }


def shaped_frames() -> st.SearchStrategy[str]:
    kinds = st.sampled_from([*protocol.WORKER_MESSAGES, "teleport"])
    fields = st.dictionaries(st.sampled_from([*FIELD_NAMES, "extra"]), json_values, max_size=6)
    return st.builds(lambda kind, body: json.dumps({"type": kind, "id": "f", **body}), kinds, fields)


def mutated_frames(token: str) -> st.SearchStrategy[str]:
    templates = list(valid_frames(token).values())

    def mutate(frame: dict[str, Any], how: str, key: str, value: Any, cut: float) -> str:
        frame = json.loads(json.dumps(frame))
        names = [k for k in frame if k != "type"] or ["id"]
        target = names[hash(key) % len(names)]
        if how == "drop":
            frame.pop(target, None)
        elif how == "replace":
            frame[target] = value
        elif how == "add":
            frame[key or "extra"] = value
        elif how == "nul":  # a NUL where validation would otherwise let the text through
            current = frame.get(target)
            if isinstance(current, str):
                frame[target] = current + "\x00"
            elif isinstance(current, dict):
                frame[target] = {**current, "k\x00": 1.0}
            else:
                frame[target] = "\x00"
        text = json.dumps(frame)
        if how == "huge_int":
            return text[:-1] + ', "round": ' + "9" * 5000 + "}"
        if how == "deep":
            return text[:-1] + ', "metrics": ' + "[" * 3000 + "]" * 3000 + "}"
        if how == "truncate":
            return text[: int(len(text) * cut)]
        return text

    return st.builds(
        mutate,
        st.sampled_from(templates),
        st.sampled_from(["drop", "replace", "add", "nul", "huge_int", "deep", "truncate"]),
        st.text(max_size=8),
        json_values,
        st.floats(min_value=0, max_value=1),
    )


def frames(token: str) -> st.SearchStrategy[str | bytes]:
    return st.one_of(
        shaped_frames(),
        mutated_frames(token),
        mutated_frames(token),
        st.text(max_size=200),
        st.binary(max_size=64),
    )


@pytest.fixture
def fuzz_server(transactional_db, tmp_path):
    config = CampaignConfig(group_size=4, questions_per_round=2, num_local=2, num_external=2, rounds=10)
    campaign = Campaign.objects.create(
        name="fuzz", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    from swarm_app.coordinator.tokens import create_token

    _, token = create_token(campaign, "fuzz")
    log_path = tmp_path / "daphne.log"
    # The rate limiter is lifted so that frames reach the parser (its own replies are tested elsewhere).
    with asgi_server(log_path, WORKER_RATE_PER_SECOND="100000", WORKER_RATE_BURST="100000") as base:
        yield base, campaign, token, log_path


def test_fuzzed_frames_get_documented_answers_and_change_nothing(fuzz_server):
    base, campaign, token, log_path = fuzz_server
    loop = asyncio.new_event_loop()
    state: dict[str, Any] = {"session": None, "tried": 0, "closes": 0, "errors": {}}

    async def session() -> RawSession:
        if state["session"] is None:
            s = await RawSession.open(base)
            assert (await s.hello(token, "fuzz-node"))["type"] == "welcome"
            state["session"] = s
        return state["session"]

    async def exchange(frame: str | bytes, fresh: bool) -> dict[str, Any] | None:
        if fresh:  # the frame is the connection's first: hellos are really processed
            if state["session"] is not None:
                await state["session"].close()
            state["session"] = await RawSession.open(base)
        s = await session()
        try:
            await s.ws.send(frame)
            reply = json.loads(await asyncio.wait_for(s.ws.recv(), timeout=30))
            if reply.get("type") == "error" and reply.get("code") in FATAL_CODES:
                with pytest.raises(websockets.ConnectionClosed) as closed:  # then the close, with its code
                    await asyncio.wait_for(s.ws.recv(), timeout=30)
                assert closed.value.rcvd is not None and closed.value.rcvd.code in DOCUMENTED_CLOSES, reply
                state["session"] = None
                state["closes"] += 1
            return reply
        except websockets.ConnectionClosed as closed:
            state["session"] = None
            state["closes"] += 1
            code = closed.rcvd.code if closed.rcvd else None
            assert code in DOCUMENTED_CLOSES, f"closed with {code} after {frame!r:.200}"
            return None

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frame=frames(token), fresh=st.integers(0, 3).map(lambda n: n == 0))
    def one_frame(frame: str | bytes, fresh: bool) -> None:
        before = stored_state(campaign)
        reply = loop.run_until_complete(exchange(frame, fresh))
        state["tried"] += 1
        if reply is None:
            return
        assert isinstance(reply, dict) and isinstance(reply.get("type"), str), reply
        if reply["type"] == "error":
            assert reply["code"] in ERROR_CODES, f"{reply} for {frame!r:.300}"
            state["errors"][reply["code"]] = state["errors"].get(reply["code"], 0) + 1
            assert stored_state(campaign) == before, f"a refused frame changed the store: {frame!r:.300}"

    try:
        one_frame()
        # The server is alive and still serves a well-behaved worker, on a new connection.
        if state["session"] is not None:
            loop.run_until_complete(state["session"].close())
        state["session"] = None
        alive = loop.run_until_complete(session())
        assert loop.run_until_complete(alive.request("heartbeat"))["type"] == "heartbeat_ack"
        loop.run_until_complete(alive.close())
    finally:
        loop.close()
    print(
        f"fuzz: {state['tried']} frames tried, {state['closes']} documented closes, errors {state['errors']}"
    )
    assert state["tried"] >= EXAMPLES
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and "internal_error" not in log, log[-3000:]
