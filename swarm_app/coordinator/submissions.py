"""Rollout submissions: re-scored, checked against the lease, stored once.

Order of checks, cheapest first, and what each costs the worker:

1. the lease exists, is this node's, and this submission id was not already accepted
   (a replay gets ``duplicate_submission`` with the original ack in ``data``: nothing stored);
2. the lease is still active and within its deadline (``lease_expired``);
3. the rollouts answer exactly the leased questions, one group of G each (``lease_mismatch``);
4. question and ground truth equal the coordinator's own record (``ground_truth_mismatch``)
   and every claimed reward equals the verifier's (``reward_mismatch``).

A campaign's control node is checked the same way; what differs is where it is stored
(control_nodes.py: with the lease, never in the pool). Failures of 4 count against the node; at the campaign's ``ban_threshold`` the node is banned and
its rollouts leave the pool; by its token's ``ban_scope``, the token too (bans.py). Nothing else changes on any failure. On success the rollouts enter
the pool with the coordinator's rewards and advantages, in one transaction with the lease.

Cost (this is the coordinator's hottest path; bench/coordinator.py measures it): one read for
the lease, its campaign, the node's state and any earlier use of the submission id; the
re-scoring, which builds each question's reasoning-gym entry once and scores all G completions
against it; then the write: claim the lease, count the node's submission, number the rollouts
and insert them (and, for protocol 2's submit_ack, visit the first chunk of the round's pool
draw: pool.py). On PostgreSQL the read is one prepared statement and the write another; elsewhere
they are ORM queries and a transaction of a few statements. A lease this process issued (the
common case: the worker asked this server for it) needs no read: its round, questions and
settings were noted when it was issued (leases.ISSUED_HERE), and the write claims it only where
checks 1 and 2 pass; anything else, honest or not, goes the way above, which decides it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
from django.db import IntegrityError, transaction
from django.utils import timezone

from swarm_app.coordinator import control_nodes, leases, pool
from swarm_app.coordinator.bans import ban_node
from swarm_app.coordinator.models import Lease, WorkerNode
from swarm_app.coordinator.sql import bump
from swarm_app.coordinator.storage import store
from worker.shared.advantages import group_advantages
from worker.shared.campaign import CampaignConfig
from worker.shared.protocol import ErrorCode, ProtocolError
from worker.shared.questions import QuestionRef, question
from worker.shared.rewards import RewardConfig, rewards
from worker.shared.rollout import Rollout
from worker.shared.sampling import batch_request, qualifies_rewards

REWARD_TOLERANCE = 1e-6


def _same_metadata(sent: Any, recorded: Any) -> bool:
    """Equal as JSON: tuples in reasoning-gym metadata arrive as lists, keys as strings. ``sent``
    was decoded from the worker's frame; ``recorded`` is compared after the JSON round trip that
    the lease's encoder gave it (msgspec; the stdlib's round trip of both was 3% of the
    coordinator's CPU at 1,000 volunteers)."""
    return sent == recorded or sent == msgspec.json.decode(msgspec.json.encode(recorded))


def _duplicate(submission_id: str, ack: dict[str, Any] | None) -> ProtocolError:
    return ProtocolError(
        ErrorCode.DUPLICATE_SUBMISSION, f"submission {submission_id} was already accepted", ack
    )


def _reject(node: WorkerNode, config: CampaignConfig, code: ErrorCode, message: str) -> ProtocolError:
    """Count a false submission against the node; ban it at the threshold (bans.py)."""
    with transaction.atomic():
        rejected = bump(WorkerNode, node.pk, "rejected_submissions", 1)
        threshold = config.ban_threshold
        if rejected >= threshold:
            told = ban_node(node, f"submitted {rejected} false rewards (the limit is {threshold})")
            message += f"; {told}"
        else:
            message += f" ({rejected} of {threshold} rejected submissions allowed before a ban)"
    return ProtocolError(code, message)


