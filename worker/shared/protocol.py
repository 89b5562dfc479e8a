"""The worker <-> coordinator websocket protocol: every message, its schema, and validation.

It is long because every message is declared here once, with its bounds and descriptions (the
reference in docs/protocol.md is generated from it): split, the protocol would live in two places.

Both sides import this module: the coordinator validates what workers send, the client
validates what the coordinator sends. Each message is declared once, as a msgspec Struct
below: the declaration is the validation (types, sizes, ranges and unknown fields are checked
while the frame is decoded, in C), and docs/protocol.md's reference is its JSON Schema
(``python -m worker.shared.protocol``). A message is one JSON object per websocket text frame:

    {"type": "<message type>", "id": "<request id, optional>", ...fields}

Replies carry ``"reply_to": <the request's id>``. Errors are ``{"type": "error", "code": ...,
"message": ..., "reply_to": ...}`` with a code from :class:`ErrorCode`.

Version negotiation: the worker's hello lists the protocol versions it speaks; the coordinator
answers with the highest one both support, or an ``unsupported_version`` error.

Version 2 (issue #31) folds a round's two other requests into the answers it already waits for:
the ``submit_ack`` carries the pool's draw for the round (``samples``: what a ``sample_request``
for the campaign's J_r would answer) and the ``metrics_ack`` the lease of the next round
(``next_lease``: what a ``lease_request`` would answer, held for the node). A round is then two
requests (submit, metrics) instead of four. Every version-1 request stays valid in version 2
(a worker may still ask for a lease or a draw), and a version-1 worker gets version-1 answers.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any, Union

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from worker.shared import validation
from worker.shared.campaign import CampaignConfig
from worker.shared.evaluation import MAX_EVAL_ANSWER_CHARS, MAX_EVAL_QUESTIONS
from worker.shared.questions import QuestionRef
from worker.shared.rollout import Rollout
from worker.shared.schema_docs import definitions_section, schema_entry
from worker.shared.tiers import ModelSpec

PROTOCOL_VERSION = 2  # the newest; SUPPORTED_VERSIONS are those both sides still speak
SUPPORTED_VERSIONS = (1, 2)
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # a submission of 64 groups x 8 long completions fits
MAX_ROLLOUTS_PER_MESSAGE = 64
MAX_METRIC_KEYS = 100
MAX_METRIC_KEY_CHARS = 64
# A metric name becomes a column header of the CSV export, which people open in spreadsheets:
# letters, digits and "_ . / -" only (every TRL name fits), starting with a letter, digit or "_"
# (never with a character a spreadsheet reads as the start of a formula: "= + - @").
METRIC_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")
MAX_ROUND = 10**9


class ErrorCode(StrEnum):
    MALFORMED_JSON = "malformed_json"
    INVALID_MESSAGE = "invalid_message"
    UNKNOWN_TYPE = "unknown_type"
    MESSAGE_TOO_LARGE = "message_too_large"
    RATE_LIMITED = "rate_limited"
    NOT_AUTHENTICATED = "not_authenticated"
    INVALID_TOKEN = "invalid_token"
    TOKEN_REVOKED = "token_revoked"
    UNSUPPORTED_VERSION = "unsupported_version"
    NO_TIER_FITS = "no_tier_fits"
    CAMPAIGN_NOT_RUNNING = "campaign_not_running"
    BANNED = "banned"
    UNKNOWN_LEASE = "unknown_lease"
    LEASE_NOT_YOURS = "lease_not_yours"
    LEASE_EXPIRED = "lease_expired"
    LEASE_MISMATCH = "lease_mismatch"
    DUPLICATE_SUBMISSION = "duplicate_submission"
    ROUND_SUBMITTED = "round_submitted"
    BUSY = "busy"
    REWARD_MISMATCH = "reward_mismatch"
    GROUND_TRUTH_MISMATCH = "ground_truth_mismatch"
    EVALUATION_NOT_DUE = "evaluation_not_due"
    EVALUATION_MISMATCH = "evaluation_mismatch"
    INTERNAL = "internal_error"


# What each code means (docs/protocol.md's table is generated from it).
ERROR_MEANINGS: dict[ErrorCode, str] = {
    ErrorCode.MALFORMED_JSON: "the frame is not a JSON object",
    ErrorCode.INVALID_MESSAGE: "a field is missing, of the wrong type or out of range",
    ErrorCode.UNKNOWN_TYPE: "no such message type",
    ErrorCode.MESSAGE_TOO_LARGE: "over MAX_MESSAGE_BYTES",
    ErrorCode.RATE_LIMITED: "too many messages; slow down",
    ErrorCode.NOT_AUTHENTICATED: "a request before a successful hello",
    ErrorCode.INVALID_TOKEN: "unknown token",
    ErrorCode.TOKEN_REVOKED: "the organizer revoked this token",
    ErrorCode.UNSUPPORTED_VERSION: "no protocol version in common",
    ErrorCode.NO_TIER_FITS: "this hardware cannot run any of the campaign's tiers",
    ErrorCode.CAMPAIGN_NOT_RUNNING: "pending, paused or finished: no leases",
    ErrorCode.BANNED: "this node sent too many false rewards",
    ErrorCode.UNKNOWN_LEASE: "no such lease (or evaluation set)",
    ErrorCode.LEASE_NOT_YOURS: "the lease (or evaluation set) was issued to another node",
    ErrorCode.LEASE_EXPIRED: "submitted after the deadline; the questions went to others",
    ErrorCode.LEASE_MISMATCH: "rollouts do not answer the leased questions exactly",
    ErrorCode.DUPLICATE_SUBMISSION: "this submission id was already accepted, or this evaluation set was "
    "already answered: data is the stored ack",
    ErrorCode.ROUND_SUBMITTED: "a lease for a round this node already submitted (after a crash): "
    "data is the stored ack; report the round's metrics and go on to the next",
    ErrorCode.BUSY: "the coordinator is behind: send the same request again after data.retry_after seconds",
    ErrorCode.REWARD_MISMATCH: "a claimed reward differs from the verified one",
    ErrorCode.GROUND_TRUTH_MISMATCH: "question or answer differs from the record",
    ErrorCode.EVALUATION_NOT_DUE: "no evaluation follows this round for this node: not a round of the "
    "campaign's cadence, or not the round whose metrics the node reported last",
    ErrorCode.EVALUATION_MISMATCH: "evaluation answers do not answer the evaluation set exactly: one "
    "answer per question, in its order",
    ErrorCode.INTERNAL: "the coordinator failed on this request (a bug: it is logged)",
}


class ProtocolError(ValueError):
    """A message that fails validation; ``code`` says how, the text says where."""

    def __init__(self, code: ErrorCode, message: str, data: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data  # details for the error reply, e.g. the original ack of a duplicate
        self.request_id: str | None = None  # the offending message's id, when it had a valid one
        self.path = ""  # the invalid field of an invalid message ("campaign.config.rounds")


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """``metrics`` as a report may carry them: finite numbers only (JSON has no NaN; booleans
    are not metrics), names cut to MAX_METRIC_KEY_CHARS, names outside METRIC_NAME dropped, at
    most MAX_METRIC_KEYS of them (the rest dropped). The worker cleans its report with it; the
    coordinator its controls'."""
    cleaned: dict[str, float] = {}
    for key, value in metrics.items():
        if len(cleaned) == MAX_METRIC_KEYS:
            break
        name = str(key)[:MAX_METRIC_KEY_CHARS]
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if number and METRIC_NAME.fullmatch(name):
            cleaned[name] = float(value)
    return cleaned


