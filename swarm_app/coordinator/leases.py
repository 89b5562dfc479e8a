"""Leases: the coordinator picks each node's questions and records them.

Questions come from the campaign's stream (worker/shared/questions.py) at positions the coordinator
allocates, so it knows every ground truth and no worker can pick easy questions. A lease has a
deadline; a lease that expires or is released goes back in line and its questions are issued
again, whole, to the next node that asks (``reissue_of`` links the two). A late submission for
an expired lease is refused (``lease_expired``), so no question is ever counted twice.

"Goes back in line" means: state expired or released. An active lease past its deadline is
marked expired by a sweep (expire_overdue: every few seconds on each ASGI server, presence.py,
and on the liveness beat), so it is reissued at most a few seconds after its deadline; a
submission checks the deadline itself. A lease request never looks for overdue active leases:
that range of an index holds the dead entry of every lease submitted since the last VACUUM, and
its cost grew with the campaign's age (sql.py).

One lease per node and round: once a node submitted a round, a lease request for that round
(a worker that crashed after its submit_ack and resumed at the same round) is answered with
``round_submitted`` and the stored ack, never with a second lease.

The common request (nothing held, nothing waiting) costs one read (the campaign, the node's
state, the lease this node holds or submitted for the round and whether any lease waits; one
prepared statement on PostgreSQL, sql.LEASE_VIEW) and one write, the lease's insert: its
questions' positions come from a block this process reserved (:class:`PositionBlocks`). The
lease that protocol 2 sends with a metrics report's answer costs less still: this process makes
the common case's lease beforehand (:func:`offer_lease`), and the report's statement reads the
view and inserts that lease if the view is the common case (LeaseOffer.stands); otherwise
:func:`issue_lease` decides from the view as for any request.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import transaction
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import Lease, WorkerNode
from swarm_app.coordinator.sql import bump
from swarm_app.coordinator.storage import store
from swarm_app.coordinator.storage.records import WAITING, LeaseOffer, LeaseRequestView
from worker.shared import protocol
from worker.shared.campaign import CampaignConfig
from worker.shared.protocol import ErrorCode, ProtocolError
from worker.shared.questions import QuestionRef, TaskMix, question, ref_at


class PositionBlocks:
    """Fresh positions of the campaigns' question streams, reserved from the campaign's counter
    (``next_question_position``) ``LEASES`` leases' worth at a time and handed out from memory.

    Taken from the counter on every lease, they cost a statement and a commit per round on the
    campaign's row. Positions this process reserved and did not hand out before it stopped are
    skipped, never issued, as are those of a lease whose insert fails: the stream is endless
    and nothing counts it. With several servers each hands out its own blocks, so leases do not
    follow stream order across servers; nothing relies on that order. A block is kept under
    its campaign's id and creation time: an id can come back (SQLite reuses one after a rolled
    back insert), its creation time does not.
    """

    LEASES = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the database threads lease concurrently
        self._blocks: dict[tuple[int, datetime], tuple[int, int]] = {}  # -> (next, end)

    def take(self, campaign_id: int, campaign_created: datetime, count: int) -> range:
        """``count`` positions of the campaign's stream that no lease was given."""
        key = (campaign_id, campaign_created)
        with self._lock:
            start, end = self._blocks.get(key, (0, 0))
            if end - start < count:
                size = count * self.LEASES
                end = bump(Campaign, campaign_id, "next_question_position", size)
                start = end - size
            self._blocks[key] = (start + count, end)
        return range(start, start + count)


POSITIONS = PositionBlocks()

# What this process last read of each campaign: its creation time and settings. A campaign's
# settings never change once it is created (the admin shows them read-only; nothing updates
# them), so they are good for an offer as long as the creation time matches (an id can come back).
_CAMPAIGNS_READ: dict[int, tuple[datetime, CampaignConfig]] = {}


class IssuedLease(NamedTuple):
    """What a submission of a lease is checked against, known where the lease was issued."""

    node_pk: int
    round: int
    refs: list[QuestionRef]
    config: CampaignConfig