class Submitted(NamedTuple):
    """A stored submission: its ack (what a replay is answered), its round, its campaign's
    settings and, once stored, what came of the first chunk of the draw that follows it (none
    unless :func:`submit` was asked for it): the order it visits the pool in, the pool's last
    number the offsets are below, and the records drawn."""

    ack: dict[str, Any]
    round: int
    config: CampaignConfig
    order: pool.DrawOrder | None = None
    pool_before: int = 0
    drawn: list[dict[str, Any]] | None = None

    def external_count(self) -> int:
        """J_r: the external groups this round's batch asks for under the campaign's batch rule
        (worker/shared/sampling.batch_request), the own groups being the verified ones."""
        config = self.config
        qualifying = sum(
            qualifies_rewards(rewards, config.local_strategy) for rewards in self.ack["verified_rewards"]
        )
        return batch_request(
            config.batch_rule,
            config.num_local,
            config.num_external,
            config.questions_per_round,
            self.round,
            qualifying,
            config.decay_rounds,
        )[1]


def submit(
    node: WorkerNode, submission_id: str, lease_id: str, rollouts: list[Rollout], draw: bool = False
) -> Submitted:
    """Check and store a submission; with ``draw``, the write also visits the first chunk of the
    round's pool draw (pool.py), which the caller goes on with where it gave fewer than J."""
    if not submission_id:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "field 'submission_id': must not be empty")
    issued = leases.ISSUED_HERE.take(lease_id, node.pk)
    if issued is not None:
        stored = _submit_issued_here(node, submission_id, lease_id, rollouts, issued, draw)
        if stored is not None:
            return stored
    return _submit(node, submission_id, lease_id, rollouts, draw)


def _submit_issued_here(
    node: WorkerNode,
    submission_id: str,
    lease_id: str,
    rollouts: list[Rollout],
    issued: leases.IssuedLease,
    draw: bool,
) -> Submitted | None:
    """An honest submission of a lease this process issued, stored without a read: its round,
    questions and settings are known here, and the write claims the lease only where the read's
    checks (1 and 2) would have passed (Store.store_submission). None for anything else, which
    :func:`_submit` then decides from the read, with its errors and counts (a false claim is
    counted there, once)."""
    try:
        verified = _verified_rewards(node, issued.config, issued.round, issued.refs, rollouts)
    except (ProtocolError, FalseClaim):
        return None
    return _store(node, issued.config, lease_id, issued.round, submission_id, rollouts, verified, draw)


def _submit(
    node: WorkerNode, submission_id: str, lease_id: str, rollouts: list[Rollout], draw: bool
) -> Submitted:
    """Checks 1-4 on the read of the lease (Store.find_leases), then the write."""
    found = store().find_leases(node, submission_id, lease_id)
    lease = next((row for row in found if row.lease_id == lease_id), None)
    if lease is None:
        raise ProtocolError(ErrorCode.UNKNOWN_LEASE, f"no lease {lease_id}")
    if lease.node_pk != node.pk:
        raise ProtocolError(ErrorCode.LEASE_NOT_YOURS, "this lease was issued to another node")
    if lease.node_state == WorkerNode.State.BANNED:
        raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
    previous = next(
        (row for row in found if row.node_pk == node.pk and row.submission_id == submission_id), None
    )
    if previous is not None:
        raise _duplicate(submission_id, previous.ack)
    if lease.state == Lease.State.SUBMITTED:
        raise ProtocolError(
            ErrorCode.DUPLICATE_SUBMISSION, f"lease {lease_id} was already submitted as {lease.submission_id}"
        )
    expired = ProtocolError(
        ErrorCode.LEASE_EXPIRED,
        f"lease {lease_id} expired at {lease.deadline:%H:%M:%S} UTC; its questions were given to other workers",
    )
    if lease.state != Lease.State.ACTIVE or lease.deadline < timezone.now():
        raise expired
    config = lease.config
    refs = [QuestionRef.from_json(r) for r in lease.questions]
    try:
        verified = _verified_rewards(node, config, lease.round, refs, rollouts)
    except FalseClaim as claim:
        raise _reject(node, config, claim.code, claim.message) from None
    stored = _store(node, config, lease_id, lease.round, submission_id, rollouts, verified, draw)
    if stored is not None:
        return stored
    locked = Lease.objects.only("state", "submission_id", "ack").get(pk=lease.pk)
    if locked.state == Lease.State.SUBMITTED:
        raise _duplicate(locked.submission_id, locked.ack)
    raise expired  # expired, released or past its deadline since it was read


