"""Credit comes from verified work only (swarm_app/volunteers/credit.py): counters moved by the
submission and pool-draw transactions of a real coordinator, on the test database (PostgreSQL's
statements or the ORM, by mode).

Each test was seen to fail with the code it guards broken: credit counted before the checks
(rejected, inflated, replayed, duplicate), the claim's condition dropped (a racing duplicate),
the allowance dropped (draws asked again and again), the banned guard dropped, and banned nodes
left in the rankings.
"""

from __future__ import annotations

import msgspec
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from swarm_app.coordinator.models import PoolRollout, WorkerNode
from swarm_app.coordinator.storage import store
from swarm_app.volunteers import credit, tokens
from swarm_app.volunteers.models import Volunteer
from tests.coordinator.helpers import expect_error, honest_rollouts, in_thread, run, submit_round
from tests.wsclient import RawSession
from worker.shared.rollout import Rollout


def counters(node_id: str) -> tuple[int, int, int, int]:
    node = WorkerNode.objects.select_related("helpfulness").get(node_id=node_id)
    return (node.accepted_submissions, node.accepted_rollouts, *credit.helpfulness(node))


async def joined(url: str, token: str, name: str) -> RawSession:
    s = await RawSession.open(url)
    assert (await s.hello(token, name))["type"] == "welcome"
    return s


def test_an_accepted_round_earns_its_verified_groups_and_the_round(coordinator, campaign, token):
    async def scenario():
        a = await joined(coordinator, token, "node-a")
        assert (await submit_round(a, "node-a", campaign.settings.mix))["type"] == "submit_ack"
        await a.close()

    run(scenario())
    # questions_per_round=2: two verified groups, one round, nothing drawn yet.
    assert counters("node-a") == (1, 2, 0, 0)
    node = WorkerNode.objects.get(node_id="node-a")
    assert credit.credit_of(node) == 3


def test_rejected_and_inflated_submissions_earn_nothing(coordinator, campaign, token):
    mix = campaign.settings.mix

    def wrong_question(records):
        records[0]["question"] = "What is 1 + 1?"
        return records

    def inflated_rewards(records):
        for record in records:
            record["rewards"] = [1.0] * len(record["rewards"])
        return records

    def extra_group(records):
        return [*records, dict(records[0], rollout_id=records[0]["rollout_id"] + "x")]

    async def scenario():
        a = await joined(coordinator, token, "node-a")
        lease = await a.request("lease_request", round=0)
        records = honest_rollouts(lease, "node-a", "tiny-1m", mix)
        for n, (edit, code) in enumerate(
            [
                (wrong_question, "ground_truth_mismatch"),
                (inflated_rewards, "reward_mismatch"),
                (extra_group, "lease_mismatch"),
            ]
        ):
            fresh = [dict(r) for r in records]
            reply = await a.request(
                "submit", submission_id=f"bad-{n}", lease_id=lease["lease_id"], rollouts=edit(fresh)
            )
            expect_error(reply, code)
        await a.close()

    run(scenario())
    assert counters("node-a") == (0, 0, 0, 0)
    assert WorkerNode.objects.get(node_id="node-a").rejected_submissions == 2


def test_duplicate_and_replayed_submissions_earn_nothing(coordinator, campaign, token):
    mix = campaign.settings.mix

    async def scenario():
        a = await joined(coordinator, token, "node-a")
        lease = await a.request("lease_request", round=0)
        records = honest_rollouts(lease, "node-a", "tiny-1m", mix)
        ack = await a.request("submit", submission_id="s0", lease_id=lease["lease_id"], rollouts=records)
        assert ack["type"] == "submit_ack", ack
        # The same submission again, and the same rollouts under a new submission id.
        expect_error(
            await a.request("submit", submission_id="s0", lease_id=lease["lease_id"], rollouts=records),
            "duplicate_submission",
        )
        expect_error(
            await a.request("submit", submission_id="s0b", lease_id=lease["lease_id"], rollouts=records),
            "duplicate_submission",
        )
        # Round 0's rollouts replayed into round 1's lease.
        next_lease = await a.request("lease_request", round=1)
        expect_error(
            await a.request("submit", submission_id="s1", lease_id=next_lease["lease_id"], rollouts=records),
            "lease_mismatch",
        )
        # Another node replaying them into its own lease.
        b = await joined(coordinator, token, "node-b")
        b_lease = await b.request("lease_request", round=0)
        expect_error(
            await b.request("submit", submission_id="b0", lease_id=b_lease["lease_id"], rollouts=records),
            "lease_mismatch",
        )
        await a.close()
        await b.close()

    run(scenario())
    assert counters("node-a") == (1, 2, 0, 0)
    assert counters("node-b") == (0, 0, 0, 0)


def test_a_racing_duplicate_that_loses_the_claim_earns_nothing(transactional_db, campaign, token):
    """Two connections of one node submitting the same lease at once: both pass the checks, one
    claims the lease; the other's store writes nothing, its counters included."""
    from swarm_app.coordinator.leases import issue_lease
    from swarm_app.coordinator.tokens import authenticate

    node = WorkerNode.objects.create(
        node_id="node-a", campaign=campaign, token=authenticate(token), tier="tiny-1m"
    )
    lease = msgspec.to_builtins(issue_lease(node, 0))
    records = honest_rollouts(lease, "node-a", "tiny-1m", campaign.settings.mix)
    rollouts = [Rollout.from_json(r) for r in records]
    ack = {"submission_id": "s0", "verified_rewards": [r.rewards for r in rollouts]}
    lease_id, now = lease["lease_id"], timezone.now()
    assert store().store_submission(node, lease_id, 0, "s0", ack, rollouts, 2, now) is not None
    # The loser read the lease as active too; its store claims nothing and counts nothing.
    for r in rollouts:
        r.rollout_id += "-again"
    assert store().store_submission(node, lease_id, 0, "s0-again", ack, rollouts, 2, now) is None
    assert counters("node-a") == (1, 2, 0, 0)
    assert PoolRollout.objects.filter(node=node).count() == 2


