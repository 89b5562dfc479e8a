"""The storage interface through Django's ORM: the embedded mode's (SQLite), and the reference
the PostgreSQL statements are checked against. Each operation is a few ORM statements in one
transaction where the PostgreSQL one is a single statement."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Avg, Exists, F, OuterRef, Q, Subquery

from swarm_app.campaigns.models import Arm, Campaign, RoundMetrics
from swarm_app.coordinator.models import Lease, NodeCredit, PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.sql import bump
from swarm_app.coordinator.storage.records import (
    NO_DRAW,
    WAITING,
    DrawView,
    FirstChunk,
    LeaseOffer,
    LeaseRequestView,
    LeaseView,
    StoredSubmission,
    pool_record,
)
from worker.shared.rollout import Rollout


class OrmStore:
    name = "orm"

    def lease_view(self, node: WorkerNode, round: int, now: datetime) -> LeaseRequestView:
        held_leases = Lease.objects.filter(
            node=node, round=round, state=Lease.State.ACTIVE, deadline__gte=now
        )
        campaign = Campaign.objects.annotate(
            held_pk=Subquery(held_leases.values("pk")[:1]),
            any_waiting=Exists(Lease.objects.filter(WAITING, campaign_id=OuterRef("pk"))),
            node_state=Subquery(WorkerNode.objects.filter(pk=node.pk).values("state")[:1]),
            token_banned=Exists(WorkerToken.objects.filter(pk=node.token_id, banned_at__isnull=False)),
            token_revoked=Exists(WorkerToken.objects.filter(pk=node.token_id, revoked_at__isnull=False)),
        ).get(pk=node.campaign_id)
        held_lease = Lease.objects.filter(pk=campaign.held_pk).first() if campaign.held_pk else None
        held = (held_lease.lease_id, held_lease.deadline, held_lease.questions) if held_lease else None
        done = (
            Lease.objects.filter(node=node, round=round, state=Lease.State.SUBMITTED).order_by("pk").first()
        )
        return LeaseRequestView(
            now,
            campaign.name,
            campaign.state,
            campaign.created_at,
            campaign.settings,
            WorkerNode.State.BANNED if campaign.token_banned else campaign.node_state,
            campaign.token_revoked,
            held,
            done.ack if done is not None else None,
            campaign.any_waiting,
        )

    def insert_lease(
        self,
        node: WorkerNode,
        round: int,
        lease_id: str,
        refs: list[dict[str, Any]],
        now: datetime,
        deadline: datetime,
    ) -> None:
        Lease.objects.create(
            lease_id=lease_id,
            campaign_id=node.campaign_id,
            node=node,
            round=round,
            questions=refs,
            deadline=deadline,  # issued_at: the insert's time (auto_now_add), as now
        )

    def find_leases(self, node: WorkerNode, submission_id: str, lease_id: str) -> list[LeaseView]:
        found = Lease.objects.select_related("campaign").filter(
            Q(lease_id=lease_id) | Q(node_id=node.pk, submission_id=submission_id)
        )[:2]
        state, token_banned = WorkerNode.objects.values_list("state", "token__banned_at").get(pk=node.pk)
        if token_banned is not None:  # as sql._NODE_STATE
            state = WorkerNode.State.BANNED
        return [
            LeaseView(
                row.pk,
                row.lease_id,
                row.node_id,
                row.state,
                row.deadline,
                row.round,
                row.questions,
                row.submission_id,
                row.ack,
                row.campaign.settings,
                state,
            )
            for row in found
        ]

    def store_submission(
        self,
        node: WorkerNode,
        lease_id: str,
        round: int,
        submission_id: str,
        ack: dict[str, Any],
        rollouts: list[Rollout],
        allowance: int,
        now: datetime,
        draw: FirstChunk = NO_DRAW,
    ) -> StoredSubmission | None:
        with transaction.atomic():
            # The pool's last number before this submission's rollouts: the first chunk's offsets
            # are below it (as the PostgreSQL statement's snapshot reads it).
            before = Campaign.objects.values_list("rollout_sequence", flat=True).get(pk=node.campaign_id)
            # Claim the lease only where the submission's first checks pass (Store's docstring):
            # the UPDATE locks the row, so of two racing connections of this node exactly one
            # claims it; the other sees 0 rows.
            used = Lease.objects.filter(node_id=node.pk, submission_id=submission_id).exclude(
                submission_id=""
            )
            banned = WorkerNode.objects.filter(pk=node.pk).filter(
                Q(state=WorkerNode.State.BANNED) | Q(token__banned_at__isnull=False)
            )
            lease = Lease.objects.filter(
                lease_id=lease_id, node_id=node.pk, round=round, state=Lease.State.ACTIVE, deadline__gte=now
            )
            if (
                used.exists()
                or banned.exists()
                or not lease.update(state=Lease.State.SUBMITTED, submission_id=submission_id, ack=ack)
            ):
                return None
            lease_pk = Lease.objects.values_list("pk", flat=True).get(lease_id=lease_id)
            # The node's round and verified groups, and its next draw's allowance; a banned node's
            # counters stay as they were (its submissions are refused before this anyway).
            counted = (
                WorkerNode.objects.filter(pk=node.pk)
                .exclude(state=WorkerNode.State.BANNED)
                .update(
                    accepted_submissions=F("accepted_submissions") + 1,
                    accepted_rollouts=F("accepted_rollouts") + len(rollouts),
                    draw_allowance=allowance,
                )
            )
            if counted:  # its credit row (NodeCredit), made once
                NodeCredit.objects.get_or_create(node_id=node.pk)
            last = bump(Campaign, node.campaign_id, "rollout_sequence", len(rollouts))
            PoolRollout.objects.bulk_create(
                [
                    PoolRollout(
                        campaign_id=node.campaign_id,
                        sequence=last - len(rollouts) + 1 + offset,
                        rollout_id=rollout.rollout_id,
                        node_id=node.pk,
                        lease_id=lease_pk,
                        tier=node.tier,
                        replicate=node.replicate,
                        round=round,
                        task=rollout.ref.task,
                        question_seed=rollout.ref.seed,
                        question_index=rollout.ref.index,
                        record=pool_record(rollout),
                        mean_reward=rollout.mean_reward,
                        zero_advantage=rollout.zero_advantage,
                    )
                    for offset, rollout in enumerate(rollouts)
                ]
            )
            numbers = [before - offset for offset in draw.offsets if offset < before]
            drawn = (
                _draw(
                    node.campaign_id,
                    node.pk,
                    node.replicate,
                    draw.tier,
                    draw.nonzero_only,
                    numbers,
                    draw.count,
                )
                if counted and numbers
                else []
            )
        return StoredSubmission(last, before, drawn)

    def draw_view(self, campaign_id: int, node_pk: int) -> DrawView:
        campaign = Campaign.objects.only("config", "rollout_sequence").get(pk=campaign_id)
        tier, replicate = WorkerNode.objects.values_list("tier", "replicate").get(pk=node_pk)
        return DrawView(campaign.settings, campaign.rollout_sequence, tier, replicate)

    def draw_at(
        self,
        campaign_id: int,
        node_pk: int,
        view: DrawView,
        nonzero_only: bool,
        sequences: list[int],
        count: int,
    ) -> list[dict[str, Any]]:
        tier = view.tier if view.config.pool_within_tier else None
        with transaction.atomic():
            return _draw(campaign_id, node_pk, view.replicate, tier, nonzero_only, sequences, count)

    def flush_seen(self, seen: dict[int, float]) -> int:
        updated = 0
        with transaction.atomic():  # SQLite: a handful of local nodes
            for pk, stamp in seen.items():
                at = datetime.fromtimestamp(stamp, UTC)
                node = WorkerNode.objects.filter(pk=pk).values_list("state", "connected", "last_seen").first()
                if node is None or (node[2] is not None and node[2] >= at):
                    continue
                state, connected, _ = node
                updated += WorkerNode.objects.filter(pk=pk).update(
                    last_seen=at,
                    state=state if state == WorkerNode.State.BANNED else WorkerNode.State.HEALTHY,
                    connected=connected or state == WorkerNode.State.OFFLINE,
                )
        return updated

    def record_node_metrics(
        self,
        node: WorkerNode,
        round: int,
        metrics: dict[str, Any],
        next_lease_at: datetime | None = None,
        offer: LeaseOffer | None = None,
    ) -> tuple[RoundMetrics | None, LeaseRequestView | None]:
        with transaction.atomic():
            row = _record_node_metrics(node, round, metrics)
            if next_lease_at is None:
                return row, None
            view = self.lease_view(node, round + 1, next_lease_at)
            if row is not None and offer is not None and offer.stands(view):
                self.insert_lease(
                    node, offer.round, offer.lease_id, offer.refs, next_lease_at, offer.deadline
                )
                view.offer_taken = True
        return row, view


def _record_node_metrics(node: WorkerNode, round: int, metrics: dict[str, Any]) -> RoundMetrics | None:
    verified = PoolRollout.objects.filter(node=node, round=round).aggregate(reward=Avg("mean_reward"))[
        "reward"
    ]
    if verified is None:
        return None
    row, _ = RoundMetrics.objects.update_or_create(
        campaign_id=node.campaign_id,
        agent=f"node:{node.node_id}",
        round=round,
        defaults={
            "arm": Arm.SWARM,
            "tier": node.tier,
            "node": node,
            "reward": verified,
            "metrics": metrics,
        },
    )
    WorkerNode.objects.filter(pk=node.pk, round__lte=round).update(round=round + 1)
    WorkerNode.objects.filter(pk=node.pk).update(last_reward=verified)
    return row


def _draw(
    campaign_id: int,
    node_pk: int,
    replicate: int,
    tier: str | None,
    nonzero_only: bool,
    sequences: list[int],
    count: int,
) -> list[dict[str, Any]]:
    """The records of the first ``count`` rollouts numbered ``sequences`` (in that order) that
    node ``node_pk`` may draw (in the pool, another node's, its replicate's, [informative], [of
    ``tier``]), their nodes credited (:func:`_credit_draw`); in the caller's transaction."""
    candidates = PoolRollout.objects.filter(
        campaign_id=campaign_id, sequence__in=sequences, in_pool=True, replicate=replicate
    ).exclude(node_id=node_pk)
    if nonzero_only:
        candidates = candidates.filter(zero_advantage=False)
    if tier is not None:
        candidates = candidates.filter(tier=tier)
    order = {sequence: k for k, sequence in enumerate(sequences)}
    rows = candidates.values_list("sequence", "node_id", "zero_advantage", "record")
    chosen = sorted(rows, key=lambda row: order[row[0]])[:count]
    _credit_draw(node_pk, [(node, zero_advantage) for _, node, zero_advantage, _ in chosen])
    return [record for *_, record in chosen]