class FalseClaim(Exception):
    """Check 4 failed: a question, answer or reward that differs from the coordinator's. It
    counts against the node (:func:`_reject`) once checks 1-3 have passed on the lease as read."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _verified_rewards(
    node: WorkerNode, config: CampaignConfig, round: int, refs: list[QuestionRef], rollouts: list[Rollout]
) -> list[list[float]]:
    """Checks 3 (ProtocolError) and 4 (FalseClaim) of a lease's rollouts; the verifier's rewards."""
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
        if (rollout.agent_id, rollout.tier, rollout.round) != (node.node_id, node.tier, round):
            raise ProtocolError(
                ErrorCode.LEASE_MISMATCH, f"rollouts[{i}]: agent, tier and round must be this node's lease's"
            )
        # A claim the coordinator can bound: no completion is longer than the campaign lets a
        # worker generate (the pool keeps the counts; they are never shown as a measured fact).
        longest = max(rollout.completion_tokens)
        if longest > config.max_new_tokens:
            raise ProtocolError(
                ErrorCode.LEASE_MISMATCH,
                f"rollouts[{i}].completion_tokens: {longest} tokens, but the campaign's "
                f"max_new_tokens is {config.max_new_tokens}",
            )

    mix = config.mix
    reward_config = RewardConfig(config.format_weight)
    verified: list[list[float]] = []
    for i, rollout in enumerate(rollouts):
        record = question(mix, rollout.ref)
        if (
            rollout.question != record.question
            or rollout.answer != record.answer
            or not _same_metadata(rollout.metadata, record.metadata)
        ):
            raise FalseClaim(
                ErrorCode.GROUND_TRUTH_MISMATCH, f"rollouts[{i}]: question or answer differs from the record"
            )
        true_rewards = rewards(mix, rollout.ref, rollout.completions, reward_config)
        for g, (claimed, true) in enumerate(zip(rollout.rewards, true_rewards, strict=True)):
            if abs(claimed - true) > REWARD_TOLERANCE:
                raise FalseClaim(
                    ErrorCode.REWARD_MISMATCH,
                    f"rollouts[{i}].rewards[{g}]: claimed {claimed}, the verifier gives {true}",
                )
        verified.append(true_rewards)
    return verified


def _store(
    node: WorkerNode,
    config: CampaignConfig,
    lease_id: str,
    round: int,
    submission_id: str,
    rollouts: list[Rollout],
    verified: list[list[float]],
    draw: bool,
) -> Submitted | None:
    """The ack, the coordinator's rewards and advantages on the rollouts, and the write, with the
    draw's first chunk if asked; None when the lease could not be claimed (Store.store_submission)."""
    grpo = config.grpo_config(node.tier)
    scale = grpo.scale_rewards
    ack = {
        "submission_id": submission_id,
        "lease_id": lease_id,
        "verified_rewards": verified,
        "rollout_ids": [r.rollout_id for r in rollouts],
    }
    for rollout, true_rewards in zip(rollouts, verified, strict=True):
        rollout.rewards = true_rewards
        rollout.advantages = group_advantages(true_rewards, scale)
        if not grpo.external_importance_sampling_correction:
            # Nobody in this campaign corrects for it: not kept (it is most of a record's size),
            # and without it the record is the version 1 layout that every worker reads.
            rollout.behaviour, rollout.schema_version = None, 1
    if node.is_control:  # kept with its lease, out of every pool; it draws nothing (control_nodes.py)
        stored_control = control_nodes.store_submission(node, lease_id, round, submission_id, ack)
        return Submitted(ack, round, config) if stored_control else None
    count = Submitted(ack, round, config).external_count()
    order, first = pool.first_chunk(config, node.tier, count if draw else 0)
    try:
        stored = store().store_submission(
            node, lease_id, round, submission_id, ack, rollouts, count, timezone.now(), first
        )
    except IntegrityError:
        # A rollout id reused from an earlier submission: refuse rather than overwrite the pool.
        raise ProtocolError(
            ErrorCode.LEASE_MISMATCH, "a rollout_id in this submission was already used"
        ) from None
    if stored is None:
        return None
    return Submitted(ack, round, config, order, stored.before, stored.drawn)
