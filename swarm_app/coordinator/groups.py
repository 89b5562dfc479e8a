"""The channel groups of worker connections, and ending a group's sessions from anywhere (a
view, the admin, a submission in a database thread) on whichever ASGI server holds them."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from swarm_app.core.messages import SessionEnd, send_event
from worker.shared.protocol import ErrorCode

log = logging.getLogger(__name__)


def token_group(token_pk: int) -> str:
    """The channel group of every live connection that said hello with this token."""
    return f"worker-token-{token_pk}"


def node_group(node_pk: int) -> str:
    """The channel group of every live connection of this node."""
    return f"worker-node-{node_pk}"


def end_sessions(group: str, code: ErrorCode, message: str) -> None:
    """Close the group's connections, on whichever ASGI server holds them (through the channel
    layer): each gets an ``error`` with ``code`` and the socket closes with its documented code.

    Best effort, after the database says so: with the channel layer down the connections stay
    open, but the database holds the same rule: a banned node's lease requests and submissions
    and a revoked token's lease requests are refused (leases.py, submissions.py)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, send_event(SessionEnd(code=code, message=message)))
    except Exception as error:
        log.warning("could not end the sessions of %s (channel layer unavailable: %s)", group, error)