def _credit_draw(node_pk: int, drawn: list[tuple[int, bool]]) -> None:
    """Credit the nodes of the groups ``node_pk`` drew ((node, zero_advantage), in the order
    chosen), up to its draw_allowance, which they spend; banned nodes get nothing. The ORM twin
    of sql.DRAW_RECORDS, in the caller's transaction, with its locks: the drawer's row first, then
    the drawn nodes' credit rows (NodeCredit) in node order."""
    allowance = (
        WorkerNode.objects.select_for_update()
        .filter(pk=node_pk, draw_allowance__gt=0)
        .values_list("draw_allowance", flat=True)
        .first()
    )
    if not allowance:
        return
    WorkerNode.objects.filter(pk=node_pk).update(draw_allowance=max(0, allowance - len(drawn)))
    counted = [node for node, _ in drawn[:allowance] if node != node_pk]
    banned = set(
        WorkerNode.objects.filter(pk__in=counted, state=WorkerNode.State.BANNED).values_list("pk", flat=True)
    )
    credited: dict[int, list[int]] = {}
    for node, zero_advantage in drawn[:allowance]:
        if node != node_pk and node not in banned:
            counts = credited.setdefault(node, [0, 0])
            counts[0] += 1
            counts[1] += not zero_advantage
    list(NodeCredit.objects.select_for_update().filter(node_id__in=list(credited)).order_by("node_id"))
    for node, (groups, informative) in sorted(credited.items()):
        NodeCredit.objects.filter(node_id=node).update(
            groups_drawn=F("groups_drawn") + groups,
            groups_drawn_informative=F("groups_drawn_informative") + informative,
        )
