"""The volunteer client's errors, and what each of the coordinator's error codes means to it.

**Only fatal errors stop the worker**: a bad or revoked token, a banned node, no common
protocol version (the coordinator closes the socket after those), a hello the coordinator can
never accept (no tier fits this machine), and submissions it rejected as false (stopping
before a ban). Everything else is retried or, for optional requests (external samples,
metrics), logged and skipped. The code sets below are that policy; the websocket session
(worker/client/connection.py) and the transport (worker/client/transport.py) apply it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from worker.shared import protocol
from worker.shared.protocol import ErrorCode

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
# Websocket close codes the coordinator uses for a refusal, and the error each one means.
CLOSE_CODES_FATAL = {4001: ErrorCode.INVALID_TOKEN, 4003: ErrorCode.BANNED}


RUN_THE_JOIN_COMMAND_AGAIN = (
    "run the join command from the campaign's page again: it installs the coordinator's own worker"
)
# What a volunteer can do about each refusal (`swarm-worker join` prints it under the error).
WHAT_TO_DO = {
    ErrorCode.INVALID_TOKEN: "copy the token again from the page that showed it, or make a new one "
    "on My tokens (/me/) or ask the organizer for one",
    ErrorCode.TOKEN_REVOKED: "make a new token on My tokens (/me/), or ask the organizer for one",
    ErrorCode.UNSUPPORTED_VERSION: f"this worker speaks another protocol version: {RUN_THE_JOIN_COMMAND_AGAIN}",
    "unsupported_campaign": f"this worker is older than the campaign: {RUN_THE_JOIN_COMMAND_AGAIN}",
    ErrorCode.BANNED: "this node's submissions failed verification; ask the organizer",
    "invalid_url": "give the coordinator's address as its pages show it, e.g. https://swarm.example.org/",
}


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

    @property
    def what_to_do(self) -> str:
        """What the volunteer can do about it (empty where nothing is known to help)."""
        return WHAT_TO_DO.get(self.code, "")


class SubmissionRejected(FatalError):
    """The coordinator judged a submission false or malformed; continuing would risk a ban."""


class CampaignFinished(ClientError):
    """The campaign (or this node's share of it) is over: stop cleanly."""


class LeaseLost(ClientError):
    """This round's lease can no longer be submitted (expired, released, unknown): redo the round."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = str(code)


class RoundSubmitted(ClientError):
    """This node already submitted the round (the process died after its submit_ack): the pool
    holds its rollouts, so the round is reported and the node goes on to the next one."""

    def __init__(self, round: int, ack: dict[str, Any] | None) -> None:
        super().__init__(f"round {round} was already submitted by this node")
        self.round = round
        self.ack = ack or {}


class RequestError(ClientError):
    """The coordinator answered a request with an error that retrying will not fix."""

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = str(code)
        self.message = message
        self.data = data


class TransportClosed(ClientError):
    """The transport was closed (or never started)."""


def error_parts(message: protocol.Error) -> tuple[str, str, dict[str, Any] | None]:
    """(code, message, data) of an ``error`` message."""
    return message.code, message.message, None if message.data is msgspec.UNSET else message.data
