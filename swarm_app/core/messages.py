"""The coordinator's internal messages, each declared once as a msgspec Struct (as the worker
protocol is, worker/shared/protocol.py): the channel-layer events that its processes send to
the sockets they serve, and the frames of the campaign page's socket, ``/ws/campaigns/<id>/``.

Every message is validated where it arrives. A channel-layer event is a dict whose ``type``
names the handler that Channels calls (``campaign.state`` -> ``campaign_state``); the handler
reads it with :func:`receive_event`, which converts it to its declaration or, if it does not
match (a sender of another version during a rolling deploy), logs it and drops it. A viewer's
frame is decoded with :func:`decode_viewer_frame`; anything but a valid ``watch`` is answered
with an ``error`` frame (code ``bad_frame``) and changes nothing. What the server sends is
built from these declarations and encoded by msgspec (:func:`send_event`, :func:`encode_frame`).

docs/messages.md's reference is generated from the declarations
(``python -m swarm_app.core.messages``; tests/core/test_messages.py checks it).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta, Struct

from worker.shared.protocol import ErrorCode
from worker.shared.schema_docs import definitions_section, schema_entry

log = logging.getLogger(__name__)

MAX_WATCHED = 8  # agents one viewer may watch
MAX_AGENT_CHARS = 80  # an agent's name: "node:<id>" or "control:<id>"
MAX_ERROR_CHARS = 200  # an error frame's message

Name = Annotated[str, Meta(max_length=64)]
Round = Annotated[int, Meta(ge=0)]


class _Message(Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True):
    """Every message: `type` (its tag) and its fields."""


# --- channel-layer events ---------------------------------------------------------------------


class CampaignStateEvent(_Message, tag="campaign.state"):
    """To a campaign's workers' and dashboards' groups: an organizer paused, resumed or stopped
    the campaign, or it completed or failed. A worker's connection passes it on as a
    `campaign_state` message; a dashboard as a `state` frame."""

    state: Annotated[str, Meta(max_length=32, description="the campaign's new state")]
    reason: Annotated[str, Meta(description="why it failed; empty otherwise")] = ""


class DashboardRefresh(_Message, tag="dashboard.refresh"):
    """To a campaign's dashboards: a control started or ended; push the tables soon."""


class MetricsPoint(Struct, forbid_unknown_fields=True, kw_only=True):
    """One stored report of a round: the agent's verified reward."""

    arm: Name
    tier: Name
    agent: Annotated[str, Meta(max_length=MAX_AGENT_CHARS, description='"node:<id>" or "control:<id>"')]
    round: Round
    reward: float


class MetricsPoints(_Message, tag="metrics.points"):
    """To a campaign's dashboards: reports just stored (a batch every 0.25 s at most from each
    ASGI server: campaigns/broadcast.PointBatcher; one per control report)."""

    points: list[MetricsPoint]


class SessionEnd(_Message, tag="session.end"):
    """To the group of a token's or a node's connections: the token was revoked or the node
    banned. Each connection sends the worker an `error` with `code` and closes."""

    code: ErrorCode
    message: str


EVENTS: tuple[type[_Message], ...] = (CampaignStateEvent, DashboardRefresh, MetricsPoints, SessionEnd)

# --- the campaign page's socket: server to viewer ---------------------------------------------


class AggregatePoint(Struct, forbid_unknown_fields=True, kw_only=True):
    """A round's aggregate across an arm's agents (the rollups' RoundAggregate)."""

    tier: Name
    arm: Name
    round: Round
    agents: Annotated[int, Meta(ge=0, description="agents that reported this round")]
    mean: float
    std: float
    completions: Annotated[float | None, Meta(description="mean completions generated per agent")]
    units: Annotated[int, Meta(ge=0, description="the arm's independent units this round")]
    unit_mean: float | None
    unit_std: float | None


class Band(Struct, forbid_unknown_fields=True, kw_only=True):
    """A round's difference swarm - control with its interval (none: low and high null)."""

    tier: Name
    arm: Annotated[str, Meta(max_length=64, description="the control")]
    round: Round
    difference: float
    low: float | None
    high: float | None


class AgentPoint(Struct, forbid_unknown_fields=True, kw_only=True):
    """A watched agent's verified reward of a round."""

    agent: Annotated[str, Meta(max_length=MAX_AGENT_CHARS)]
    round: Round
    reward: float


