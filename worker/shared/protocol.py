"""The worker <-> coordinator websocket protocol: every message, its schema, and validation.

Both sides import this module: the coordinator validates what workers send, the client
validates what the coordinator sends. A message is one JSON object per websocket text frame:

    {"type": "<message type>", "id": "<request id, optional>", ...fields}

Replies carry ``"reply_to": <the request's id>``. Errors are ``{"type": "error", "code": ...,
"message": ..., "reply_to": ...}`` with a code from :class:`ErrorCode`. docs/protocol.md is
generated from the schemas below (``python -m worker.shared.protocol``), so the two cannot drift.

Version negotiation: the worker's hello lists the protocol versions it speaks; the coordinator
answers with the highest one both support, or an ``unsupported_version`` error.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from worker.shared.rollout import Rollout, RolloutError

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = (1,)
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # a submission of 64 groups x 8 long completions fits
MAX_ROLLOUTS_PER_MESSAGE = 64


class ErrorCode(StrEnum):
    MALFORMED_JSON = "malformed_json"  # the frame is not a JSON object
    INVALID_MESSAGE = "invalid_message"  # a field is missing, of the wrong type or out of range
    UNKNOWN_TYPE = "unknown_type"  # no such message type
    MESSAGE_TOO_LARGE = "message_too_large"  # over MAX_MESSAGE_BYTES
    RATE_LIMITED = "rate_limited"  # too many messages; slow down
    NOT_AUTHENTICATED = "not_authenticated"  # a request before a successful hello
    INVALID_TOKEN = "invalid_token"  # unknown token
    TOKEN_REVOKED = "token_revoked"  # the organizer revoked this token
    UNSUPPORTED_VERSION = "unsupported_version"  # no protocol version in common
    NO_TIER_FITS = "no_tier_fits"  # this hardware cannot run any of the campaign's tiers
    CAMPAIGN_NOT_RUNNING = "campaign_not_running"  # pending, paused or finished: no leases
    BANNED = "banned"  # this node sent too many false rewards
    UNKNOWN_LEASE = "unknown_lease"
    LEASE_NOT_YOURS = "lease_not_yours"  # the lease was issued to another node
    LEASE_EXPIRED = "lease_expired"  # submitted after the deadline; the questions went to others
    LEASE_MISMATCH = "lease_mismatch"  # rollouts do not answer the leased questions exactly
    DUPLICATE_SUBMISSION = "duplicate_submission"  # this submission id was already accepted
    REWARD_MISMATCH = "reward_mismatch"  # a claimed reward differs from the verified one
    GROUND_TRUTH_MISMATCH = "ground_truth_mismatch"  # question or answer differs from the record
    INTERNAL = "internal_error"


class ProtocolError(ValueError):
    """A message that fails validation; ``code`` says how, the text says where."""

    def __init__(self, code: ErrorCode, message: str, data: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data  # details for the error reply, e.g. the original ack of a duplicate
        self.request_id: str | None = None  # the offending message's id, when it had a valid one


# --- a small schema language, also rendered as JSON Schema for the docs ----------------------


@dataclass(frozen=True)
class Field:
    kind: str  # str, int, number, bool, object, list, rollouts, str_list, int_list
    required: bool = True
    max_length: int | None = None  # characters (str), items (list), serialised chars (object)
    minimum: float | None = None
    maximum: float | None = None
    doc: str = ""

    def json_schema(self) -> dict[str, Any]:
        kinds = {
            "str": {"type": "string"},
            "int": {"type": "integer"},
            "number": {"type": "number"},
            "bool": {"type": "boolean"},
            "object": {"type": "object"},
            "list": {"type": "array"},
            "str_list": {"type": "array", "items": {"type": "string"}},
            "int_list": {"type": "array", "items": {"type": "integer"}},
            "number_lists": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "rollouts": {"type": "array", "items": {"$ref": "#/definitions/rollout"}},
        }
        schema = dict(kinds[self.kind])
        if self.max_length is not None:
            key = {"str": "maxLength", "object": "maxProperties"}.get(self.kind, "maxItems")
            if self.kind == "object":
                key = "x-maxSerialisedChars"  # a bound on size, not on the number of keys
            schema[key] = self.max_length
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.doc:
            schema["description"] = self.doc
        return schema


@dataclass(frozen=True)
class MessageSpec:
    type: str
    direction: str  # "worker" (worker -> coordinator) or "coordinator"
    doc: str
    fields: dict[str, Field] = field(default_factory=dict)
    reply: str = ""  # the message type that answers it

    def json_schema(self) -> dict[str, Any]:
        properties = {
            "type": {"const": self.type},
            "id": {"type": "string", "maxLength": 64},
            "reply_to": {"type": "string", "maxLength": 64},
        }
        properties.update({name: f.json_schema() for name, f in self.fields.items()})
        return {
            "type": "object",
            "properties": properties,
            "required": ["type", *[name for name, f in self.fields.items() if f.required]],
            "additionalProperties": False,
        }


ID = Field("str", max_length=64)
S = Field


def _messages(*specs: MessageSpec) -> dict[str, MessageSpec]:
    return {spec.type: spec for spec in specs}


WORKER_MESSAGES = _messages(
    MessageSpec(
        "hello",
        "worker",
        "First message on every connection: who the worker is and what it can run.",
        {
            "protocol_versions": S("int_list", max_length=16, doc="versions this worker speaks"),
            "token": S("str", max_length=200, doc="the worker token an organizer issued"),
            "node_id": S("str", max_length=64, doc="stable id kept in the worker's data directory"),
            "client_version": S("str", max_length=32),
            "hardware": S("object", max_length=4000, doc="device, vram_bytes, ram_bytes, cpu_count, ..."),
            "backends": S("str_list", max_length=8, doc="generation backends available"),
            "generation_tokens_per_second": S("number", minimum=0, doc="measured at startup"),
            "preferred_tier": S("str", required=False, max_length=64, doc="honoured if it fits"),
        },
        reply="welcome",
    ),
    MessageSpec(
        "lease_request",
        "worker",
        "Ask for this round's questions.",
        {"round": S("int", minimum=0, maximum=10**9)},
        reply="lease",
    ),
    MessageSpec(
        "submit",
        "worker",
        "Rollouts answering every question of a lease. Idempotent by submission_id.",
        {
            "submission_id": ID,
            "lease_id": ID,
            "rollouts": S("rollouts", max_length=MAX_ROLLOUTS_PER_MESSAGE),
        },
        reply="submit_ack",
    ),
    MessageSpec(
        "sample_request",
        "worker",
        "Ask for up to `count` verified rollouts of other workers (the campaign's strategy).",
        {
            "round": S("int", minimum=0, maximum=10**9),
            "count": S("int", minimum=0, maximum=MAX_ROLLOUTS_PER_MESSAGE),
        },
        reply="samples",
    ),
    MessageSpec(
        "metrics",
        "worker",
        "The round's training metrics (TRL names). Rewards shown on dashboards are re-scored, not these.",
        {"round": S("int", minimum=0, maximum=10**9), "metrics": S("object", max_length=8000)},
        reply="metrics_ack",
    ),
    MessageSpec(
        "heartbeat", "worker", "Liveness; send every `heartbeat_seconds`.", {}, reply="heartbeat_ack"
    ),
    MessageSpec(
        "release",
        "worker",
        "Give a lease back (the worker is stopping); its questions are reissued at once.",
        {"lease_id": ID},
        reply="release_ack",
    ),
)

COORDINATOR_MESSAGES = _messages(
    MessageSpec(
        "welcome",
        "coordinator",
        "Hello accepted: the negotiated version, the campaign, the assigned tier, where to resume.",
        {
            "protocol_version": S("int"),
            "node_id": ID,
            "campaign": S(
                "object", max_length=64_000, doc="id, name, state and config (tasks, G, I, J, GRPO...)"
            ),
            "tier": S("str", max_length=64),
            "model": S("object", max_length=4000, doc="the tier's ModelSpec"),
            "resume_round": S("int", minimum=0, doc="the next round the coordinator expects from this node"),
            "heartbeat_seconds": S("number", minimum=1),
            "limits": S("object", max_length=4000, doc="max_message_bytes, rate limits"),
            "reason": S("str", max_length=500, doc="why this tier"),
        },
    ),
    MessageSpec(
        "lease",
        "coordinator",
        "Questions for one round, with their ground truth (the coordinator keeps its own record).",
        {
            "lease_id": ID,
            "round": S("int", minimum=0),
            "deadline": S("number", doc="unix time; submit before it"),
            "questions": S(
                "list", max_length=MAX_ROLLOUTS_PER_MESSAGE, doc="[{ref, question, answer, metadata}]"
            ),
        },
    ),
    MessageSpec(
        "submit_ack",
        "coordinator",
        "Submission stored: the verified rewards, one list per rollout, in order.",
        {
            "submission_id": ID,
            "lease_id": ID,
            "verified_rewards": S("number_lists", max_length=MAX_ROLLOUTS_PER_MESSAGE),
            "rollout_ids": S("str_list", max_length=MAX_ROLLOUTS_PER_MESSAGE),
        },
    ),
    MessageSpec(
        "samples",
        "coordinator",
        "External rollouts from other workers, verified.",
        {"rollouts": S("rollouts", max_length=MAX_ROLLOUTS_PER_MESSAGE)},
    ),
    MessageSpec("metrics_ack", "coordinator", "Metrics stored.", {"round": S("int", minimum=0)}),
    MessageSpec(
        "heartbeat_ack",
        "coordinator",
        "Liveness acknowledged, with the campaign's state.",
        {"campaign_state": S("str", max_length=32)},
    ),
    MessageSpec("release_ack", "coordinator", "Lease released.", {"lease_id": ID}),
    MessageSpec(
        "campaign_state",
        "coordinator",
        "Pushed when an organizer pauses, resumes or stops the campaign.",
        {"state": S("str", max_length=32)},
    ),
    MessageSpec(
        "error",
        "coordinator",
        "A request failed; nothing it asked for was stored.",
        {
            "code": S("str", max_length=64),
            "message": S("str", max_length=2000),
            "data": S("object", required=False, max_length=64_000, doc="details, e.g. the original ack"),
        },
    ),
)


def _check_field(name: str, spec: Field, value: Any) -> Any:
    def fail(expected: str) -> ProtocolError:
        return ProtocolError(
            ErrorCode.INVALID_MESSAGE, f"field {name!r}: expected {expected}, got {value!r:.80}"
        )

    kind = spec.kind
    if kind == "str":
        if not isinstance(value, str):
            raise fail("a string")
        if spec.max_length is not None and len(value) > spec.max_length:
            raise fail(f"at most {spec.max_length} characters")
    elif kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise fail("an integer")
    elif kind == "number":
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise fail("a finite number")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise fail("true or false")
    elif kind == "object":
        if not isinstance(value, dict):
            raise fail("an object")
        if spec.max_length is not None and len(json.dumps(value)) > spec.max_length:
            raise fail(f"an object of at most {spec.max_length} serialised characters")
    elif kind in ("list", "str_list", "int_list", "number_lists", "rollouts"):
        if not isinstance(value, list):
            raise fail("a list")
        if spec.max_length is not None and len(value) > spec.max_length:
            raise fail(f"at most {spec.max_length} items")
        item_ok = {
            "list": lambda v: isinstance(v, dict),
            "str_list": lambda v: isinstance(v, str) and len(v) <= 200,
            "int_list": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number_lists": lambda v: (
                isinstance(v, list)
                and all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in v
                )
            ),
            "rollouts": lambda v: True,
        }[kind]
        for i, item in enumerate(value):
            if not item_ok(item):
                raise ProtocolError(
                    ErrorCode.INVALID_MESSAGE, f"field {name!r}[{i}]: invalid item {item!r:.80}"
                )
        if kind == "rollouts":
            rollouts = []
            for i, item in enumerate(value):
                try:
                    rollouts.append(Rollout.from_json(item))
                except RolloutError as error:
                    raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"field {name!r}[{i}]: {error}") from None
            return rollouts
    if spec.minimum is not None and value < spec.minimum:
        raise fail(f"a value >= {spec.minimum}")
    if spec.maximum is not None and value > spec.maximum:
        raise fail(f"a value <= {spec.maximum}")
    return value


@dataclass
class Message:
    type: str
    fields: dict[str, Any]  # validated; "rollouts" fields hold Rollout objects
    id: str | None = None
    reply_to: str | None = None


def parse(raw: str | bytes, direction: str) -> Message:
    """Validate one frame sent by ``direction`` ("worker" or "coordinator"); raise ProtocolError."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            ErrorCode.MESSAGE_TOO_LARGE, f"message of {size} bytes exceeds {MAX_MESSAGE_BYTES}"
        )
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ProtocolError(ErrorCode.MALFORMED_JSON, f"not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.MALFORMED_JSON, "a message must be a JSON object")
    try:
        return _validate(data, direction)
    except ProtocolError as error:
        # Answer with the request's id whenever it had a usable one, so the sender can match
        # the error to the request even though the rest of the message was invalid.
        request_id = data.get("id")
        if isinstance(request_id, str) and len(request_id) <= 64:
            error.request_id = request_id
        raise


def peek_id(raw: str) -> str | None:
    """The request id of a frame that will not be processed (e.g. rate-limited), if readable."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return None
    request_id = data.get("id") if isinstance(data, dict) else None
    return request_id if isinstance(request_id, str) and len(request_id) <= 64 else None


def _validate(data: dict[str, Any], direction: str) -> Message:
    specs = WORKER_MESSAGES if direction == "worker" else COORDINATOR_MESSAGES
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "field 'type': expected a string")
    spec = specs.get(kind)
    if spec is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind!r}; expected one of {sorted(specs)}"
        )
    envelope = {}
    for key in ("id", "reply_to"):
        if key in data:
            envelope[key] = _check_field(key, ID, data[key])
    unknown = set(data) - set(spec.fields) - {"type", "id", "reply_to"}
    if unknown:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"{kind}: unknown fields {sorted(unknown)}")
    values = {}
    for name, field_spec in spec.fields.items():
        if name not in data:
            if field_spec.required:
                raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"{kind}: missing field {name!r}")
            continue
        values[name] = _check_field(name, field_spec, data[name])
    return Message(kind, values, envelope.get("id"), envelope.get("reply_to"))


def encode(kind: str, reply_to: str | None = None, id: str | None = None, **fields: Any) -> str:
    """Serialise a message; Rollout values are turned into their JSON records."""
    body: dict[str, Any] = {"type": kind}
    if id is not None:
        body["id"] = id
    if reply_to is not None:
        body["reply_to"] = reply_to
    for name, value in fields.items():
        if isinstance(value, list) and value and isinstance(value[0], Rollout):
            value = [r.to_json() for r in value]
        body[name] = value
    return json.dumps(body, separators=(",", ":"))


def error(code: ErrorCode, message: str, reply_to: str | None = None, data: dict | None = None) -> str:
    fields: dict[str, Any] = {"code": str(code), "message": message}
    if data is not None:
        fields["data"] = data
    return encode("error", reply_to=reply_to, **fields)


def render_docs() -> str:
    """The message reference section of docs/protocol.md."""
    lines = [
        "## Message reference",
        "",
        "Generated by `python -m worker.shared.protocol` from `worker/shared/protocol.py`.",
        "",
    ]
    for title, specs in (
        ("Worker to coordinator", WORKER_MESSAGES),
        ("Coordinator to worker", COORDINATOR_MESSAGES),
    ):
        lines += [f"### {title}", ""]
        for spec in specs.values():
            reply = f" Answered by `{spec.reply}` (or `error`)." if spec.reply else ""
            lines += [f"#### `{spec.type}`", "", spec.doc + reply, "", "```json"]
            lines += [json.dumps(spec.json_schema(), indent=2), "```", ""]
    lines += ["### Error codes", "", "| code | meaning |", "|---|---|"]
    import inspect

    source = inspect.getsource(ErrorCode)
    for code in ErrorCode:
        comment = ""
        for line in source.splitlines():
            if f'"{code.value}"' in line and "#" in line:
                comment = line.split("#", 1)[1].strip()
        lines.append(f"| `{code.value}` | {comment} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_docs())
