"""The coordinator's websocket protocol against a real ASGI server on a loopback port:
the happy path, and every kind of bad input, each answered with a clear error code and leaving
stored data unchanged except for counters."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import timedelta

import pytest
import websockets
from asgiref.sync import sync_to_async
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.leases import PositionBlocks
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.presence import FLUSH_SECONDS
from swarm_app.coordinator.tokens import create_token, revoke
from tests.coordinator.helpers import (
    G,
    connected,
    expect_error,
    honest_rollouts,
    in_thread,
    run,
    stored_state,
    submit_round,
)
from tests.wsclient import RawSession, frame
from worker.shared.advantages import group_advantages
from worker.shared.protocol import MAX_MESSAGE_BYTES
from worker.shared.questions import TaskMix, ref_at
from worker.shared.rewards import rewards
from worker.shared.rollout import Rollout


def test_a_round_end_to_end_over_the_socket(coordinator, campaign, token):
    mix = campaign.settings.mix

    async def session():
        a, b = await RawSession.open(coordinator), await RawSession.open(coordinator)
        welcome = await a.hello(token, "node-a")
        assert welcome["type"] == "welcome", welcome
        assert welcome["tier"] == "tiny-1m" and welcome["resume_round"] == 0
        assert (await b.hello(token, "node-b"))["type"] == "welcome"
        acks, submitted = {}, {}
        for name, s in (("node-a", a), ("node-b", b)):
            lease = await s.request("lease_request", round=0)
            assert lease["type"] == "lease" and len(lease["questions"]) == 2, lease
            again = await s.request("lease_request", round=0)
            assert again["lease_id"] == lease["lease_id"]  # asking again returns the same lease
            rollouts = honest_rollouts(lease, name, "tiny-1m", mix)
            ack = await s.request(
                "submit", submission_id=f"sub-{name}", lease_id=lease["lease_id"], rollouts=rollouts
            )
            assert ack["type"] == "submit_ack", ack
            assert ack["verified_rewards"] == [r["rewards"] for r in rollouts]
            assert all(r[0] == 1.0 for r in ack["verified_rewards"])
            acks[name] = [reward for r in rollouts for reward in r["rewards"]]
            submitted[name] = (lease["lease_id"], rollouts, ack)
        samples = await a.request("sample_request", round=0, count=5)
        assert samples["type"] == "samples"
        assert {r["agent_id"] for r in samples["rollouts"]} == {"node-b"}  # never its own
        assert len(samples["rollouts"]) == 2  # only two exist: a short answer, not an error
        metrics = await a.request("metrics", round=0, metrics={"reward": 0.99, "loss": 0.1})
        assert metrics["type"] == "metrics_ack"
        # A second report of the round replaces the first; a round without rollouts is refused.
        again = await a.request("metrics", round=0, metrics={"reward": 0.98, "loss": 0.2})
        assert again["type"] == "metrics_ack"
        expect_error(
            await a.request("metrics", round=1, metrics={"loss": 0.1}),
            "invalid_message",
            "no verified rollouts",
        )
        assert (await a.request("heartbeat"))["campaign_state"] == "running"
        await a.close()
        await b.close()
        return acks, submitted

    run_result, submitted = run(session())
    row = RoundMetrics.objects.get(agent="node:node-a", round=0)
    verified = run_result["node-a"]
    assert row.reward == pytest.approx(sum(verified) / len(verified))  # verified, not the claimed 0.99
    assert row.metrics == {"reward": 0.98, "loss": 0.2}
    assert RoundMetrics.objects.filter(agent="node:node-a").count() == 1
    node_a = WorkerNode.objects.get(node_id="node-a")
    assert (node_a.round, node_a.last_reward) == (1, pytest.approx(row.reward))
    assert (row.arm, row.tier, row.node_id, row.campaign_id) == ("swarm", "tiny-1m", node_a.pk, campaign.pk)
    assert PoolRollout.objects.filter(campaign=campaign).count() == 4
    # What was stored is exactly what was submitted, with the coordinator's rewards and
    # advantages, numbered 1..4 in arrival order, under the lease it answered.
    scale = campaign.settings.grpo_config("tiny-1m").scale_rewards
    rows = list(PoolRollout.objects.filter(campaign=campaign).order_by("sequence"))
    assert [row.sequence for row in rows] == [1, 2, 3, 4]
    expected = [(name, *submitted[name]) for name in ("node-a", "node-b")]
    for (name, lease_id, rollouts, ack), pair in zip(expected, (rows[:2], rows[2:]), strict=True):
        lease = Lease.objects.get(lease_id=lease_id)
        assert (lease.state, lease.submission_id) == (Lease.State.SUBMITTED, f"sub-{name}")
        assert lease.ack == {k: v for k, v in ack.items() if k not in ("type", "reply_to")}
        assert WorkerNode.objects.get(node_id=name).accepted_submissions == 1
        for row, sent in zip(pair, rollouts, strict=True):
            rollout = Rollout.from_json(sent)
            rollout.advantages = group_advantages(rollout.rewards, scale)
            assert row.record == rollout.to_json()
            assert (row.rollout_id, row.task, row.question_seed, row.question_index) == (
                rollout.rollout_id,
                *rollout.ref.to_json().values(),
            )
            assert (row.node.node_id, row.lease_id, row.tier, row.round) == (name, lease.pk, "tiny-1m", 0)
            assert row.mean_reward == pytest.approx(rollout.mean_reward)
            assert (row.zero_advantage, row.in_pool) == (rollout.zero_advantage, True)
    # The two leases were given the stream's positions 0..3, from the block of positions this
    # server reserved (leases.PositionBlocks).
    config = campaign.settings
    leased = [
        ref for lease in Lease.objects.filter(campaign=campaign).order_by("pk") for ref in lease.questions
    ]
    assert leased == [ref_at(config.mix, config.seed, position).to_json() for position in range(4)]
    assert Campaign.objects.filter(pk=campaign.pk).values_list(
        "next_question_position", "rollout_sequence"
    ).get() == (config.questions_per_round * PositionBlocks.LEASES, 4)


def test_bad_frames_get_clear_errors_and_change_nothing(ready, campaign):
    before = stored_state(campaign)

    async def session():
        s = await connected(ready)
        expect_error(await s.send_raw("{not json"), "malformed_json", "not valid json")
        expect_error(await s.send_raw("[1, 2]"), "malformed_json", "object")
        expect_error(await s.request("lease_request", round="zero"), "invalid_message", "'round'")
        expect_error(await s.request("lease_request"), "invalid_message", "missing field 'round'")
        expect_error(await s.request("lease_request", round=0, extra=1), "invalid_message", "unknown fields")
        expect_error(await s.request("teleport"), "unknown_type", "teleport")
        expect_error(
            await s.request("metrics", round=0, metrics={"loss": "high"}),
            "invalid_message",
            "expected `float`",
        )
        # Bounded parsing: deep nesting and integers of thousands of digits are refused, not crashed on.
        deep = '{"type": "metrics", "round": 0, "metrics": {"a": ' + "[" * 5000 + "]" * 5000 + "}}"
        expect_error(await s.send_raw(deep), "invalid_message", "field 'metrics[...]'")
        digits = '{"type": "lease_request", "round": ' + "9" * 5000 + "}"
        expect_error(await s.send_raw(digits), "invalid_message", "out of range")
        # Text PostgreSQL cannot store (NUL) is refused at the boundary, in any field.
        expect_error(
            await s.request("metrics", round=0, metrics={"lo\x00ss": 1.0}), "invalid_message", "U+0000"
        )
        nul_hello = await RawSession.open(ready["url"])
        expect_error(
            await nul_hello.hello(ready["token"], "node-nul", client_version="1\x00"),
            "invalid_message",
            "U+0000",
        )
        await nul_hello.close()
        huge = frame("heartbeat")[:-1] + ', "pad": "' + "x" * (MAX_MESSAGE_BYTES + 10) + '"}'
        expect_error(await s.send_raw(huge), "message_too_large", "exceeds")
        # the connection survives every one of them
        assert (await s.request("heartbeat"))["type"] == "heartbeat_ack"
        await s.close()
        fresh = await RawSession.open(ready["url"])
        expect_error(await fresh.request("lease_request", round=0), "not_authenticated", "hello")
        await fresh.close()

    run(session())
    assert stored_state(campaign) == before


def test_bad_and_revoked_tokens_are_refused(ready, campaign):
    async def session(token):
        s = await RawSession.open(ready["url"])
        reply = await s.hello(token, "node-c")
        await s.close()
        return reply

    expect_error(run(session("swt_not-a-real-token")), "invalid_token", "unknown worker token")
    token, secret = create_token(campaign, "to revoke")
    revoke(token)
    expect_error(run(session(secret)), "token_revoked", "revoked")
    assert not WorkerNode.objects.filter(node_id="node-c").exists()


def test_revoking_a_token_ends_its_live_sessions_within_a_second(ready, campaign):
    """Connections that said hello before the revocation are told and closed (4001) at once, on
    the server that holds them (through the channel layer); new hellos are refused."""
    token = WorkerToken.objects.get(campaign=campaign)

    async def session():
        a, b = await connected(ready, "node-a"), await connected(ready, "node-b")
        started = time.monotonic()
        await in_thread(revoke, token)
        ended = []
        for s in (a, b):
            pushed = json.loads(await asyncio.wait_for(s.ws.recv(), timeout=5))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(s.ws.recv(), timeout=5)
            ended.append((pushed, closed.value.rcvd.code, time.monotonic() - started))
        return ended

    ended = run(session())
    print("revoked sessions ended after " + ", ".join(f"{seconds:.3f} s" for _, _, seconds in ended))
    for pushed, code, seconds in ended:
        expect_error(pushed, "token_revoked", "revoked")
        assert code == 4001
        assert seconds < 1.0, f"the session ended {seconds:.2f} s after the revocation"


def test_a_revocation_whose_push_was_lost_still_stops_leases(ready, campaign):
    """Without the channel layer's push (here: the row updated behind the coordinator's back), the
    live connection's next lease request is refused with token_revoked and the socket closed."""

    async def session():
        s = await connected(ready, "node-a")
        await in_thread(WorkerToken.objects.filter(campaign=campaign).update, revoked_at=timezone.now())
        reply = await s.request("lease_request", round=1)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(s.ws.recv(), timeout=5)
        return reply, closed.value.rcvd.code

    reply, code = run(session())
    expect_error(reply, "token_revoked")
    assert code == 4001


