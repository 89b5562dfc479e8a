"""The storage interface on PostgreSQL: each operation one or two prepared statements
(sql.py holds them and says why each is shaped as it is)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from swarm_app.campaigns.models import Arm, RoundMetrics, settings_from_text
from swarm_app.coordinator import sql
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.storage.records import (
    NO_DRAW,
    DrawView,
    FirstChunk,
    LeaseOffer,
    LeaseRequestView,
    LeaseView,
    StoredSubmission,
    pool_record,
)
from worker.shared.rollout import Rollout


class PostgresStore:
    name = "postgres"

    def lease_view(self, node: WorkerNode, round: int, now: datetime) -> LeaseRequestView:
        (row,) = sql.fetch(
            sql.LEASE_VIEW, {"campaign": node.campaign_id, "node": node.pk, "lease_round": round, "now": now}
        )
        return _lease_request_view(row, now)

    def insert_lease(
        self,
        node: WorkerNode,
        round: int,
        lease_id: str,
        refs: list[dict[str, Any]],
        now: datetime,
        deadline: datetime,
    ) -> None:
        sql.execute(
            sql.INSERT_LEASE,
            {
                "lease_id": lease_id,
                "campaign": node.campaign_id,
                "node": node.pk,
                "round": round,
                "questions": sql.json_text(refs),
                "now": now,
                "deadline": deadline,
            },
        )

    def find_leases(self, node: WorkerNode, submission_id: str, lease_id: str) -> list[LeaseView]:
        rows = sql.fetch(
            sql.SUBMISSION_VIEW, {"node": node.pk, "lease_id": lease_id, "submission_id": submission_id}
        )
        return [
            LeaseView(
                *row[:6],
                sql.from_json_text(row[6]),
                row[7],
                sql.from_json_text(row[8]) if row[8] is not None else None,
                settings_from_text(row[9]),
                row[10],
            )
            for row in rows
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
        rows = sql.fetch(
            sql.STORE_SUBMISSION,
            {
                "submission_id": submission_id,
                "ack": sql.json_text(ack),
                "lease_id": lease_id,
                "node": node.pk,
                "campaign": node.campaign_id,
                "tier": node.tier,
                "replicate": node.replicate,
                "round": round,
                "now": now,
                "groups": len(rollouts),
                "allowance": allowance,
                "rows": sql.json_text(
                    [
                        {
                            "rollout_id": r.rollout_id,
                            "task": r.ref.task,
                            "seed": r.ref.seed,
                            "index": r.ref.index,
                            "mean_reward": r.mean_reward,
                            "zero_advantage": r.zero_advantage,
                        }
                        for r in rollouts
                    ]
                ),
                "records": [sql.json_text(pool_record(r)) for r in rollouts],
                "offsets": draw.offsets,
                "count": draw.count,
                "nonzero_only": draw.nonzero_only,
                "draw_tier": draw.tier,
            },
        )
        last, stored, before, _ = rows[0]
        if stored != len(rollouts):
            return None
        return StoredSubmission(
            last, before, [sql.from_json_text(text) for *_, text in rows if text is not None]
        )

    def draw_view(self, campaign_id: int, node_pk: int) -> DrawView:
        ((config_text, last, tier, replicate),) = sql.fetch(
            sql.SAMPLE_VIEW, {"campaign": campaign_id, "node": node_pk}
        )
        return DrawView(settings_from_text(config_text), last, tier, replicate)

    def draw_at(
        self,
        campaign_id: int,
        node_pk: int,
        view: DrawView,
        nonzero_only: bool,
        sequences: list[int],
        count: int,
    ) -> list[dict[str, Any]]:
        rows = sql.fetch(
            sql.DRAW_RECORDS,
            {
                "sequences": sequences,
                "count": count,
                "campaign": campaign_id,
                "node": node_pk,
                "replicate": view.replicate,
                "nonzero_only": nonzero_only,
                "tier": view.tier if view.config.pool_within_tier else None,
            },
        )
        return [sql.from_json_text(text) for (text,) in rows]

    def flush_seen(self, seen: dict[int, float]) -> int:
        ids = list(seen)
        stamps = [datetime.fromtimestamp(seen[pk], UTC) for pk in ids]
        return sql.execute(sql.FLUSH_SEEN, {"ids": ids, "seen": stamps}, prepare=False)

    def record_node_metrics(
        self,
        node: WorkerNode,
        round: int,
        metrics: dict[str, Any],
        next_lease_at: datetime | None = None,
        offer: LeaseOffer | None = None,
    ) -> tuple[RoundMetrics | None, LeaseRequestView | None]:
        agent = f"node:{node.node_id}"
        params = {
            "node": node.pk,
            "round": round,
            "campaign": node.campaign_id,
            "tier": node.tier,
            "agent": agent,
            "metrics": sql.json_text(metrics),
        }
        if next_lease_at is None:
            ((verified, row_id),) = sql.fetch(sql.RECORD_NODE_METRICS, params)
            view = None
        else:
            ((verified, row_id, *lease, offer_taken),) = sql.fetch(
                sql.RECORD_NODE_METRICS_AND_LEASE,
                {
                    **params,
                    "lease_round": round + 1,
                    "now": next_lease_at,
                    "lease_id": offer.lease_id if offer else None,
                    "questions": sql.json_text(offer.refs) if offer else None,
                    "deadline": offer.deadline if offer else None,
                    "created": offer.campaign_created if offer else None,
                },
            )
            view = _lease_request_view(lease, next_lease_at)
            view.offer_taken = offer_taken
        if verified is None:
            return None, view
        row = RoundMetrics(
            id=row_id,
            campaign_id=node.campaign_id,
            arm=Arm.SWARM,
            tier=node.tier,
            agent=agent,
            node_id=node.pk,
            round=round,
            reward=verified,
            metrics=metrics,
        )
        return row, view


def _lease_request_view(row: Sequence[Any], now: datetime) -> LeaseRequestView:
    """A LeaseRequestView from sql.LEASE_VIEW's row, read as of ``now``."""
    name, state, created, config, node_state, revoked, held_id, held_deadline, held_refs, ack, waiting = row
    held = (held_id, held_deadline, sql.from_json_text(held_refs)) if held_id is not None else None
    submitted_ack = sql.from_json_text(ack) if ack is not None else None
    return LeaseRequestView(
        now,
        name,
        state,
        created,
        settings_from_text(config),
        node_state,
        revoked,
        held,
        submitted_ack,
        waiting,
    )