# --- the messages --------------------------------------------------------------------------------
# Field types with their bounds; `Meta(description=...)` becomes the docs' field description.

RequestId = Annotated[str, Meta(max_length=64)]
Round = Annotated[int, Meta(ge=0, le=MAX_ROUND)]
Count = Annotated[int, Meta(ge=0, le=MAX_ROLLOUTS_PER_MESSAGE)]
ShortText = Annotated[str, Meta(max_length=200)]
Object = dict[str, Any]
# A hello's hardware: flat facts (worker/shared/hardware.py), never nested.
HardwareValue = ShortText | int | float | bool | None | Annotated[list[ShortText], Meta(max_length=16)]
Hardware = Annotated[
    dict[Annotated[str, Meta(max_length=64)], HardwareValue],
    Meta(max_length=32, description="device, vram_bytes, ram_bytes, cpu_count, ... (flat)"),
]
# METRIC_NAME is in the schema for the docs only (extra_json_schema): MetricsReport checks it,
# so that the error names the metric.
MetricName = Annotated[
    str, Meta(max_length=MAX_METRIC_KEY_CHARS, extra_json_schema={"pattern": METRIC_NAME.pattern})
]
Metrics = Annotated[
    dict[MetricName, float],
    Meta(max_length=MAX_METRIC_KEYS, description="metric name (TRL's) -> finite number"),
]
Rollouts = Annotated[list[Rollout], Meta(max_length=MAX_ROLLOUTS_PER_MESSAGE)]