def test_submissions_that_lie_or_misdirect_are_rejected(ready, campaign):
    mix = ready["mix"]
    lease_a, lease_b = ready["leases"]["node-a"], ready["leases"]["node-b"]
    before = stored_state(campaign)

    async def session():
        s = await connected(ready)
        # another node's lease
        other = honest_rollouts(lease_b, "node-a", "tiny-1m", mix)
        expect_error(
            await s.request("submit", submission_id="s1", lease_id=lease_b["lease_id"], rollouts=other),
            "lease_not_yours",
        )
        # a false claimed reward
        false = honest_rollouts(lease_a, "node-a", "tiny-1m", mix)
        false[0]["rewards"][1] = 1.0
        expect_error(
            await s.request("submit", submission_id="s2", lease_id=lease_a["lease_id"], rollouts=false),
            "reward_mismatch",
            "claimed 1.0",
        )
        # a swapped ground truth, with rewards consistent with the fake answer
        swapped = honest_rollouts(lease_a, "node-a", "tiny-1m", mix)
        swapped[0]["answer"] = "999999"
        expect_error(
            await s.request("submit", submission_id="s3", lease_id=lease_a["lease_id"], rollouts=swapped),
            "ground_truth_mismatch",
        )
        # rollouts for other questions than the leased ones
        reordered = list(reversed(honest_rollouts(lease_a, "node-a", "tiny-1m", mix)))
        expect_error(
            await s.request("submit", submission_id="s4", lease_id=lease_a["lease_id"], rollouts=reordered),
            "lease_mismatch",
        )
        # token counts no worker of this campaign could have generated (max_new_tokens bounds them)
        inflated = honest_rollouts(lease_a, "node-a", "tiny-1m", mix)
        inflated[0]["completion_tokens"][0] = 10**15
        expect_error(
            await s.request("submit", submission_id="s5", lease_id=lease_a["lease_id"], rollouts=inflated),
            "lease_mismatch",
            "max_new_tokens",
        )
        await s.close()

    run(session())
    assert stored_state(campaign) == before
    node = WorkerNode.objects.get(node_id="node-a")
    assert node.rejected_submissions == 2  # the lie and the swap count; misdirection does not
    assert node.state == WorkerNode.State.HEALTHY  # threshold is 3