class PointsFrame(_Message, tag="points"):
    """The rounds that changed since the last push (at most four a second)."""

    points: list[AggregatePoint]
    bands: Annotated[list[Band], Meta(description="the per-round difference bands they change")]
    agents: Annotated[list[AgentPoint], Meta(description="new points of the agents this viewer watches")]
    sent_at: Annotated[float, Meta(description="server time, seconds since the epoch")]


Object = dict[str, Any]


class TablesFrame(_Message, tag="tables"):
    """The page's tables (web/dashboard.tables; docs/web.md, "The dashboard"): at most every
    3 s when something changed, at least every 15 s."""

    campaign: Object
    arms: list[Any]
    reference: Any
    settled: Object
    pace: Object
    mechanism_keys: list[Object]
    summary: Any
    held_out: Any
    mechanism: Any
    pool: Any
    workers: list[Object]
    worker_counts: Object
    worker_status_counts: Object
    controls: list[Object]


class StateFrame(_Message, tag="state"):
    """The campaign's state changed (sent at once)."""

    state: Annotated[str, Meta(max_length=32)]
    reason: Annotated[str, Meta(description="why it failed; empty otherwise")]


class ErrorFrame(_Message, tag="error"):
    """The answer to a frame that is not a valid `watch`; nothing changed."""

    code: Literal["bad_frame"]
    message: Annotated[str, Meta(max_length=MAX_ERROR_CHARS)]


SERVER_FRAMES: tuple[type[_Message], ...] = (PointsFrame, TablesFrame, StateFrame, ErrorFrame)

# --- the campaign page's socket: viewer to server ---------------------------------------------


class Watch(Struct, forbid_unknown_fields=True, kw_only=True):
    """The viewer's selection of agents whose raw points the socket forwards (the only frame a
    viewer sends; not answered). `type` is required, so it is a field rather than a tag."""

    type: Literal["watch"]
    agents: Annotated[
        list[Annotated[str, Meta(max_length=MAX_AGENT_CHARS)]],
        Meta(max_length=MAX_WATCHED, description="agent names, as the page's picker lists them"),
    ] = []


VIEWER_FRAMES: tuple[type[Struct], ...] = (Watch,)

_WATCH = msgspec.json.Decoder(Watch)
_ENCODER = msgspec.json.Encoder()
E = TypeVar("E", bound=_Message)


def send_event(event: _Message) -> dict[str, Any]:
    """``event`` as the dict a channel layer carries (``group_send``'s message)."""
    return msgspec.to_builtins(event)


def receive_event(raw: dict[str, Any], declaration: type[E]) -> E | None:
    """A channel-layer event as its declaration; None (and a logged warning) if it does not match."""
    try:
        return msgspec.convert(raw, declaration)
    except msgspec.ValidationError as error:
        log.warning("dropped a malformed %s event: %s", raw.get("type"), error)
        return None


def decode_viewer_frame(raw: str | bytes) -> Watch:
    """A viewer's frame; raises msgspec.DecodeError (ValidationError is one) if it is not a
    valid `watch`."""
    return _WATCH.decode(raw)


def encode_frame(frame: _Message) -> str:
    """A frame for the campaign page's socket, as JSON text."""
    return _ENCODER.encode(frame).decode()


def bad_frame(error: Exception) -> str:
    """The ``error`` frame answering a viewer's frame that is not a valid `watch`."""
    return encode_frame(ErrorFrame(code="bad_frame", message=str(error)[:MAX_ERROR_CHARS]))


def render_docs() -> str:
    """The reference section of docs/messages.md, from the declarations' JSON Schema."""
    groups = (
        ("Channel-layer events", EVENTS),
        ("Campaign page socket: server to viewer", SERVER_FRAMES),
        ("Campaign page socket: viewer to server", VIEWER_FRAMES),
    )
    declared = [cls for _, classes in groups for cls in classes]
    refs, definitions = msgspec.json.schema_components(declared, ref_template="#/$defs/{name}")
    schemas = {}
    for cls, ref in zip(declared, refs, strict=True):
        schemas[cls] = definitions.pop(ref["$ref"].rsplit("/", 1)[1])
    lines = [
        "## Message reference",
        "",
        "Generated by `python -m swarm_app.core.messages` from the declarations in",
        "`swarm_app/core/messages.py` (msgspec Structs; this is their JSON Schema). A `$ref` such",
        "as `#/$defs/MetricsPoint` points into the definitions that follow the messages.",
        "",
    ]
    for title, classes in groups:
        lines += [f"### {title}", ""]
        for cls in classes:
            lines += schema_entry(cls.__struct_config__.tag or "watch", schemas[cls])
    lines += definitions_section(definitions)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_docs())