class _Message(Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Every message: ``type`` (its tag), an optional request ``id``, and ``reply_to`` on replies."""

    id: RequestId | UnsetType = UNSET
    reply_to: RequestId | UnsetType = UNSET


# Worker -> coordinator.


class Hello(_Message, tag="hello"):
    """First message on every connection: who the worker is and what it can run."""

    protocol_versions: Annotated[list[int], Meta(max_length=16, description="versions this worker speaks")]
    token: Annotated[str, Meta(max_length=200, description="the worker token an organizer issued")]
    node_id: Annotated[str, Meta(max_length=64, description="stable id kept in the worker's data directory")]
    client_version: Annotated[str, Meta(max_length=32)]
    hardware: Hardware
    backends: Annotated[list[ShortText], Meta(max_length=8, description="generation backends available")]
    generation_tokens_per_second: Annotated[float, Meta(ge=0, description="measured at startup")]
    preferred_tier: Annotated[str, Meta(max_length=64, description="honoured if it fits")] | UnsetType = UNSET


class LeaseRequest(_Message, tag="lease_request"):
    """Ask for this round's questions."""

    round: Round


class Submit(_Message, tag="submit"):
    """Rollouts answering every question of a lease. Idempotent by submission_id."""

    submission_id: RequestId
    lease_id: RequestId
    rollouts: Rollouts


class SampleRequest(_Message, tag="sample_request"):
    """Ask for up to `count` verified rollouts of other workers (the campaign's strategy)."""

    round: Round
    count: Count


class MetricsReport(_Message, tag="metrics"):
    """The round's training metrics (TRL names). Rewards shown on dashboards are re-scored, not these."""

    round: Round
    metrics: Metrics

    def __post_init__(self) -> None:
        for key in self.metrics:
            if not METRIC_NAME.fullmatch(key):
                raise ValueError(
                    f"metrics: metric name {key!r} is not allowed: names are letters, digits and "
                    '"_ . / -", starting with a letter, digit or "_"'
                )


class ExtraLeaseRequest(_Message, tag="extra_lease_request"):
    """Over-generation (a control node of the ``dyn`` arm only): ``count`` more questions of this
    round, from ``start`` of the round's over-generation stream. Answered by a ``lease`` of its own."""

    round: Round
    start: Annotated[int, Meta(ge=0, le=MAX_ROLLOUTS_PER_MESSAGE)]
    count: Annotated[int, Meta(ge=1, le=MAX_ROLLOUTS_PER_MESSAGE)]


class EvalRequest(_Message, tag="eval_request"):
    """Ask for the held-out questions of the evaluation that follows ``round`` (a round of the
    campaign's cadence: ``eval_every``; the round whose metrics this node reported last).
    worker/shared/evaluation.py says which questions they are."""

    round: Round


class EvalAnswer(Struct, forbid_unknown_fields=True, kw_only=True):
    """One evaluation question's greedy completion (its last MAX_EVAL_ANSWER_CHARS characters)."""

    ref: QuestionRef
    completion: Annotated[str, Meta(max_length=MAX_EVAL_ANSWER_CHARS)]


class EvalSubmit(_Message, tag="eval_submit"):
    """Answers to every question of an evaluation set, in its order; scored by the coordinator
    with the tasks' verifiers (a claim is kept beside the score, never used for it). One per
    evaluation set; idempotent by submission_id."""

    submission_id: RequestId
    eval_id: RequestId
    answers: Annotated[list[EvalAnswer], Meta(max_length=MAX_EVAL_QUESTIONS)]
    claimed_accuracy: (
        Annotated[float, Meta(ge=0, le=1, description="the node's own score (shown, never trusted)")]
        | UnsetType
    ) = UNSET


class Heartbeat(_Message, tag="heartbeat"):
    """Liveness; send after `heartbeat_seconds` without an answer to any other request."""


class Release(_Message, tag="release"):
    """Give a lease back (the worker is stopping); its questions are reissued at once."""

    lease_id: RequestId


# Coordinator -> worker.


class CampaignInfo(Struct, forbid_unknown_fields=True, kw_only=True):
    """The campaign a welcome admits the worker to."""

    id: int
    name: Annotated[str, Meta(max_length=200)]
    state: Annotated[str, Meta(max_length=32)]
    config: Annotated[CampaignConfig, Meta(description="every campaign setting (worker/shared/campaign.py)")]


class Limits(Struct, forbid_unknown_fields=True, kw_only=True):
    """What the coordinator enforces on this connection."""

    max_message_bytes: Annotated[int, Meta(ge=1)]
    rate_per_second: Annotated[float, Meta(gt=0, description="messages a second, on average")]
    rate_burst: Annotated[float, Meta(gt=0, description="messages at once above the average")]


class ControlInfo(Struct, forbid_unknown_fields=True, kw_only=True):
    """A control node's arm (worker/shared/arms.py's control kinds) and seed: it trains the
    campaign's control of that kind (CampaignConfig.control_agent_config), shares nothing and
    draws nothing, on the seed's paired question stream."""

    arm: Annotated[str, Meta(max_length=16, description="isolated, filtered, self or dyn")]
    seed: Annotated[int, Meta(description="the control seed: every arm of one seed is paired")]


class Welcome(_Message, tag="welcome"):
    """Hello accepted: the negotiated version, the campaign, the assigned tier, where to resume."""

    protocol_version: int
    node_id: RequestId
    campaign: CampaignInfo
    tier: Annotated[str, Meta(max_length=64)]
    model: Annotated[ModelSpec, Meta(description="the tier: where its weights come from, what it needs")]
    resume_round: Annotated[
        int, Meta(ge=0, description="the next round the coordinator expects from this node")
    ]
    heartbeat_seconds: Annotated[float, Meta(ge=1)]
    limits: Limits
    reason: Annotated[str, Meta(max_length=500, description="why this tier")]
    control: (
        Annotated[ControlInfo, Meta(description="present for a campaign's control nodes only")] | UnsetType
    ) = UNSET


class LeaseQuestion(Struct, forbid_unknown_fields=True):
    """One leased question with its ground truth (the coordinator keeps its own record)."""

    ref: QuestionRef
    question: str
    answer: str
    metadata: Object


class Lease(_Message, tag="lease"):
    """Questions for one round, with their ground truth (the coordinator keeps its own record)."""

    lease_id: RequestId
    round: Annotated[int, Meta(ge=0)]
    deadline: Annotated[float, Meta(description="unix time; submit before it")]
    questions: Annotated[list[LeaseQuestion], Meta(max_length=MAX_ROLLOUTS_PER_MESSAGE)]


class EvalQuestion(Struct, forbid_unknown_fields=True, kw_only=True):
    """One held-out question, without its answer."""

    ref: QuestionRef
    question: str


class EvalSet(_Message, tag="eval_set"):
    """The held-out questions of the evaluation after ``round``: the same for every node and
    control of the campaign at that evaluation, answers never sent. Answer with eval_submit."""

    eval_id: RequestId
    round: Annotated[int, Meta(ge=0)]
    questions: Annotated[list[EvalQuestion], Meta(max_length=MAX_EVAL_QUESTIONS)]


class EvalAck(_Message, tag="eval_ack"):
    """The evaluation's score as the coordinator verified it and stored it."""

    eval_id: RequestId
    round: Annotated[int, Meta(ge=0)]
    n: Annotated[int, Meta(ge=0, description="questions scored")]
    accuracy: Annotated[float, Meta(ge=0, le=1, description="share of answers the verifier gives full marks")]
    reward: Annotated[float, Meta(description="mean reward (the campaign's, as in training)")]


class SubmitAck(_Message, tag="submit_ack"):
    """Submission stored: the verified rewards, one list per rollout, in order."""

    submission_id: RequestId
    lease_id: RequestId
    verified_rewards: Annotated[list[list[float]], Meta(max_length=MAX_ROLLOUTS_PER_MESSAGE)]
    rollout_ids: Annotated[list[ShortText], Meta(max_length=MAX_ROLLOUTS_PER_MESSAGE)]
    samples: (
        Annotated[
            Rollouts,
            Meta(
                description="protocol 2: other nodes' verified rollouts for this round's training, "
                "J_r of the campaign's batch rule (absent on a replayed submission)"
            ),
        ]
        | UnsetType
    ) = UNSET


class Samples(_Message, tag="samples"):
    """External rollouts from other workers, verified."""

    rollouts: Rollouts


class MetricsAck(_Message, tag="metrics_ack"):
    """Metrics stored."""

    round: Annotated[int, Meta(ge=0)]
    next_lease: (
        Annotated[
            Lease,
            Meta(
                description="protocol 2: the next round's lease, held for this node (absent when the "
                "campaign is not running or the rounds are done: ask with lease_request)"
            ),
        ]
        | UnsetType
    ) = UNSET


class HeartbeatAck(_Message, tag="heartbeat_ack"):
    """Liveness acknowledged, with the campaign's state."""

    campaign_state: Annotated[str, Meta(max_length=32)]


class ReleaseAck(_Message, tag="release_ack"):
    """Lease released."""

    lease_id: RequestId


class CampaignState(_Message, tag="campaign_state"):
    """Pushed when an organizer pauses, resumes or stops the campaign."""

    state: Annotated[str, Meta(max_length=32)]


class Error(_Message, tag="error"):
    """A request failed; nothing it asked for was stored."""

    code: Annotated[str, Meta(max_length=64)]
    message: Annotated[str, Meta(max_length=2000)]
    data: Annotated[Object, Meta(description="details, e.g. the original ack")] | UnsetType = UNSET


# What each side sends: ``parse`` returns one of these, and handlers match on the type.
WorkerMessage = (
    Hello
    | LeaseRequest
    | ExtraLeaseRequest
    | Submit
    | SampleRequest
    | MetricsReport
    | EvalRequest
    | EvalSubmit
    | Heartbeat
    | Release
)
CoordinatorMessage = (
    Welcome
    | Lease
    | SubmitAck
    | Samples
    | MetricsAck
    | EvalSet
    | EvalAck
    | HeartbeatAck
    | ReleaseAck
    | CampaignState
    | Error
)
WORKER_MESSAGES: dict[str, type[_Message]] = {
    cls.__struct_config__.tag: cls
    for cls in (
        Hello,
        LeaseRequest,
        ExtraLeaseRequest,
        Submit,
        SampleRequest,
        MetricsReport,
        EvalRequest,
        EvalSubmit,
        Heartbeat,
        Release,
    )
}
COORDINATOR_MESSAGES: dict[str, type[_Message]] = {
    cls.__struct_config__.tag: cls
    for cls in (
        Welcome,
        Lease,
        SubmitAck,
        Samples,
        MetricsAck,
        EvalSet,
        EvalAck,
        HeartbeatAck,
        ReleaseAck,
        CampaignState,
        Error,
    )
}
# The reply each worker request gets (or `error`).
REPLIES: dict[type[_Message], type[_Message]] = {
    Hello: Welcome,
    LeaseRequest: Lease,
    ExtraLeaseRequest: Lease,
    Submit: SubmitAck,
    SampleRequest: Samples,
    MetricsReport: MetricsAck,
    EvalRequest: EvalSet,
    EvalSubmit: EvalAck,
    Heartbeat: HeartbeatAck,
    Release: ReleaseAck,
}


def kind(message: type[_Message] | _Message) -> str:
    """A message's (or message class's) ``type`` on the wire."""
    return message.__struct_config__.tag  # type: ignore[return-value]


_DECODERS = {
    "worker": msgspec.json.Decoder(Union[tuple(WORKER_MESSAGES.values())]),  # noqa: UP007
    "coordinator": msgspec.json.Decoder(Union[tuple(COORDINATOR_MESSAGES.values())]),  # noqa: UP007
}


# A JSON escape of U+0000 (an odd run of backslashes before "u0000"). PostgreSQL's text and
# jsonb cannot store NUL, so every string field would fail at the INSERT: refused at the
# boundary instead, the same on both database backends. (Raw control characters and lone
# surrogates are not valid JSON and msgspec refuses them already.)
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_NUL_ESCAPE_BYTES = re.compile(_NUL_ESCAPE.pattern.encode())


def _has_nul_escape(raw: str | bytes) -> bool:
    """Whether the frame escapes U+0000. The regex tries every position of the frame (its
    lookbehind gives the engine no literal to skip to): ~3 ms on a 36 KB submission, the largest
    single cost of parsing one (py-spy of daphne, issue #15). A substring search first (~40 us)
    settles almost every frame; only a frame that contains the six characters runs the regex,
    which tells an escaped backslash before "u0000" from a NUL."""
    if isinstance(raw, bytes):
        return b"\\u0000" in raw and _NUL_ESCAPE_BYTES.search(raw) is not None
    return "\\u0000" in raw and _NUL_ESCAPE.search(raw) is not None


class _IdOnly(Struct):
    id: Any = None


_ID_DECODER = msgspec.json.Decoder(_IdOnly)


def parse(raw: str | bytes, direction: str) -> Any:
    """Validate one frame sent by ``direction`` ("worker": a :data:`WorkerMessage`, or
    "coordinator": a :data:`CoordinatorMessage`) and return it; raise ProtocolError.

    The cost is bounded before any work: the frame's size first, then one decode that stops at
    the first violation (a string over its limit, an integer out of range, nesting past
    Python's recursion limit in a free-form object).
    """
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            ErrorCode.MESSAGE_TOO_LARGE, f"message of {size} bytes exceeds {MAX_MESSAGE_BYTES}"
        )
    if _has_nul_escape(raw):
        nul = ProtocolError(ErrorCode.INVALID_MESSAGE, "text must not contain U+0000 (NUL)")
        raise _with_id(nul, raw)
    try:
        return _DECODERS[direction].decode(raw)
    except msgspec.ValidationError as error:
        raise _invalid(error, raw, direction) from None
    except msgspec.DecodeError as error:
        raise ProtocolError(ErrorCode.MALFORMED_JSON, f"not valid JSON: {error}") from None
    except RecursionError:
        nested = ProtocolError(ErrorCode.INVALID_MESSAGE, "the message is nested too deeply")
        raise _with_id(nested, raw) from None