def test_replayed_and_late_submissions(ready, campaign):
    mix = ready["mix"]
    lease_a, lease_b = ready["leases"]["node-a"], ready["leases"]["node-b"]

    async def submit_a_twice():
        s = await connected(ready)
        rollouts = honest_rollouts(lease_a, "node-a", "tiny-1m", mix)
        ack = await s.request("submit", submission_id="once", lease_id=lease_a["lease_id"], rollouts=rollouts)
        assert ack["type"] == "submit_ack"
        replay = await s.request(
            "submit", submission_id="once", lease_id=lease_a["lease_id"], rollouts=rollouts
        )
        expect_error(replay, "duplicate_submission", "already accepted")
        assert replay["data"]["verified_rewards"] == ack["verified_rewards"]  # the original ack
        await s.close()

    run(submit_a_twice())
    after_first = stored_state(campaign)
    assert len(after_first["rollouts"]) == 2

    # node-b's lease expires: its late submission is refused, and the questions go to the next asker
    Lease.objects.filter(lease_id=lease_b["lease_id"]).update(deadline=timezone.now() - timedelta(seconds=1))

    async def late_b():
        s = await connected(ready, "node-b")
        rollouts = honest_rollouts(lease_b, "node-b", "tiny-1m", mix)
        reply = await s.request(
            "submit", submission_id="late", lease_id=lease_b["lease_id"], rollouts=rollouts
        )
        expect_error(reply, "lease_expired", "expired")
        await s.close()
        # The coordinator's sweep (presence.py, every FLUSH_SECONDS) puts it back in line.
        deadline = time.monotonic() + 3 * FLUSH_SECONDS
        while await in_thread(lambda: Lease.objects.get(lease_id=lease_b["lease_id"]).state) != "expired":
            assert time.monotonic() < deadline, "the overdue lease was never marked expired"
            await asyncio.sleep(0.2)
        a = await connected(ready, "node-a")
        reissued = await a.request("lease_request", round=1)
        await a.close()
        return reissued

    reissued = run(late_b())
    assert [q["ref"] for q in reissued["questions"]] == [q["ref"] for q in lease_b["questions"]]
    after = stored_state(campaign)
    assert after["rollouts"] == after_first["rollouts"]
    assert Lease.objects.get(lease_id=lease_b["lease_id"]).state == Lease.State.REISSUED


