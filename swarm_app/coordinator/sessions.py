"""Hello: authenticate a worker, negotiate the protocol version, assign a tier, resume a node."""

from __future__ import annotations

import uuid

import msgspec
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from swarm_app.campaigns.models import Arm, Campaign, settings_from_text
from swarm_app.coordinator.assignment import assign_replicate, assign_tier
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import authenticate
from worker.shared.campaign import CampaignConfig
from worker.shared.protocol import (
    SUPPORTED_VERSIONS,
    CampaignInfo,
    ControlInfo,
    ErrorCode,
    Hello,
    Limits,
    ProtocolError,
    Welcome,
)
from worker.shared.tiers import TIERS

HEARTBEAT_SECONDS = 10.0


def negotiate(versions: list[int]) -> int:
    common = set(versions) & set(SUPPORTED_VERSIONS)
    if not common:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"this coordinator speaks protocol versions {list(SUPPORTED_VERSIONS)}, the worker {versions}; "
            "upgrade the worker (pip install -U 'swarm-sapo[worker]')",
        )
    return max(common)


def campaign_settings(campaign: Campaign) -> CampaignConfig:
    """The campaign's parsed settings, shared (settings_from_text: parsed once per distinct
    config; not to be modified). A hello parsed them twice, about 6% of daphne's CPU while 5,000
    volunteers connected (py-spy, docs/coordinator-bench.md)."""
    return settings_from_text(msgspec.json.encode(campaign.config).decode())


def campaign_info(campaign: Campaign, config: CampaignConfig | None = None) -> CampaignInfo:
    config = config or campaign_settings(campaign)
    return CampaignInfo(id=campaign.pk, name=campaign.name, state=campaign.state, config=config)


def new_node_replicate(campaign: Campaign, tier: str, replicates: int) -> int:
    """The swarm a node new to the campaign joins (assignment.assign_replicate). With several,
    the campaign's row is locked until the caller's transaction ends, so that concurrent first
    hellos count each other and fill the swarms evenly; one swarm needs neither lock nor count."""
    if replicates <= 1:
        return 0
    Campaign.objects.select_for_update().filter(pk=campaign.pk).values_list("pk").first()
    nodes = WorkerNode.objects.filter(campaign=campaign, tier=tier, arm=Arm.SWARM)
    connected = dict(
        nodes.filter(connected=True).values("replicate").annotate(n=Count("id")).values_list("replicate", "n")
    )
    joined = dict(nodes.values("replicate").annotate(n=Count("id")).values_list("replicate", "n"))
    return assign_replicate(replicates, connected, joined)


def hello(message: Hello, limits: Limits) -> tuple[WorkerNode, Welcome]:
    """Register or resume the node; returns it with its welcome."""
    version = negotiate(message.protocol_versions)
    token = authenticate(message.token)
    campaign = token.campaign
    if campaign.is_finished:
        raise ProtocolError(ErrorCode.CAMPAIGN_NOT_RUNNING, f"campaign {campaign.name!r} is {campaign.state}")
    node_id = message.node_id
    if not node_id or not all(c.isalnum() or c in "-_" for c in node_id):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "field 'node_id': letters, digits, '-' and '_' only")
    config = campaign_settings(campaign)
    session = {
        "hardware": message.hardware,
        "backend": ",".join(message.backends),
        "client_version": message.client_version,
        "generation_tokens_per_second": message.generation_tokens_per_second,
        "connected": True,
        "connection_id": uuid.uuid4().hex,
        "state": WorkerNode.State.HEALTHY,
        "last_seen": timezone.now(),
    }
    run = token.control_run
    with transaction.atomic():
        node = WorkerNode.objects.select_for_update().filter(campaign=campaign, node_id=node_id).first()
        created = False
        if run is not None:
            other = WorkerNode.objects.filter(control_run=run).exclude(node_id=node_id).first()
            if other is not None:
                raise ProtocolError(
                    ErrorCode.INVALID_TOKEN, f"this control's node is {other.node_id}, not {node_id}"
                )
        if node is None:
            if run is not None:  # a campaign's control: its tier and arm are the control run's
                tier, reason = run.tier, f"the {run.arm} control of {run.tier}, seed {run.seed}"
                fields = {"token": token, "tier": tier, "arm": run.arm, "control_run": run}
            else:
                tier, reason = assign_tier(config.tiers, message.hardware, message.preferred_tier or None)
                replicate = new_node_replicate(campaign, tier, config.replicates)
                fields = {"token": token, "tier": tier, "replicate": replicate}
            # Insert-or-lock: concurrent first hellos of one node id all land here; the unique
            # (campaign, node_id) index lets one insert win, and the others lock and resume its
            # row (the insert in a savepoint, so that its IntegrityError leaves the rest intact).
            try:
                with transaction.atomic():
                    node = WorkerNode.objects.create(campaign=campaign, node_id=node_id, **fields, **session)
                created = True
            except IntegrityError:
                node = WorkerNode.objects.select_for_update().get(campaign=campaign, node_id=node_id)
        if not created:
            if node.token_id != token.pk:
                raise ProtocolError(ErrorCode.INVALID_TOKEN, "this node id is registered with another token")
            if node.state == WorkerNode.State.BANNED:
                raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
            tier, reason = node.tier, "resumed with the tier it was assigned"
            for name, value in session.items():
                setattr(node, name, value)
            node.save(update_fields=list(session))
    welcome = Welcome(
        protocol_version=version,
        node_id=node.node_id,
        campaign=campaign_info(campaign, config),
        tier=tier,
        model=TIERS[tier],
        resume_round=node.round,
        heartbeat_seconds=HEARTBEAT_SECONDS,
        limits=limits,
        reason=reason,
    )
    if node.control_run is not None:
        welcome.control = ControlInfo(arm=node.arm, seed=node.control_run.seed)
    return node, welcome


def disconnected(node: WorkerNode) -> None:
    """``node``'s connection closed: the node is disconnected unless another connection (on any
    server) has said hello since; ``node`` is the instance this connection's hello returned."""
    WorkerNode.objects.filter(pk=node.pk, connection_id=node.connection_id).update(
        connected=False, last_seen=timezone.now()
    )