def _invalid(error: msgspec.ValidationError, raw: str | bytes, direction: str) -> ProtocolError:
    path, what = validation.describe(error)
    if path == "" and what.startswith("expected `object`"):
        return ProtocolError(ErrorCode.MALFORMED_JSON, "a message must be a JSON object")
    if path == "type" and what.startswith("invalid value"):
        expected = sorted(WORKER_MESSAGES if direction == "worker" else COORDINATOR_MESSAGES)
        return _with_id(
            ProtocolError(
                ErrorCode.UNKNOWN_TYPE, f"unknown message type: {what}; expected one of {expected}"
            ),
            raw,
        )
    where = f"field {path!r}: " if path else ""
    invalid = ProtocolError(ErrorCode.INVALID_MESSAGE, where + what)
    invalid.path = path
    return _with_id(invalid, raw)


def _with_id(error: ProtocolError, raw: str | bytes) -> ProtocolError:
    # Answer with the request's id whenever it had a usable one, so the sender can match the
    # error to the request even though the rest of the message was invalid.
    error.request_id = peek_id(raw)
    return error


def peek_id(raw: str | bytes) -> str | None:
    """The request id of a frame that will not be processed (e.g. rate-limited), if readable.

    Decodes only ``id`` (every other value is skipped, not built), at a bounded cost."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return None
    try:
        request_id = _ID_DECODER.decode(raw).id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return request_id if isinstance(request_id, str) and len(request_id) <= 64 else None


def encode(message: _Message, reply_to: str | None = None) -> str:
    """One frame: ``message`` as JSON (``reply_to`` set when given). Fields are written as they
    are held: a Samples' rollouts may be stored records (dicts) as well as :class:`Rollout`."""
    if reply_to is not None:
        message = msgspec.structs.replace(message, reply_to=reply_to)
    return msgspec.json.encode(message).decode()


