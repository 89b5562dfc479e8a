"""The storage interface of the coordinator's hot paths: what a lease request and a submission
are decided on (:class:`LeaseRequestView`, :class:`LeaseView`), how a rollout is stored
(:func:`pool_record`), and :class:`Store`, the operations each implementation provides
(postgres.py, orm.py; storage/__init__.py picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import msgspec
from django.db.models import Q

from swarm_app.coordinator.models import Lease
from worker.shared.campaign import CampaignConfig
from worker.shared.rollout import Rollout

if TYPE_CHECKING:
    from swarm_app.campaigns.models import RoundMetrics
    from swarm_app.coordinator.models import WorkerNode

# Leases whose questions wait to be reissued (the partial index lease_waiting).
WAITING = Q(state__in=[Lease.State.EXPIRED, Lease.State.RELEASED])


@dataclass
class LeaseRequestView:
    """What a lease request is decided on: one read (leases.py's docstring), as of ``read_at``."""

    read_at: datetime
    campaign_name: str
    campaign_state: str
    campaign_created: datetime  # with its id, which campaign this is (leases.PositionBlocks)
    config: CampaignConfig
    node_state: str
    token_revoked: bool  # the node's token, revoked since this connection's hello
    held: tuple[str, datetime, list[dict[str, Any]]] | None  # lease_id, deadline, refs
    submitted_ack: dict[str, Any] | None  # the ack of this node's submission for the round
    any_waiting: bool
    offer_taken: bool = False  # the LeaseOffer read with it was inserted (Store.record_node_metrics)


class LeaseOffer(NamedTuple):
    """A new lease for ``round`` that the read of a lease request may insert in the same
    statement, when the request is the common one (sql.RECORD_NODE_METRICS_AND_LEASE says which):
    made by leases.offer_lease from what this process read of the campaign (created at
    ``campaign_created``) before."""

    lease_id: str
    round: int
    refs: list[dict[str, Any]]
    deadline: datetime
    campaign_created: datetime

    def stands(self, view: LeaseRequestView) -> bool:
        """Whether ``view`` (of this offer's round) is the common case, in which the offer is
        what leases.issue_lease would insert."""
        return (
            view.campaign_state == "running"
            and view.campaign_created == self.campaign_created
            and view.node_state != "banned"
            and not view.token_revoked
            and view.held is None
            and view.submitted_ack is None
            and not view.any_waiting
        )


@dataclass
class LeaseView:
    """What a submission is checked against: a lease, its campaign's config, the node's state."""

    pk: int
    lease_id: str
    node_pk: int
    state: str
    deadline: datetime
    round: int
    questions: list[dict[str, Any]]
    submission_id: str
    ack: dict[str, Any] | None
    config: CampaignConfig
    node_state: str


class DrawView(NamedTuple):
    """What a pool draw is decided on: the campaign's settings, the pool's last sequence number
    and the drawing node's tier and replicate (one read, or known from the submission just
    stored: consumers.submit_and_draw)."""

    config: CampaignConfig
    last: int
    tier: str
    replicate: int


def pool_record(rollout: Rollout) -> dict[str, Any]:
    """``rollout.to_json()`` without its deep conversion of every list (a shallow copy).

    The conversion is a large share of a submission's Python time, and the rollout is not used
    after its record is stored. tests/coordinator/ checks that the two are equal.
    """
    data = msgspec.structs.asdict(rollout)
    data["ref"] = rollout.ref.to_json()
    if rollout.behaviour is None:
        del data["behaviour"]
    else:
        data["behaviour"] = msgspec.structs.asdict(rollout.behaviour)
    return data


class FirstChunk(NamedTuple):
    """The first chunk of the draw that follows a submission (pool.DrawOrder), which the write
    that stores the submission visits (Store.store_submission): its offsets below the pool's last
    number, how many records to draw, and the draw's filters."""

    offsets: list[int]
    count: int
    nonzero_only: bool
    tier: str | None  # the node's tier where the campaign draws within tiers, else None


NO_DRAW = FirstChunk([], 0, False, None)


class StoredSubmission(NamedTuple):
    """A submission's rollouts in the pool: the pool's last number once they are in, the last
    number the first chunk's offsets are below (``before`` them: a draw never gives the node's
    own rollouts), and the records that chunk drew."""

    last: int
    before: int
    drawn: list[dict[str, Any]]


class Store(Protocol):
    """The hot paths' reads and writes. Both implementations keep the same rows in the same
    states; tests/coordinator/test_storage_contract.py runs one scenario against each (both on
    PostgreSQL, the ORM's alone on SQLite) and compares what they return and store."""

    name: str

    def lease_view(self, node: WorkerNode, round: int, now: datetime) -> LeaseRequestView:
        """Everything a lease request for ``round`` is decided on (leases.issue_lease)."""
        ...

    def insert_lease(
        self,
        node: WorkerNode,
        round: int,
        lease_id: str,
        refs: list[dict[str, Any]],
        now: datetime,
        deadline: datetime,
    ) -> None:
        """A new active lease of ``refs`` (positions already allocated)."""
        ...

    def find_leases(self, node: WorkerNode, submission_id: str, lease_id: str) -> list[LeaseView]:
        """The lease ``lease_id`` and any lease of this node that already carries
        ``submission_id`` (at most two rows, as both are unique)."""
        ...

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
        """Claim the lease, count the node's round, verified groups and next draw's allowance,
        and put the rollouts in the pool, all or nothing, with the first chunk of the node's
        draw (as :meth:`draw_at` on the numbers ``draw.offsets`` are below the pool's last number
        before the rollouts, crediting up to ``allowance``, which it spends); None when the lease
        could not be claimed (then nothing is drawn either): it is claimed only if it is the
        node's lease for ``round``, active and within its deadline as of ``now``, no other lease
        of the node carries ``submission_id``, and neither the node nor its token is banned."""
        ...

    def draw_view(self, campaign_id: int, node_pk: int) -> DrawView:
        """The campaign's settings, its pool's last sequence number, the node's tier and replicate."""
        ...

    def draw_at(
        self,
        campaign_id: int,
        node_pk: int,
        view: DrawView,
        nonzero_only: bool,
        sequences: list[int],
        count: int,
    ) -> list[dict[str, Any]]:
        """The records of the first ``count`` rollouts numbered ``sequences`` (in that order) that
        the node may draw (pool.py's docstring), crediting their nodes up to its allowance."""
        ...

    def flush_seen(self, seen: dict[int, float]) -> int:
        """Write last-seen times (node pk -> POSIX seconds); how many nodes were updated."""
        ...

    def record_node_metrics(
        self,
        node: WorkerNode,
        round: int,
        metrics: dict[str, Any],
        next_lease_at: datetime | None = None,
        offer: LeaseOffer | None = None,
    ) -> tuple[RoundMetrics | None, LeaseRequestView | None]:
        """Store the node's report for ``round`` under its verified reward (the mean of its
        rollouts of the round in the pool) and advance the node's round (the row: None when the
        node has no verified rollout in that round); with ``next_lease_at``, also read
        :meth:`lease_view` of round + 1 as of then (None without), and insert ``offer`` (a lease
        for round + 1) when the report was stored and the offer :meth:`LeaseOffer.stands`
        (``offer_taken``)."""
        ...