def test_version_negotiation_and_tier_assignment(ready, campaign):
    async def hello(**overrides):
        s = await RawSession.open(ready["url"])
        reply = await s.hello(ready["token"], overrides.pop("node_id", "node-v"), **overrides)
        await s.close()
        return reply

    expect_error(run(hello(protocol_versions=[99])), "unsupported_version", "upgrade")
    tiny_ram = {"device": "cpu", "ram_bytes": 256 * 1024**2}
    expect_error(run(hello(hardware=tiny_ram, node_id="node-small")), "no_tier_fits", "needs 1 GiB RAM")
    expect_error(
        run(hello(preferred_tier="qwen2.5-1.5b", node_id="node-q")), "no_tier_fits", "not in this campaign"
    )
    welcome = run(hello(node_id="node-ok"))
    assert welcome["protocol_version"] == 1
    assert json.loads(json.dumps(welcome["campaign"]["config"]))["group_size"] == G


def test_protocol_2_answers_the_draw_with_the_submit_and_the_next_lease_with_the_metrics(ready, campaign):
    """A worker offering protocol 2 gets it: its submit_ack carries the round's draw of the other
    node's rollouts (J_r = J = 2 here) and its metrics_ack the next round's lease, held for it
    (a lease_request gets the same lease); none while the campaign is paused. A protocol-1
    session of the same campaign gets neither."""
    mix = ready["mix"]

    async def scenario():
        old = await connected(ready, "node-b")  # protocol 1 (tests/wsclient.py's default)
        shared = await submit_round(old, "node-b", mix)
        assert shared["type"] == "submit_ack" and "samples" not in shared
        reported = await old.request("metrics", round=0, metrics={"loss": 0.5})
        assert reported == {"type": "metrics_ack", "reply_to": reported["reply_to"], "round": 0}

        new = await RawSession.open(ready["url"])
        welcome = await new.hello(ready["token"], "node-a", protocol_versions=[1, 2])
        assert welcome["protocol_version"] == 2
        ack = await submit_round(new, "node-a", mix)
        assert ack["type"] == "submit_ack", ack
        drawn = ack["samples"]
        assert len(drawn) == 2 and {r["agent_id"] for r in drawn} == {"node-b"}
        assert {r["rollout_id"] for r in drawn} <= set(shared["rollout_ids"])
        reported = await new.request("metrics", round=0, metrics={"loss": 0.5})
        held = reported["next_lease"]
        assert reported["type"] == "metrics_ack" and held["round"] == 1 and len(held["questions"]) == 2
        asked = await new.request("lease_request", round=1)
        assert asked["lease_id"] == held["lease_id"]
        # A report made again (a resent frame) is answered with the same lease, not a second one.
        repeated = await new.request("metrics", round=0, metrics={"loss": 0.4})
        assert repeated["next_lease"]["lease_id"] == held["lease_id"]
        leased = Lease.objects.filter(node__node_id="node-a", round=1)
        assert await sync_to_async(leased.count)() == 1
        await submit_round(new, "node-a", mix, round=1)

        await sync_to_async(Campaign.objects.filter(pk=campaign.pk).update)(state=Campaign.State.PAUSED)
        paused = await new.request("metrics", round=1, metrics={"loss": 0.5})
        assert paused["type"] == "metrics_ack" and "next_lease" not in paused
        await old.close()
        await new.close()

    run(scenario())


