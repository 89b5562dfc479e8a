"""Leases: the coordinator picks each node's questions and records them.

Questions come from the campaign's stream (worker/tasks.py) at positions the coordinator
allocates, so it knows every ground truth and no worker can pick easy questions. A lease has a
deadline; a lease that expires or is released goes back in line and its questions are issued
again, whole, to the next node that asks (``reissue_of`` links the two). A late submission for
an expired lease is refused (``lease_expired``), so no question is ever counted twice.

"Goes back in line" means: state expired or released, or still active but past its deadline.
The last kind is reissued as it is found, so a lease request need not first mark every overdue
lease expired (a write on every request); the liveness beat does that in bulk (expire_overdue),
and a submission checks the deadline itself. The common request (nothing held, nothing waiting)
costs one read (the campaign, with whether this node holds a lease for the round and whether
any lease waits) and one transaction of two statements (allocate positions, insert the lease).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import Lease, WorkerNode
from swarm_app.coordinator.sql import bump
from worker.protocol import ErrorCode, ProtocolError
from worker.tasks import QuestionRef, question, ref_at


def expire_overdue(campaign_id: int | None = None) -> int:
    """Mark active leases past their deadline as expired; returns how many."""
    leases = Lease.objects.filter(state=Lease.State.ACTIVE, deadline__lt=timezone.now())
    if campaign_id is not None:
        leases = leases.filter(campaign_id=campaign_id)
    return leases.update(state=Lease.State.EXPIRED)


def questions_payload(campaign: Campaign, refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    mix = campaign.settings.mix
    payload = []
    for ref_json in refs:
        q = question(mix, QuestionRef.from_json(ref_json))
        payload.append({"ref": ref_json, "question": q.question, "answer": q.answer, "metadata": q.metadata})
    return payload


def lease_payload(lease: Lease) -> dict[str, Any]:
    return {
        "lease_id": lease.lease_id,
        "round": lease.round,
        "deadline": lease.deadline.timestamp(),
        "questions": questions_payload(lease.campaign, lease.questions),
    }


def issue_lease(node: WorkerNode, round: int) -> Lease:
    """This node's lease for ``round``: the one it already holds, a reissued one, or a new one."""
    now = timezone.now()
    waiting_leases = Q(state__in=[Lease.State.EXPIRED, Lease.State.RELEASED]) | Q(
        state=Lease.State.ACTIVE, deadline__lt=now
    )
    held_leases = Lease.objects.filter(node=node, round=round, state=Lease.State.ACTIVE, deadline__gte=now)
    campaign = Campaign.objects.annotate(
        held_pk=Subquery(held_leases.values("pk")[:1]),
        any_waiting=Exists(Lease.objects.filter(waiting_leases, campaign_id=OuterRef("pk"))),
    ).get(pk=node.campaign_id)
    if node.state == WorkerNode.State.BANNED:
        raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
    if campaign.state != Campaign.State.RUNNING:
        raise ProtocolError(ErrorCode.CAMPAIGN_NOT_RUNNING, f"campaign {campaign.name!r} is {campaign.state}")
    config = campaign.settings
    if round >= config.rounds:
        raise ProtocolError(
            ErrorCode.CAMPAIGN_NOT_RUNNING,
            f"this campaign runs {config.rounds} rounds per node; round {round} is past it",
        )
    if campaign.held_pk is not None:  # a reconnecting worker asks again: same lease, same questions
        held = Lease.objects.filter(pk=campaign.held_pk).first()
        if held is not None:
            held.campaign = campaign
            return held
    deadline = now + timedelta(seconds=config.lease_seconds)
    with transaction.atomic():
        waiting = None
        if campaign.any_waiting:
            # Lock the oldest one; SKIP LOCKED: another server reissuing or a late submission
            # claiming a lease holds its row, and must not be waited for.
            waiting = (
                Lease.objects.select_for_update(skip_locked=True)
                .filter(waiting_leases, campaign=campaign)
                .order_by("issued_at")
                .first()
            )
        if waiting is not None:
            waiting.state = Lease.State.REISSUED
            waiting.save(update_fields=["state"])
            refs = waiting.questions
        else:
            count = config.questions_per_round
            end = bump(Campaign, campaign.pk, "next_question_position", count)
            refs = [
                ref_at(config.mix, config.seed, position).to_json() for position in range(end - count, end)
            ]
        return Lease.objects.create(
            lease_id=uuid.uuid4().hex,
            campaign=campaign,
            node=node,
            round=round,
            questions=refs,
            deadline=deadline,
            reissue_of=waiting,
        )


def release(node: WorkerNode, lease_id: str) -> None:
    lease = Lease.objects.filter(lease_id=lease_id).first()
    if lease is None:
        raise ProtocolError(ErrorCode.UNKNOWN_LEASE, f"no lease {lease_id}")
    if lease.node_id != node.pk:
        raise ProtocolError(ErrorCode.LEASE_NOT_YOURS, "this lease was issued to another node")
    Lease.objects.filter(pk=lease.pk, state=Lease.State.ACTIVE).update(state=Lease.State.RELEASED)
