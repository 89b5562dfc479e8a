"""Hello: authenticate a worker, negotiate the protocol version, assign a tier, resume a node."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.assignment import assign_tier
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import authenticate
from worker.shared.protocol import MAX_MESSAGE_BYTES, SUPPORTED_VERSIONS, ErrorCode, ProtocolError
from worker.shared.tiers import TIERS

HEARTBEAT_SECONDS = 10.0


def negotiate(versions: list[int]) -> int:
    common = set(versions) & set(SUPPORTED_VERSIONS)
    if not common:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"this coordinator speaks protocol versions {list(SUPPORTED_VERSIONS)}, the worker {versions}; "
            "upgrade the worker (pip install -U swarm-sapo)",
        )
    return max(common)


def campaign_payload(campaign: Campaign) -> dict[str, Any]:
    return {"id": campaign.pk, "name": campaign.name, "state": campaign.state, "config": campaign.config}


def hello(fields: dict[str, Any], limits: dict[str, Any]) -> tuple[WorkerNode, dict[str, Any]]:
    """Register or resume the node; returns it with the welcome message's fields."""
    version = negotiate(fields["protocol_versions"])
    token = authenticate(fields["token"])
    campaign = token.campaign
    if campaign.is_finished:
        raise ProtocolError(ErrorCode.CAMPAIGN_NOT_RUNNING, f"campaign {campaign.name!r} is {campaign.state}")
    node_id = fields["node_id"]
    if not node_id or not all(c.isalnum() or c in "-_" for c in node_id):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "field 'node_id': letters, digits, '-' and '_' only")
    hardware = fields["hardware"]
    with transaction.atomic():
        node = WorkerNode.objects.select_for_update().filter(campaign=campaign, node_id=node_id).first()
        if node is not None:
            if node.token_id != token.pk:
                raise ProtocolError(ErrorCode.INVALID_TOKEN, "this node id is registered with another token")
            if node.state == WorkerNode.State.BANNED:
                raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
            tier, reason = node.tier, "resumed with the tier it was assigned"
        else:
            tier, reason = assign_tier(campaign.settings.tiers, hardware, fields.get("preferred_tier"))
            node = WorkerNode(campaign=campaign, node_id=node_id, token=token, tier=tier)
        node.hardware = hardware
        node.backend = ",".join(fields["backends"])
        node.client_version = fields["client_version"]
        node.generation_tokens_per_second = fields["generation_tokens_per_second"]
        node.connected = True
        node.state = WorkerNode.State.HEALTHY
        node.last_seen = timezone.now()
        node.save()
    welcome = {
        "protocol_version": version,
        "node_id": node.node_id,
        "campaign": campaign_payload(campaign),
        "tier": tier,
        "model": TIERS[tier].to_json(),
        "resume_round": node.round,
        "heartbeat_seconds": HEARTBEAT_SECONDS,
        "limits": {"max_message_bytes": MAX_MESSAGE_BYTES, **limits},
        "reason": reason,
    }
    return node, welcome


def heartbeat(node: WorkerNode) -> str:
    WorkerNode.objects.filter(pk=node.pk).update(
        last_seen=timezone.now(), connected=True, state=WorkerNode.State.HEALTHY
    )
    node.refresh_from_db(fields=["state", "campaign"])
    return Campaign.objects.values_list("state", flat=True).get(pk=node.campaign_id)


def disconnected(node: WorkerNode) -> None:
    WorkerNode.objects.filter(pk=node.pk).update(connected=False, last_seen=timezone.now())