def test_concurrent_submissions_of_one_lease_store_it_once(ready, campaign):
    """Two connections of one node race to submit the same lease: one ack, one duplicate."""
    mix = ready["mix"]
    lease_a = ready["leases"]["node-a"]

    async def race():
        first, second = await connected(ready), await connected(ready)
        replies = await asyncio.gather(
            *(
                s.request(
                    "submit",
                    submission_id=f"race-{i}",
                    lease_id=lease_a["lease_id"],
                    rollouts=honest_rollouts(lease_a, "node-a", "tiny-1m", mix),
                )
                for i, s in enumerate((first, second))
            )
        )
        await first.close()
        await second.close()
        return replies

    replies = run(race())
    assert sorted(r["type"] for r in replies) == ["error", "submit_ack"], replies
    assert next(r for r in replies if r["type"] == "error")["code"] == "duplicate_submission"
    assert PoolRollout.objects.filter(campaign=campaign).count() == 2
    # On PostgreSQL the loser took its pool numbers before it lost the claim: they are skipped.
    assert Campaign.objects.get(pk=campaign.pk).rollout_sequence in (2, 4)
    assert WorkerNode.objects.get(node_id="node-a").accepted_submissions == 1


def test_concurrent_first_hellos_of_one_node_register_it_once(ready, campaign):
    """Many connections say hello for one never-seen node id at the same moment (a volunteer's
    worker restarted while its old sockets linger, or a client retrying): every hello is
    welcomed, and exactly one node exists (the one-node-per-campaign constraint never surfaces
    as internal_error)."""
    connections = 12

    async def race():
        sessions = [await RawSession.open(ready["url"]) for _ in range(connections)]
        replies = await asyncio.gather(*(s.hello(ready["token"], "node-fresh") for s in sessions))
        for s in sessions:
            await s.close()
        return replies

    replies = run(race())
    assert [r["type"] for r in replies] == ["welcome"] * connections, replies
    assert {r["node_id"] for r in replies} == {"node-fresh"}
    assert WorkerNode.objects.filter(campaign=campaign, node_id="node-fresh").count() == 1


