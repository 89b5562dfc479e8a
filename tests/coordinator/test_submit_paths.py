"""A submission's two ways to the pool (submissions.py): a lease this process issued is stored
with no read before the write; any other is read, checked and then stored. Both end in the same
rows, and a false claim or a replay is decided by the read whichever way it came."""

from __future__ import annotations

import msgspec
import pytest

from swarm_app.coordinator import consumers, leases, submissions
from swarm_app.coordinator.models import Lease, NodeCredit, PoolRollout, WorkerNode
from swarm_app.coordinator.storage import store
from swarm_app.coordinator.tokens import authenticate
from tests.coordinator.helpers import honest_rollouts, make_pool
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


def _with_window(campaign, window: int) -> None:
    config = campaign.settings
    config.pool_window = window
    campaign.config = config.validate().to_json()
    campaign.save(update_fields=["config"])


@pytest.fixture
def draws(monkeypatch) -> list[list[int]]:
    """The numbers of each draw statement of its own (Store.draw_at) the test's draws make."""
    chunks: list[list[int]] = []
    storage = store()
    draw_at = storage.draw_at

    def recorded(campaign_id, node_pk, view, nonzero_only, sequences, count):
        chunks.append(list(sequences))
        return draw_at(campaign_id, node_pk, view, nonzero_only, sequences, count)

    monkeypatch.setattr(storage, "draw_at", recorded)
    return chunks


def test_a_draw_that_its_first_chunk_fills_needs_no_statement_of_its_own(campaign, node, draws):
    """Protocol 2's submit and draw (consumers.submit_and_draw): a window of 16 is visited whole by
    the first chunk (4J, at least 16) in the submission's own write, which draws J = 2 of the
    other node's informative groups, credits it for them and spends the allowance."""
    _with_window(campaign, 16)
    (other,) = make_pool(campaign, nodes=1, per_node=40)
    NodeCredit.objects.create(node=other)  # made at a node's first accepted submission
    lease_id, rollouts = leased_rollouts(node)
    stored, drawn = consumers.submit_and_draw(node, "s0", lease_id, rollouts)
    assert stored.pool_before == 40 and draws == []
    numbers = [int(record["rollout_id"][1:]) for record in drawn]
    assert len(numbers) == 2 and all(25 <= n <= 40 and n % 3 for n in numbers), numbers
    assert NodeCredit.objects.get(node=other).groups_drawn == 2
    assert WorkerNode.objects.get(pk=node.pk).draw_allowance == 0


def test_a_draw_that_its_first_chunk_leaves_short_goes_on_below_the_same_number(campaign, node, draws):
    """One informative group of another node in a window of 64: the first chunk visits 16 of its
    numbers; where it misses the group, DRAW_RECORDS visits the rest, below the number the first
    chunk was below (not the pool's last after the submission), and finds it."""
    _with_window(campaign, 64)
    make_pool(campaign, nodes=1, per_node=80)
    PoolRollout.objects.exclude(sequence=31).update(in_pool=False)
    for round in range(3):  # the first chunk misses it in 3 of 4 draws
        lease_id, rollouts = leased_rollouts(node, round)
        before = PoolRollout.objects.count()  # 80, then 2 more a round: node a's own
        stored, drawn = consumers.submit_and_draw(node, f"s{round}", lease_id, rollouts)
        assert stored.pool_before == before
        assert [record["rollout_id"] for record in drawn] == ["r31"]
        assert all(before - 63 <= n <= before for chunk in draws for n in chunk), draws
        draws.clear()
