"""The storage interface's contract (swarm_app/coordinator/storage/): one scenario of two nodes'
rounds, run against every implementation this database has (the ORM's everywhere, PostgreSQL's
statements on PostgreSQL), checked from what each returns and stores; on PostgreSQL the two are
also compared with each other, field by field."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from django.db import connection
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.leases import lease_message
from swarm_app.coordinator.models import Lease, NodeCredit, PoolRollout, WorkerNode
from swarm_app.coordinator.storage.orm import OrmStore
from swarm_app.coordinator.storage.postgres import PostgresStore
from swarm_app.coordinator.storage.records import NO_DRAW, FirstChunk, LeaseOffer, Store, StoredSubmission
from swarm_app.coordinator.tokens import create_token
from tests.coordinator.helpers import G, honest_rollouts
from worker.shared.campaign import CampaignConfig
from worker.shared.questions import ref_at
from worker.shared.rollout import Rollout

POSTGRES = connection.vendor == "postgresql"
STORES: list[Store] = [OrmStore(), PostgresStore()] if POSTGRES else [OrmStore()]


def scenario(store: Store) -> dict[str, Any]:
    """Node a leases, submits and reports round 0; node b submits round 0; a draws b's groups.
    Returns what the store answered and what the tables hold, without ids or times."""
    config = CampaignConfig(group_size=G, questions_per_round=2, num_local=2, num_external=2, rounds=5)
    campaign = Campaign.objects.create(
        name=f"contract {store.name}", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    token, _ = create_token(campaign)
    nodes = {
        name: WorkerNode.objects.create(
            campaign=campaign, node_id=f"{store.name}-{name}", token=token, tier="tiny-1m"
        )
        for name in ("a", "b")
    }
    mix, now = config.mix, timezone.now()
    deadline = now + timedelta(seconds=config.lease_seconds)
    seen: dict[str, Any] = {}
    first = store.lease_view(nodes["a"], 0, now)
    seen["first view"] = (
        first.campaign_state,
        first.node_state,
        first.token_revoked,
        first.held,
        first.any_waiting,
    )
    assert first.config == config and first.submitted_ack is None
    stored: dict[str, list[Rollout]] = {}
    for index, (name, node) in enumerate(nodes.items()):
        refs = [ref_at(mix, config.seed, 2 * index + i).to_json() for i in range(2)]
        lease_id = f"{store.name}-lease-{name}"
        store.insert_lease(node, 0, lease_id, refs, now, deadline)
        held = store.lease_view(node, 0, now).held
        assert held is not None and (held[0], held[2]) == (lease_id, refs)
        (view,) = store.find_leases(node, f"sub-{name}", lease_id)
        seen[f"lease {name}"] = (
            view.lease_id,
            view.state,
            view.round,
            view.questions,
            view.ack,
            view.node_state,
        )
        lease = msgspec.to_builtins(lease_message(mix, lease_id, 0, deadline, refs))
        rollouts = [Rollout.from_json(r) for r in honest_rollouts(lease, node.node_id, "tiny-1m", mix)]
        ack = {"submission_id": f"sub-{name}", "verified_rewards": [r.rewards for r in rollouts]}
        # b's write visits the first chunk of its draw: offsets 0, 1 and 5 below the pool's last
        # number before b's rollouts (2: a's two; 5 is past the pool's start), one record wanted,
        # its allowance 2: a's second rollout, a credited once, one draw left to b.
        first = FirstChunk([0, 1, 5], 1, False, None) if name == "b" else NO_DRAW
        stored_now = store.store_submission(node, lease_id, 0, f"sub-{name}", ack, rollouts, 2, now, first)
        assert stored_now is not None
        # The pool's last number once the rollouts are in: the second's.
        assert stored_now.last == PoolRollout.objects.get(rollout_id=rollouts[1].rollout_id).sequence
        seen[f"first chunk {name}"] = (stored_now.before, [r["rollout_id"] for r in stored_now.drawn])
        # A second claim of the same lease (a racing duplicate) stores nothing.
        assert store.store_submission(node, lease_id, 0, f"sub-{name}-again", ack, rollouts, 2, now) is None
        stored[name] = rollouts
        after = store.lease_view(node, 0, now)
        assert after.held is None and after.submitted_ack == ack
        again = store.find_leases(node, f"sub-{name}", "no-such-lease")
        assert [(v.lease_id, v.state, v.submission_id) for v in again] == [
            (lease_id, "submitted", f"sub-{name}")
        ]
    # Rollout ids are random: each is named by its node and place instead.
    names = {r.rollout_id: f"rollout {name}{i}" for name, rs in stored.items() for i, r in enumerate(rs)}
    assert seen["first chunk a"] == (0, []) and seen["first chunk b"] == (2, [stored["a"][1].rollout_id])
    # a draws: only b's groups (never its own), and b is credited for them, up to a's allowance.
    view = store.draw_view(campaign.pk, nodes["a"].pk)
    seen["draw view"] = (view.tier, view.replicate, view.config == config)
    assert view.last == Campaign.objects.get(pk=campaign.pk).rollout_sequence
    # The first 3 candidates of the numbers in this order: b's two (a's own are never drawn).
    number = {
        names[r]: n
        for r, n in PoolRollout.objects.filter(campaign=campaign).values_list("rollout_id", "sequence")
    }
    order = [number["rollout b1"], number["rollout a0"], number["rollout a1"], number["rollout b0"]]
    drawn = store.draw_at(campaign.pk, nodes["a"].pk, view, False, order, 3)
    seen["drawn"] = [names[record["rollout_id"]] for record in drawn]
    assert seen["drawn"] == ["rollout b1", "rollout b0"]
    assert store.draw_at(campaign.pk, nodes["a"].pk, view, False, order[-1:], 1)  # credits nothing more
    # Presence: a newer time is written (and heals a stale node), an older one is not.
    WorkerNode.objects.filter(pk=nodes["a"].pk).update(state=WorkerNode.State.STALE)
    stamp = now.timestamp()
    seen["flushed"] = (
        store.flush_seen({nodes["a"].pk: stamp}),
        store.flush_seen({nodes["a"].pk: stamp - 60}),
    )
    # Node a's report of round 0 under its verified reward; none for a round it never submitted.
    row, no_view = store.record_node_metrics(nodes["a"], 0, {"loss": 0.5})
    assert row is not None and row.pk is not None and no_view is None
    # Reported again (the report is replaced) with the read of a lease request for the next round.
    row, view = store.record_node_metrics(nodes["a"], 0, {"loss": 0.25}, now)
    assert row is not None and view == store.lease_view(nodes["a"], 1, now)
    seen["report's lease view"] = (view.campaign_state, view.node_state, view.held, view.submitted_ack)
    # With an offer of round 1's lease: inserted (nothing held, submitted or waiting) and held from
    # then on; a second offer is not, nor one made for another campaign that had this id.
    refs = [ref_at(mix, config.seed, 4 + i).to_json() for i in range(2)]
    offer = LeaseOffer(f"{store.name}-lease-a1", 1, refs, deadline, campaign.created_at)
    row, view = store.record_node_metrics(nodes["a"], 0, {"loss": 0.25}, now, offer)
    assert row is not None and view is not None and view.offer_taken and view.held is None
    assert store.lease_view(nodes["a"], 1, now).held == (offer.lease_id, deadline, refs)
    again = offer._replace(lease_id=f"{store.name}-lease-a1-again")
    _, view = store.record_node_metrics(nodes["a"], 0, {"loss": 0.25}, now, again)
    assert view is not None and not view.offer_taken and view.held == (offer.lease_id, deadline, refs)
    other = offer._replace(lease_id=f"{store.name}-lease-b1", campaign_created=now - timedelta(days=1))
    _, view = store.record_node_metrics(nodes["b"], 0, {"loss": 0.25}, now, other)
    assert view is not None and not view.offer_taken and view.held is None
    seen["report"] = (row.agent.split("-")[-1], row.round, row.reward, row.metrics)
    assert row.reward == pytest.approx(sum(r.mean_reward for r in stored["a"]) / 2)
    assert store.record_node_metrics(nodes["a"], 3, {"loss": 0.5}) == (None, None)
    seen["nodes"] = {
        name: WorkerNode.objects.values_list(
            "state", "round", "last_reward", "accepted_submissions", "accepted_rollouts", "draw_allowance"
        ).get(pk=node.pk)
        + NodeCredit.objects.values_list("groups_drawn", "groups_drawn_informative").get(node=node)
        for name, node in nodes.items()
    }
    assert WorkerNode.objects.get(pk=nodes["a"].pk).last_seen.timestamp() == pytest.approx(stamp)
    # The pool in arrival order, numbered 1..4: a claim that failed (the racing duplicate above)
    # took no numbers.
    pool = list(
        PoolRollout.objects.filter(campaign=campaign)
        .order_by("sequence")
        .values_list(
            "sequence", "rollout_id", "round", "tier", "replicate", "mean_reward", "zero_advantage", "in_pool"
        )
    )
    assert [row[0] for row in pool] == [1, 2, 3, 4]
    seen["pool"] = [row[1:] for row in pool]
    records = dict(PoolRollout.objects.filter(campaign=campaign).values_list("rollout_id", "record"))
    assert all(
        records[r.rollout_id] == json.loads(json.dumps(r.to_json())) for rs in stored.values() for r in rs
    )
    seen["leases"] = sorted(
        Lease.objects.filter(campaign=campaign).values_list("lease_id", "state", "submission_id")
    )
    seen["reports"] = list(
        RoundMetrics.objects.filter(campaign=campaign).values_list("round", "reward", "metrics")
    )
    return _comparable(seen, store.name, names)


def _comparable(value: Any, store_name: str, names: dict[str, str]) -> Any:
    """The scenario's results without what differs by construction: the implementation's name
    (in node and lease ids) and the random rollout ids."""
    if isinstance(value, str):
        return names.get(value, value.replace(store_name, "<store>"))
    if isinstance(value, dict):
        return {k: _comparable(v, store_name, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_comparable(v, store_name, names) for v in value)
    return value


@pytest.mark.parametrize("store", STORES, ids=lambda store: store.name)
def test_each_store_keeps_the_contract(db, store):
    seen = scenario(store)
    a, b = seen["nodes"]["a"], seen["nodes"]["b"]
    # a: healthy again, round 1, one submission of 2 groups, its allowance of 2 spent on b's;
    # credited with the group b's first chunk drew (a non-zero advantage: half right).
    assert a[:2] == ("healthy", 1) and a[3:] == (1, 2, 0, 1, 1)
    # b: one submission of 2 groups, one draw of its 2 spent by its first chunk; credited with
    # the 2 groups a drew.
    assert b[3:] == (1, 2, 1, 2, 2)
    assert seen["flushed"] == (1, 0)
    assert seen["leases"] == [
        ("<store>-lease-a", "submitted", "sub-a"),
        ("<store>-lease-a1", "active", ""),
        ("<store>-lease-b", "submitted", "sub-b"),
    ]


@pytest.mark.skipif(
    not POSTGRES, reason="PostgreSQL's statements run on PostgreSQL only (its suite runs this)"
)
def test_the_postgresql_statements_do_what_the_orm_does(db):
    orm, postgres = scenario(OrmStore()), scenario(PostgresStore())
    assert postgres == orm


@pytest.mark.parametrize("store", STORES, ids=lambda store: store.name)
def test_a_submission_is_stored_only_where_its_first_checks_pass(db, store):
    """The write claims the lease only where the checks a read would make pass (a submission of
    a lease this process issued is stored with no read before it, submissions.py): the node's
    lease of that round, active, within its deadline, the submission id not used by another of
    its leases, node and token not banned. Each failing case stores nothing."""
    config = CampaignConfig(group_size=G, questions_per_round=2, num_local=2, num_external=2, rounds=5)
    campaign = Campaign.objects.create(
        name="claims", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    token, _ = create_token(campaign)
    node, other = (
        WorkerNode.objects.create(campaign=campaign, node_id=name, token=token, tier="tiny-1m")
        for name in ("node-a", "node-b")
    )
    now = timezone.now()
    deadline = now + timedelta(seconds=config.lease_seconds)
    refs = [ref_at(config.mix, config.seed, i).to_json() for i in range(2)]
    store.insert_lease(node, 0, "lease-a", refs, now, deadline)
    store.insert_lease(node, 1, "lease-used", refs, now, deadline)
    Lease.objects.filter(lease_id="lease-used").update(state=Lease.State.SUBMITTED, submission_id="sub-used")
    lease = msgspec.to_builtins(lease_message(config.mix, "lease-a", 0, deadline, refs))
    rollouts = [Rollout.from_json(r) for r in honest_rollouts(lease, "node-a", "tiny-1m", config.mix)]
    ack = {"submission_id": "sub", "verified_rewards": [r.rewards for r in rollouts]}

    def stored(**change) -> StoredSubmission | None:
        args = {"node": node, "lease_id": "lease-a", "round": 0, "submission_id": "sub", "now": now} | change
        return store.store_submission(
            args["node"],
            args["lease_id"],
            args["round"],
            args["submission_id"],
            ack,
            rollouts,
            2,
            args["now"],
        )

    assert stored(node=other) is None  # another node's lease
    assert stored(round=1) is None  # not the lease of that round
    assert stored(now=deadline + timedelta(seconds=1)) is None  # past its deadline
    assert stored(submission_id="sub-used") is None  # the id of another of the node's submissions
    WorkerNode.objects.filter(pk=node.pk).update(state=WorkerNode.State.BANNED)
    assert stored() is None
    WorkerNode.objects.filter(pk=node.pk).update(state=WorkerNode.State.HEALTHY)
    token.banned_at = now
    token.save(update_fields=["banned_at"])
    assert stored() is None
    assert not PoolRollout.objects.filter(campaign=campaign).exists()
    assert Lease.objects.get(lease_id="lease-a").state == Lease.State.ACTIVE
    token.banned_at = None
    token.save(update_fields=["banned_at"])
    result = stored()
    assert result is not None and result.last == 2
    assert Lease.objects.get(lease_id="lease-a").state == Lease.State.SUBMITTED
