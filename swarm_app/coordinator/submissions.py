"""Rollout submissions: re-scored, checked against the lease, stored once.

Order of checks, cheapest first, and what each costs the worker:

1. the lease exists, is this node's, and this submission id was not already accepted
   (a replay gets ``duplicate_submission`` with the original ack in ``data``: nothing stored);
2. the lease is still active and within its deadline (``lease_expired``);
3. the rollouts answer exactly the leased questions, one group of G each (``lease_mismatch``);
4. question and ground truth equal the coordinator's own record (``ground_truth_mismatch``)
   and every claimed reward equals the verifier's (``reward_mismatch``).

Failures of 4 count against the node; at the campaign's ``ban_threshold`` the node is banned and
its rollouts leave the pool. Nothing else changes on any failure. On success the rollouts enter
the pool with the coordinator's rewards and advantages, in one transaction with the lease.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
from worker.advantages import group_advantages
from worker.protocol import ErrorCode, ProtocolError
from worker.rewards import RewardConfig, rewards
from worker.rollout import Rollout
from worker.tasks import QuestionRef, question

REWARD_TOLERANCE = 1e-6


def _normalised(value: Any) -> Any:
    """JSON round trip: tuples in reasoning-gym metadata arrive as lists."""
    return json.loads(json.dumps(value))


def _duplicate(lease: Lease) -> ProtocolError:
    error = ProtocolError(
        ErrorCode.DUPLICATE_SUBMISSION, f"submission {lease.submission_id} was already accepted"
    )
    error.data = lease.ack
    return error


def _reject(node: WorkerNode, campaign: Campaign, code: ErrorCode, message: str) -> ProtocolError:
    """Count a false submission against the node; ban it at the threshold."""
    with transaction.atomic():
        WorkerNode.objects.filter(pk=node.pk).update(rejected_submissions=F("rejected_submissions") + 1)
        rejected = WorkerNode.objects.values_list("rejected_submissions", flat=True).get(pk=node.pk)
        threshold = campaign.settings.ban_threshold
        if rejected >= threshold:
            WorkerNode.objects.filter(pk=node.pk).update(state=WorkerNode.State.BANNED, connected=False)
            PoolRollout.objects.filter(node=node).update(in_pool=False)
            message += (
                f"; {rejected} rejected submissions reached the limit of {threshold}: this node is banned"
            )
        else:
            message += f" ({rejected} of {threshold} rejected submissions allowed before a ban)"
    return ProtocolError(code, message)


def submit(node: WorkerNode, submission_id: str, lease_id: str, rollouts: list[Rollout]) -> dict[str, Any]:
    if not submission_id:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "field 'submission_id': must not be empty")
    lease = Lease.objects.select_related("campaign").filter(lease_id=lease_id).first()
    if lease is None:
        raise ProtocolError(ErrorCode.UNKNOWN_LEASE, f"no lease {lease_id}")
    if lease.node_id != node.pk:
        raise ProtocolError(ErrorCode.LEASE_NOT_YOURS, "this lease was issued to another node")
    if node.state == WorkerNode.State.BANNED:
        raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
    previous = Lease.objects.filter(node=node, submission_id=submission_id).first()
    if previous is not None:
        raise _duplicate(previous)
    if lease.state == Lease.State.SUBMITTED:
        raise ProtocolError(
            ErrorCode.DUPLICATE_SUBMISSION, f"lease {lease_id} was already submitted as {lease.submission_id}"
        )
    if lease.state != Lease.State.ACTIVE or lease.deadline < timezone.now():
        raise ProtocolError(
            ErrorCode.LEASE_EXPIRED,
            f"lease {lease_id} expired at {lease.deadline:%H:%M:%S} UTC; its questions were given to other workers",
        )

    campaign = lease.campaign
    config = campaign.settings
    refs = [QuestionRef.from_json(r) for r in lease.questions]
    if [r.ref for r in rollouts] != refs:
        raise ProtocolError(
            ErrorCode.LEASE_MISMATCH, "rollouts must answer the leased questions, in lease order"
        )
    for i, rollout in enumerate(rollouts):
        if rollout.group_size != config.group_size:
            raise ProtocolError(
                ErrorCode.LEASE_MISMATCH,
                f"rollouts[{i}]: {rollout.group_size} completions, campaign G is {config.group_size}",
            )
        if (rollout.agent_id, rollout.tier, rollout.round) != (node.node_id, node.tier, lease.round):
            raise ProtocolError(
                ErrorCode.LEASE_MISMATCH, f"rollouts[{i}]: agent, tier and round must be this node's lease's"
            )

    mix = config.mix
    reward_config = RewardConfig(config.format_weight)
    verified_rewards: list[list[float]] = []
    for i, rollout in enumerate(rollouts):
        record = question(mix, rollout.ref)
        if (
            rollout.question != record.question
            or rollout.answer != record.answer
            or _normalised(rollout.metadata) != _normalised(record.metadata)
        ):
            raise _reject(
                node,
                campaign,
                ErrorCode.GROUND_TRUTH_MISMATCH,
                f"rollouts[{i}]: question or answer differs from the record",
            )
        verified = rewards(mix, rollout.ref, rollout.completions, reward_config)
        for g, (claimed, true) in enumerate(zip(rollout.rewards, verified, strict=True)):
            if abs(claimed - true) > REWARD_TOLERANCE:
                raise _reject(
                    node,
                    campaign,
                    ErrorCode.REWARD_MISMATCH,
                    f"rollouts[{i}].rewards[{g}]: claimed {claimed}, the verifier gives {true}",
                )
        verified_rewards.append(verified)

    scale = config.grpo_config(node.tier).scale_rewards
    ack = {
        "submission_id": submission_id,
        "lease_id": lease_id,
        "verified_rewards": verified_rewards,
        "rollout_ids": [r.rollout_id for r in rollouts],
    }
    try:
        with transaction.atomic():
            # Lock the lease and re-check: another connection of this node may have raced us.
            locked = Lease.objects.select_for_update().get(pk=lease.pk)
            if locked.state != Lease.State.ACTIVE:
                if locked.state == Lease.State.SUBMITTED:
                    raise _duplicate(locked)
                raise ProtocolError(ErrorCode.LEASE_EXPIRED, f"lease {lease_id} is {locked.state}")
            Campaign.objects.filter(pk=campaign.pk).update(
                rollout_sequence=F("rollout_sequence") + len(rollouts)
            )
            last = Campaign.objects.values_list("rollout_sequence", flat=True).get(pk=campaign.pk)
            stored = []
            for offset, (rollout, verified) in enumerate(zip(rollouts, verified_rewards, strict=True)):
                rollout.rewards = verified
                rollout.advantages = group_advantages(verified, scale)
                stored.append(
                    PoolRollout(
                        campaign=campaign,
                        sequence=last - len(rollouts) + 1 + offset,
                        rollout_id=rollout.rollout_id,
                        node=node,
                        lease=lease,
                        tier=node.tier,
                        round=lease.round,
                        task=rollout.ref.task,
                        question_seed=rollout.ref.seed,
                        question_index=rollout.ref.index,
                        record=rollout.to_json(),
                        mean_reward=rollout.mean_reward,
                        zero_advantage=rollout.zero_advantage,
                    )
                )
            PoolRollout.objects.bulk_create(stored)
            locked.state = Lease.State.SUBMITTED
            locked.submission_id = submission_id
            locked.ack = ack
            locked.save(update_fields=["state", "submission_id", "ack"])
            WorkerNode.objects.filter(pk=node.pk).update(accepted_submissions=F("accepted_submissions") + 1)
    except IntegrityError:
        # A rollout id reused from an earlier submission: refuse rather than overwrite the pool.
        raise ProtocolError(
            ErrorCode.LEASE_MISMATCH, "a rollout_id in this submission was already used"
        ) from None
    return ack
