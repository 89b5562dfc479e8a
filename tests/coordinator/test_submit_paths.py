"""A submission's two ways to the pool (submissions.py): a lease this process issued is stored
with no read before the write; any other is read, checked and then stored. Both end in the same
rows, and a false claim or a replay is decided by the read whichever way it came."""

from __future__ import annotations

import msgspec
import pytest

from swarm_app.coordinator import leases, submissions
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
from swarm_app.coordinator.storage import store
from swarm_app.coordinator.tokens import authenticate
from tests.coordinator.helpers import honest_rollouts
from worker.shared.protocol import ProtocolError
from worker.shared.rollout import Rollout


@pytest.fixture
def node(campaign, token) -> WorkerNode:
    return WorkerNode.objects.create(
        node_id="node-a", campaign=campaign, token=authenticate(token), tier="tiny-1m"
    )


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The lease ids the store is asked to read for a submission (Store.find_leases)."""
    asked: list[str] = []
    storage = store()
    read = storage.find_leases

    def find_leases(node, submission_id, lease_id):
        asked.append(lease_id)
        return read(node, submission_id, lease_id)

    monkeypatch.setattr(storage, "find_leases", find_leases)
    return asked


def leased_rollouts(node: WorkerNode, round: int = 0) -> tuple[str, list[Rollout]]:
    lease = msgspec.to_builtins(leases.issue_lease(node, round))
    records = honest_rollouts(lease, node.node_id, "tiny-1m", node.campaign.settings.mix)
    return lease["lease_id"], [Rollout.from_json(r) for r in records]


def test_a_lease_issued_here_is_stored_without_a_read(node, reads):
    lease_id, rollouts = leased_rollouts(node)
    stored = submissions.submit(node, "s0", lease_id, rollouts)
    assert reads == []
    assert stored.pool_before == 0 and stored.ack["lease_id"] == lease_id
    assert Lease.objects.get(lease_id=lease_id).state == Lease.State.SUBMITTED
    assert PoolRollout.objects.filter(node=node, round=0).count() == 2


def test_a_lease_issued_elsewhere_is_read_then_stored_the_same(node, reads):
    lease_id, rollouts = leased_rollouts(node)
    assert leases.ISSUED_HERE.take(lease_id, node.pk) is not None  # as if another server issued it
    stored = submissions.submit(node, "s0", lease_id, rollouts)
    assert reads == [lease_id]
    assert stored.pool_before == 0 and stored.ack["lease_id"] == lease_id
    assert PoolRollout.objects.filter(node=node, round=0).count() == 2


def test_a_false_claim_on_a_lease_issued_here_is_decided_by_the_read_and_counted_once(node, reads):
    lease_id, rollouts = leased_rollouts(node)
    rollouts[0].rewards = [1.0 - r for r in rollouts[0].rewards]
    with pytest.raises(ProtocolError) as refused:
        submissions.submit(node, "s0", lease_id, rollouts)
    assert refused.value.code == "reward_mismatch" and reads == [lease_id]
    node.refresh_from_db()
    assert node.rejected_submissions == 1
    assert Lease.objects.get(lease_id=lease_id).state == Lease.State.ACTIVE
    assert not PoolRollout.objects.exists()


def test_a_replay_and_a_late_submission_of_leases_issued_here_get_the_reads_answers(node, reads):
    lease_id, rollouts = leased_rollouts(node)
    first = submissions.submit(node, "s0", lease_id, rollouts)
    with pytest.raises(ProtocolError) as replayed:
        submissions.submit(node, "s0", lease_id, rollouts)
    assert replayed.value.code == "duplicate_submission" and replayed.value.data == first.ack
    late_id, late = leased_rollouts(node, round=1)
    Lease.objects.filter(lease_id=late_id).update(state=Lease.State.EXPIRED)
    with pytest.raises(ProtocolError) as expired:
        submissions.submit(node, "s1", late_id, late)
    assert expired.value.code == "lease_expired" and reads == [lease_id, late_id]
    assert PoolRollout.objects.filter(node=node).count() == 2