def test_coordinator_pool_records_match_the_worker_definition():
    """The coordinator's faster pool records equal Rollout.to_json (the scoring is one function,
    worker.shared.rewards.rewards, on both sides)."""
    from swarm_app.coordinator.storage.records import pool_record
    from worker.shared.questions import TaskSpec, preset, question, ref_at
    from worker.shared.rollout import Behaviour

    mixes = [preset("cpu"), TaskMix((TaskSpec("basic_arithmetic"), TaskSpec("propositional_logic")))]
    for mix in mixes:
        for position in range(6):
            ref = ref_at(mix, 7, position)
            q = question(mix, ref)
            answer = q.answer or q.metadata.get("example_answer", "x")
            completions = [
                f"<think>t</think><answer>{answer}</answer>",
                f"<answer> {answer} </answer>",
                f"<answer>{answer}0</answer>",
                "no tags at all",
                "<answer></answer>",
            ]
            rollout = Rollout(
                ref=ref,
                question=q.question,
                answer=q.answer,
                metadata=q.metadata,
                completions=completions,
                rewards=rewards(mix, ref, completions),
                advantages=[0.0] * len(completions),
                agent_id="a",
                tier="tiny-1m",
                round=position,
                completion_tokens=[1] * len(completions),
                truncated=[False] * len(completions),
            )
            assert pool_record(rollout) == rollout.to_json()
            assert json.dumps(pool_record(rollout)) == json.dumps(rollout.to_json())
            rollout.behaviour = Behaviour(
                prompt_ids=[1], completion_ids=[[2]] * len(completions), logp=[[-0.5]] * len(completions)
            )
            rollout.schema_version = 2
            assert json.dumps(pool_record(rollout)) == json.dumps(rollout.to_json())


def test_internal_errors_log_one_traceback_a_minute_per_connection(caplog, monkeypatch):
    """A client repeating an input that fails unexpectedly gets internal_error each time, but the
    log holds one traceback per minute of them, not one per frame (both websockets use this)."""
    from swarm_app.core import limits

    unexpected = limits.UnexpectedErrorLog(logging.getLogger("swarm.test"), "worker message")
    clock = [1000.0]
    monkeypatch.setattr(limits.time, "monotonic", lambda: clock[0])
    caplog.set_level("ERROR", logger="swarm.test")
    for _ in range(200):
        try:
            raise RuntimeError("a bug")
        except RuntimeError:
            unexpected.exception()
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
    clock[0] += limits.UNEXPECTED_LOG_SECONDS
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        unexpected.exception()
    assert len(caplog.records) == 2 and "201 on this connection" in caplog.records[1].getMessage()