class IssuedHere:
    """The leases this process issued and has not seen submitted yet (at most ``LIMIT``, the
    oldest forgotten first): their submission needs no read of the lease (submissions.py).
    Each is taken once; a submission to another server, or after a restart, reads the lease."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the database threads issue and take concurrently
        self._leases: dict[str, IssuedLease] = {}

    def add(self, lease_id: str, lease: IssuedLease) -> None:
        with self._lock:
            self._leases[lease_id] = lease
            if len(self._leases) > self.LIMIT:
                del self._leases[next(iter(self._leases))]

    def take(self, lease_id: str, node_pk: int) -> IssuedLease | None:
        """The lease ``lease_id`` if this process issued it to node ``node_pk``; forgotten then."""
        with self._lock:
            lease = self._leases.pop(lease_id, None)
        return lease if lease is not None and lease.node_pk == node_pk else None


ISSUED_HERE = IssuedHere()


def offer_lease(node: WorkerNode, round: int, now: datetime) -> LeaseOffer | None:
    """The new lease a request for ``round`` gets in the common case (LeaseOffer), made before
    the request's read so that the read can insert it in the same statement; None when this
    process has not read the campaign yet or ``round`` is past its rounds. An offer that is not
    taken leaves its positions unused (skipped, as PositionBlocks says)."""
    read = _CAMPAIGNS_READ.get(node.campaign_id)
    if read is None:
        return None
    created, config = read
    if round >= config.rounds:
        return None
    refs = _fresh_refs(node.campaign_id, created, config)
    deadline = now + timedelta(seconds=config.lease_seconds)
    return LeaseOffer(uuid.uuid4().hex, round, refs, deadline, created)


def _fresh_refs(campaign_id: int, campaign_created: datetime, config: CampaignConfig) -> list[dict[str, Any]]:
    """A new lease's questions: the next positions of the campaign's stream (POSITIONS)."""
    positions = POSITIONS.take(campaign_id, campaign_created, config.questions_per_round)
    return [ref_at(config.mix, config.seed, position).to_json() for position in positions]


def expire_overdue(campaign_id: int | None = None) -> int:
    """Mark active leases past their deadline as expired; returns how many."""
    leases = Lease.objects.filter(state=Lease.State.ACTIVE, deadline__lt=timezone.now())
    if campaign_id is not None:
        leases = leases.filter(campaign_id=campaign_id)
    return leases.update(state=Lease.State.EXPIRED)


def lease_questions(mix: TaskMix, refs: list[dict[str, Any]]) -> list[protocol.LeaseQuestion]:
    """The leased questions with their ground truth, from their stored references."""
    out = []
    for ref_json in refs:
        ref = QuestionRef.from_json(ref_json)
        q = question(mix, ref)
        out.append(protocol.LeaseQuestion(ref=ref, question=q.question, answer=q.answer, metadata=q.metadata))
    return out


def lease_message(
    mix: TaskMix, lease_id: str, round: int, deadline: datetime, refs: list[dict[str, Any]]
) -> protocol.Lease:
    """The ``lease`` message of a lease."""
    return protocol.Lease(
        lease_id=lease_id, round=round, deadline=deadline.timestamp(), questions=lease_questions(mix, refs)
    )


def issue_lease(
    node: WorkerNode, round: int, view: LeaseRequestView | None = None, offer: LeaseOffer | None = None
) -> protocol.Lease:
    """This node's lease for ``round``: the one it already holds, a reissued one, or a new one.
    ``view``: what it is decided on, when that was read already (with the node's metrics
    report, consumers.report_and_lease), with ``offer``, which that read inserted or not."""
    view = view or store().lease_view(node, round, timezone.now())
    _CAMPAIGNS_READ[node.campaign_id] = (view.campaign_created, view.config)
    now = view.read_at
    if view.node_state == WorkerNode.State.BANNED:
        raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
    if view.token_revoked:  # a connection opened before the revocation (its push may have been lost)
        raise ProtocolError(
            ErrorCode.TOKEN_REVOKED, "this node's token was revoked by the campaign's organizer"
        )
    if view.campaign_state != Campaign.State.RUNNING:
        raise ProtocolError(
            ErrorCode.CAMPAIGN_NOT_RUNNING, f"campaign {view.campaign_name!r} is {view.campaign_state}"
        )
    config = view.config
    if round >= config.rounds:
        raise ProtocolError(
            ErrorCode.CAMPAIGN_NOT_RUNNING,
            f"this campaign runs {config.rounds} rounds per node; round {round} is past it",
        )
    if view.submitted_ack is not None:
        raise ProtocolError(
            ErrorCode.ROUND_SUBMITTED,
            f"round {round} was already submitted by this node: report its metrics and go on",
            view.submitted_ack,
        )
    if view.offer_taken and offer is not None:  # the common case, decided and inserted by the read
        return issued_message(node, config, offer.lease_id, round, offer.deadline, offer.refs)
    if view.held is not None:  # a reconnecting worker asks again: same lease, same questions
        return issued_message(node, config, view.held[0], round, view.held[1], view.held[2])
    deadline = now + timedelta(seconds=config.lease_seconds)
    lease_id = uuid.uuid4().hex
    if view.any_waiting:
        refs = _reissue(node, round, lease_id, deadline)
        if refs is not None:
            return issued_message(node, config, lease_id, round, deadline, refs)
    refs = _fresh_refs(node.campaign_id, view.campaign_created, config)
    store().insert_lease(node, round, lease_id, refs, now, deadline)
    return issued_message(node, config, lease_id, round, deadline, refs)


def issued_message(
    node: WorkerNode,
    config: CampaignConfig,
    lease_id: str,
    round: int,
    deadline: datetime,
    refs: list[dict[str, Any]],
) -> protocol.Lease:
    """The lease's message; the lease noted in :data:`ISSUED_HERE`."""
    message = lease_message(config.mix, lease_id, round, deadline, refs)
    ISSUED_HERE.add(lease_id, IssuedLease(node.pk, round, [q.ref for q in message.questions], config))
    return message


def _reissue(node: WorkerNode, round: int, lease_id: str, deadline: datetime) -> list[dict[str, Any]] | None:
    """Reissue the oldest waiting lease's questions as ``lease_id``; None if none is left."""
    with transaction.atomic():
        # Lock the oldest one; SKIP LOCKED: another server reissuing or a late submission
        # claiming a lease holds its row, and must not be waited for.
        waiting = (
            Lease.objects.select_for_update(skip_locked=True)
            .filter(WAITING, campaign_id=node.campaign_id)
            .order_by("issued_at")
            .first()
        )
        if waiting is None:
            return None
        waiting.state = Lease.State.REISSUED
        waiting.save(update_fields=["state"])
        Lease.objects.create(
            lease_id=lease_id,
            campaign_id=node.campaign_id,
            node=node,
            round=round,
            questions=waiting.questions,
            deadline=deadline,
            reissue_of=waiting,
        )
        return waiting.questions


def release(node: WorkerNode, lease_id: str) -> None:
    lease = Lease.objects.filter(lease_id=lease_id).first()
    if lease is None:
        raise ProtocolError(ErrorCode.UNKNOWN_LEASE, f"no lease {lease_id}")
    if lease.node_id != node.pk:
        raise ProtocolError(ErrorCode.LEASE_NOT_YOURS, "this lease was issued to another node")
    Lease.objects.filter(pk=lease.pk, state=Lease.State.ACTIVE).update(state=Lease.State.RELEASED)