def error(code: ErrorCode, message: str, reply_to: str | None = None, data: dict | None = None) -> str:
    """An ``error`` frame."""
    return encode(Error(code=str(code), message=message, data=UNSET if data is None else data), reply_to)


def json_schemas() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(each message's JSON Schema by type, the shared definitions it references by name)."""
    messages = [*WORKER_MESSAGES.values(), *COORDINATOR_MESSAGES.values()]
    refs, definitions = msgspec.json.schema_components(messages, ref_template="#/$defs/{name}")
    by_type = {}
    for cls, ref in zip(messages, refs, strict=True):
        name = ref["$ref"].rsplit("/", 1)[1]
        by_type[cls.__struct_config__.tag] = definitions.pop(name)
    return by_type, definitions


def render_docs() -> str:
    """The message reference section of docs/protocol.md, from the declarations' JSON Schema."""
    schemas, definitions = json_schemas()
    lines = [
        "## Message reference",
        "",
        "Generated by `python -m worker.shared.protocol` from the message declarations in",
        "`worker/shared/protocol.py` (msgspec Structs; this is their JSON Schema). Every message may",
        'also carry `"id"` (a request id, at most 64 characters) and replies carry `"reply_to"`.',
        "A `$ref` such as `#/$defs/Rollout` points into the definitions that follow the messages.",
        "",
    ]
    for title, specs in (
        ("Worker to coordinator", WORKER_MESSAGES),
        ("Coordinator to worker", COORDINATOR_MESSAGES),
    ):
        lines += [f"### {title}", ""]
        for tag in specs:
            answer = REPLIES.get(specs[tag])
            reply = f" Answered by `{answer.__struct_config__.tag}` (or `error`)." if answer else ""
            lines += schema_entry(tag, schemas[tag], reply)
    lines += definitions_section(definitions)
    lines += ["### Error codes", "", "| code | meaning |", "|---|---|"]
    lines += [f"| `{code.value}` | {ERROR_MEANINGS[code]} |" for code in ErrorCode]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_docs())