def test_draws_credit_the_drawn_groups_nodes_up_to_the_drawers_round(coordinator, campaign, token):
    mix = campaign.settings.mix

    async def scenario():
        a = await joined(coordinator, token, "node-a")
        b = await joined(coordinator, token, "node-b")
        for round in (0, 1):
            assert (await submit_round(a, "node-a", mix, round=round))["type"] == "submit_ack"
        # node-b has no accepted round yet: its draw is answered but credits nobody.
        assert len((await b.request("sample_request", round=0, count=2))["rollouts"]) == 2
        assert (await in_thread(counters, "node-a"))[2:] == (0, 0)
        assert (await submit_round(b, "node-b", mix))["type"] == "submit_ack"
        # Its round's J is 2: a draw of all 4 of node-a's groups credits 2 of them ...
        drawn = (await b.request("sample_request", round=0, count=4))["rollouts"]
        assert len(drawn) == 4 and {r["agent_id"] for r in drawn} == {"node-a"}
        # ... and asking again and again credits nobody more.
        for _ in range(3):
            assert len((await b.request("sample_request", round=0, count=2))["rollouts"]) == 2
        await a.close()
        await b.close()
        return drawn

    drawn = run(scenario())
    # honest_rollouts are half right, half wrong: every group has a non-zero advantage.
    assert all(any(x != 0 for x in r["advantages"]) for r in drawn)
    assert counters("node-a") == (2, 4, 2, 2)
    assert counters("node-b") == (1, 2, 0, 0)  # nobody drew node-b's groups


@pytest.fixture
def owned_token(campaign, volunteer) -> str:
    return tokens.create(volunteer.user, campaign, "laptop")[1]


def test_a_banned_nodes_credit_is_frozen_and_hidden(coordinator, campaign, token, owned_token, volunteer):
    mix = campaign.settings.mix

    def lie(records):
        for record in records:
            record["rewards"] = [1.0] * len(record["rewards"])
        return records

    async def scenario():
        liar = await joined(coordinator, owned_token, "liar")
        honest = await joined(coordinator, token, "honest")
        assert (await submit_round(liar, "liar", mix))["type"] == "submit_ack"
        assert (await submit_round(honest, "honest", mix))["type"] == "submit_ack"
        # The honest node draws the liar's groups: credit the liar earned before its ban.
        await honest.request("sample_request", round=0, count=2)
        earned = await in_thread(counters, "liar")
        assert earned == (1, 2, 2, 2)
        lease = await liar.request("lease_request", round=1)
        for n in range(campaign.settings.ban_threshold):
            records = lie(honest_rollouts(lease, "liar", "tiny-1m", mix))
            reply = await liar.request(
                "submit", submission_id=f"lie-{n}", lease_id=lease["lease_id"], rollouts=records
            )
            assert reply["type"] == "error", reply
        await liar.close()
        # A draw that read the pool just before the ban committed (its groups still in the
        # window): the banned node's counters do not move.
        state = await in_thread(lambda: WorkerNode.objects.get(node_id="liar").state)
        assert state == WorkerNode.State.BANNED
        await in_thread(lambda: PoolRollout.objects.filter(node__node_id="liar").update(in_pool=True))
        assert (await submit_round(honest, "honest", mix, round=1))["type"] == "submit_ack"
        drawn = (await honest.request("sample_request", round=1, count=2))["rollouts"]
        assert {r["agent_id"] for r in drawn} == {"liar"}
        await honest.close()
        return earned

    earned = run(scenario())
    assert counters("liar") == earned  # frozen
    # Hidden: in no ranking, no total; its page is not public.
    assert not credit.node_ranking(campaign.pk).filter(node_id="liar").exists()
    assert list(credit.volunteer_ranking(campaign.pk)) == []
    assert credit.volunteer_credit(volunteer.user_id) == 0
    assert credit.node_ranking(campaign.pk).filter(node_id="honest").exists()


def test_a_volunteers_credit_adds_up_their_nodes(coordinator, campaign, owned_token, volunteer):
    mix = campaign.settings.mix
    other = Volunteer.objects.create(
        user=get_user_model().objects.create_user("bob", password="x-pw-1234567"), display_name="Bob"
    )
    other_token = tokens.create(other.user, campaign, "desktop")[1]

    async def scenario():
        sessions = [(await joined(coordinator, owned_token, name), name) for name in ("ada-1", "ada-2")] + [
            (await joined(coordinator, other_token, "bob-1"), "bob-1")
        ]
        for s, name in sessions:
            assert (await submit_round(s, name, mix))["type"] == "submit_ack"
            await s.close()

    run(scenario())
    ranking = list(credit.volunteer_ranking(campaign.pk))
    assert [(row["display_name"], row["total"], row["nodes"], row["rounds"]) for row in ranking] == [
        ("Ada L", 6, 2, 2),
        ("Bob", 3, 1, 1),
    ]
    assert credit.volunteer_credit(volunteer.user_id) == 6
