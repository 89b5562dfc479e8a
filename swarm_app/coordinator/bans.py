"""Bans: a node that submitted ``ban_threshold`` false rewards leaves the campaign, and with it,
as its token's ``ban_scope`` says, the token (WorkerToken.BanScope).

    scope "token": the token is banned: every node registered with it is banned, their rollouts
                   leave the pool, their live sessions end (error ``banned``, close 4003), and
                   the token's next hello with any node id is refused with ``banned``.
    scope "node":  only the lying node (a token shared by several volunteers).

Both happen in the caller's transaction; the session pushes go out after it commits (through the
channel layer, on whichever ASGI server holds the sessions). Without the push the database still
refuses: the lease and submission reads count a node of a banned token as banned (sql.py).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from swarm_app.coordinator.groups import end_sessions, node_group, token_group
from swarm_app.coordinator.models import PoolRollout, WorkerNode, WorkerToken
from worker.shared.protocol import ErrorCode


def ban_node(node: WorkerNode, reason: str) -> str:
    """Ban ``node`` (and its token, by the token's scope); returns what the worker is told."""
    token = WorkerToken.objects.select_for_update().get(pk=node.token_id)
    if token.ban_scope == WorkerToken.BanScope.TOKEN:
        if token.banned_at is None:
            token.banned_at = timezone.now()
            token.ban_reason = f"node {node.node_id}: {reason}"[:200]
            token.save(update_fields=["banned_at", "ban_reason"])
        nodes = WorkerNode.objects.filter(token=token)
        group, told = token_group(token.pk), f"token {token.prefix}… was banned: node {node.node_id} {reason}"
    else:
        nodes = WorkerNode.objects.filter(pk=node.pk)
        group, told = node_group(node.pk), f"node {node.node_id} was banned: {reason}"
    nodes.update(state=WorkerNode.State.BANNED, connected=False)
    PoolRollout.objects.filter(node__in=nodes).update(in_pool=False)
    transaction.on_commit(lambda: end_sessions(group, ErrorCode.BANNED, told))
    return told
