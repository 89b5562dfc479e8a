"""Held-out evaluation over the real websocket protocol: two swarm nodes and a control node get the
same fresh questions at each evaluation of the cadence, without answers; the coordinator stores
the verifier's score of their answers (never their claim); every bad submission gets its
documented error and stores nothing."""

from __future__ import annotations

import csv
import io
import urllib.request

import pytest
import reasoning_gym

from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.coordinator.models import Evaluation, Lease
from swarm_app.coordinator.tokens import create_token, renew_control_token
from swarm_app.web import dashboard
from swarm_app.web.api import EVAL_COLUMNS
from tests.coordinator.helpers import honest_rollouts, run, submit_round
from tests.wsclient import RawSession, frame
from worker.shared.campaign import CampaignConfig, ControlsConfig
from worker.shared.evaluation import MAX_EVAL_ANSWER_CHARS, eval_refs, is_eval_ref
from worker.shared.protocol import MAX_MESSAGE_BYTES
from worker.shared.questions import QuestionRef, question
from worker.shared.rewards import extract_answer

EVERY, PER_TASK, ROUNDS = 2, 3, 4  # evaluations after rounds 1 and 3; 3 questions of each of 2 tasks


@pytest.fixture
def campaign(transactional_db) -> Campaign:
    config = CampaignConfig(
        group_size=4,
        questions_per_round=2,
        num_local=2,
        num_external=2,
        rounds=ROUNDS,
        eval_every=EVERY,
        eval_questions=PER_TASK,
        controls=ControlsConfig(isolated=True, filtered=False, seeds=1),
    )
    return Campaign.objects.create(
        name="eval", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )


def answers_for(eval_set: dict, mix, right: int) -> list[dict]:
    """The first ``right`` questions answered with their ground truth, the rest wrongly."""
    answers = []
    for position, item in enumerate(eval_set["questions"]):
        truth = question(mix, QuestionRef.from_json(item["ref"])).answer
        text = f"<answer>{truth}</answer>" if position < right else "<answer>no idea</answer>"
        answers.append({"ref": item["ref"], "completion": text})
    return answers


def independent_score(
    refs: list[dict], completions: list[str], config: CampaignConfig
) -> tuple[float, float]:
    """(accuracy, mean score) from reasoning-gym's own datasets, built here from the refs."""
    scores = []
    for ref, completion in zip(refs, completions, strict=True):
        spec = config.mix.spec(ref["task"])
        dataset = reasoning_gym.create_dataset(ref["task"], seed=ref["seed"], size=10**9, **spec.config)
        scores.append(float(dataset.score_answer(extract_answer(completion), dataset[ref["index"]])))
    return sum(s == 1.0 for s in scores) / len(scores), sum(scores) / len(scores)


async def train_rounds(s: RawSession, node_id: str, mix, rounds: range) -> None:
    for number in rounds:
        assert (await submit_round(s, node_id, mix, number))["type"] == "submit_ack"
        assert (await s.request("metrics", round=number, metrics={"loss": 0.1}))["type"] == "metrics_ack"


async def train_control_rounds(s: RawSession, node_id: str, mix, rounds: range) -> None:
    for number in rounds:
        lease = await s.request("lease_request", round=number)
        records = honest_rollouts(lease, node_id, "tiny-1m", mix)
        ack = await s.request(
            "submit", submission_id=f"c{number}", lease_id=lease["lease_id"], rollouts=records
        )
        assert ack["type"] == "submit_ack", ack
        assert (await s.request("metrics", round=number, metrics={"loss": 0.1}))["type"] == "metrics_ack"


def snapshot(campaign: Campaign) -> list[tuple]:
    return sorted(
        Evaluation.objects.filter(campaign=campaign).values_list(
            "node_id", "round", "eval_id", "submission_id", "n", "correct", "accuracy", "reward", "answers"
        )
    )


def test_every_node_and_control_gets_the_same_fresh_set_and_is_stored_at_the_verified_score(
    coordinator, campaign
):
    config = campaign.settings
    mix = config.mix
    token = create_token(campaign, "t")[1]
    control = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    secret = renew_control_token(control)

    async def scenario() -> dict:
        out: dict = {"sets": {}, "acks": {}}
        nodes = {"node-a": (token, train_rounds), "node-b": (token, train_rounds)}
        nodes["control-0"] = (secret, train_control_rounds)
        for right, (name, (key, train)) in enumerate(nodes.items()):
            s = await RawSession.open(coordinator)
            assert (await s.hello(key, name, protocol_versions=[2]))["type"] == "welcome"
            await train(s, name, mix, range(0, 2))
            not_due = await s.request("eval_request", round=0)  # not a round of the cadence
            assert not_due["code"] == "evaluation_not_due", not_due
            first = await s.request("eval_request", round=1)
            assert first["type"] == "eval_set", first
            again = await s.request("eval_request", round=1)  # asked again: the set it holds
            assert (again["eval_id"], again["questions"]) == (first["eval_id"], first["questions"])
            ack = await s.request(
                "eval_submit",
                submission_id=f"{name}-e1",
                eval_id=first["eval_id"],
                answers=answers_for(first, mix, right + 1),
                claimed_accuracy=1.0,  # a claim above what the answers earn
            )
            assert ack["type"] == "eval_ack", ack
            out["acks"][(name, 1)] = ack
            await train(s, name, mix, range(2, 4))
            second = await s.request("eval_request", round=3)
            assert second["type"] == "eval_set", second
            out["sets"][name] = (first, second)
            await s.close()  # the second set is never answered: missing, not zero
        return out

    result = run(scenario())
    firsts = [result["sets"][name][0] for name in result["sets"]]
    seconds = [result["sets"][name][1] for name in result["sets"]]
    # the same questions for every node and the control at one evaluation, without answers
    assert all(s["questions"] == firsts[0]["questions"] for s in firsts)
    assert all(s["questions"] == seconds[0]["questions"] for s in seconds)
    assert all(set(item) == {"ref", "question"} for item in firsts[0]["questions"])
    expected = [r.to_json() for r in eval_refs(mix, config.seed, 0, PER_TASK)]
    assert [item["ref"] for item in firsts[0]["questions"]] == expected
    assert len(expected) == PER_TASK * len(mix.names)
    # two evaluations share no question, and no evaluation question was ever leased for training
    first_refs = {tuple(item["ref"].values()) for item in firsts[0]["questions"]}
    second_refs = {tuple(item["ref"].values()) for item in seconds[0]["questions"]}
    assert not first_refs & second_refs
    leased = [
        QuestionRef.from_json(ref) for q in Lease.objects.values_list("questions", flat=True) for ref in q
    ]
    assert leased and not any(is_eval_ref(ref) for ref in leased)
    assert not {(r.task, r.seed, r.index) for r in leased} & (first_refs | second_refs)
    # stored at the independent re-scoring of the stored answers, never at the claim
    rows = Evaluation.objects.filter(campaign=campaign).select_related("node")
    assert len(rows) == 6
    for row in rows:
        if row.round == 3:
            assert (row.submission_id, row.accuracy, row.answers) == ("", None, None)
            continue
        accuracy, reward = independent_score(row.questions, row.answers, config)
        assert row.accuracy == pytest.approx(accuracy) and row.reward == pytest.approx(reward)
        assert row.accuracy < 1.0 and row.claimed_accuracy == 1.0
        ack = result["acks"][(row.node.node_id, 1)]
        assert (ack["n"], ack["accuracy"], ack["round"]) == (6, pytest.approx(accuracy), 1)
    arms = {row.node.arm for row in rows}
    assert arms == {"swarm", "isolated"}
    # the dashboard: one swarm counts once (no interval from one unit), the control's seed too
    payload = dashboard.dashboard_payload(campaign)
    held = payload["summary"]["tiny-1m"]["held_out"]
    swarm = [row.accuracy for row in rows if row.round == 1 and row.node.arm == "swarm"]
    assert held["swarm"]["accuracy"] == pytest.approx(sum(swarm) / 2)
    assert (held["swarm"]["n"], held["swarm"]["nodes"], held["swarm"]["low"], held["swarm"]["round"]) == (
        1,
        2,
        None,
        1,
    )
    control = Evaluation.objects.get(round=1, node__arm="isolated")
    assert (held["isolated"]["accuracy"], held["isolated"]["n"]) == (pytest.approx(control.accuracy), 1)
    assert payload["held_out"]["tiny-1m"]["swarm"]["round"] == [1]  # round 3: nobody answered
    # the metrics export: the evaluation after each agent's round, empty elsewhere
    with urllib.request.urlopen(f"{coordinator}/api/campaigns/{campaign.pk}/metrics?format=csv") as response:
        table = list(csv.DictReader(io.StringIO(response.read().decode())))
    assert table and all(set(EVAL_COLUMNS) <= set(row) for row in table)
    scored = {(row["agent"], row["round"]): row["eval/accuracy"] for row in table if row["eval/accuracy"]}
    assert len(scored) == 3 and all(number == "1" for _, number in scored)
    assert sorted(float(v) for v in scored.values()) == sorted(
        row.accuracy for row in rows if row.accuracy is not None
    )


def test_bad_evaluation_submissions_get_their_error_and_store_nothing(coordinator, campaign):
    mix = campaign.settings.mix
    token = create_token(campaign, "t")[1]

    async def scenario() -> dict:
        a = await RawSession.open(coordinator)
        b = await RawSession.open(coordinator)
        await a.hello(token, "node-a")
        await b.hello(token, "node-b")
        await train_rounds(a, "node-a", mix, range(0, 2))
        await train_rounds(b, "node-b", mix, range(0, 2))
        own = await a.request("eval_request", round=1)
        other = await b.request("eval_request", round=1)
        training = await a.request("lease_request", round=2)
        good = answers_for(own, mix, 2)
        errors = {}

        async def submit(session: RawSession, **fields) -> dict:
            return await session.request("eval_submit", **fields)

        # wrong round: a round of the cadence the node has not reached, and one it is past
        errors["ahead"] = await a.request("eval_request", round=3)
        # another node's set
        errors["not_yours"] = await submit(a, submission_id="x1", eval_id=other["eval_id"], answers=good)
        # a set the node was never given
        errors["unknown"] = await submit(a, submission_id="x2", eval_id="f" * 32, answers=good)
        # answers to training questions instead of the set's
        as_training = [{"ref": q["ref"], "completion": "<answer>1</answer>"} for q in training["questions"]]
        errors["training"] = await submit(a, submission_id="x3", eval_id=own["eval_id"], answers=as_training)
        errors["short"] = await submit(a, submission_id="x4", eval_id=own["eval_id"], answers=good[:-1])
        errors["reordered"] = await submit(a, submission_id="x5", eval_id=own["eval_id"], answers=good[::-1])
        # oversized: one answer over its bound, and a frame over the message limit
        long = [dict(good[0], completion="x" * (MAX_EVAL_ANSWER_CHARS + 1)), *good[1:]]
        errors["long_answer"] = await submit(a, submission_id="x6", eval_id=own["eval_id"], answers=long)
        huge = frame("eval_submit", id="big", submission_id="x7", eval_id=own["eval_id"], answers=good)
        errors["huge"] = await a.send_raw(huge + " " * MAX_MESSAGE_BYTES)
        # none of the above stored anything: the set is still open for its one answer
        ok = await submit(a, submission_id="e1", eval_id=own["eval_id"], answers=good)
        # replayed: the same submission, and another try at the same set
        errors["replay"] = await submit(a, submission_id="e1", eval_id=own["eval_id"], answers=good)
        retry = answers_for(own, mix, 6)
        errors["second_try"] = await submit(a, submission_id="e2", eval_id=own["eval_id"], answers=retry)
        errors["request_again"] = await a.request("eval_request", round=1)
        await a.close()
        await b.close()
        return {"errors": errors, "ok": ok}

    result = run(scenario())
    errors = result["errors"]
    expected = {
        "ahead": "evaluation_not_due",
        "not_yours": "lease_not_yours",
        "unknown": "unknown_lease",
        "training": "evaluation_mismatch",
        "short": "evaluation_mismatch",
        "reordered": "evaluation_mismatch",
        "long_answer": "invalid_message",
        "huge": "message_too_large",
        "replay": "duplicate_submission",
        "second_try": "duplicate_submission",
        "request_again": "duplicate_submission",
    }
    assert {name: errors[name]["code"] for name in expected} == expected
    ok = result["ok"]
    assert ok["type"] == "eval_ack" and ok["accuracy"] == pytest.approx(2 / 6)
    # the replays carry the stored ack; the second try did not change the score
    for name in ("replay", "second_try", "request_again"):
        assert errors[name]["data"] == {k: v for k, v in ok.items() if k not in ("type", "reply_to")}
    rows = {row.node.node_id: row for row in Evaluation.objects.select_related("node")}
    assert rows["node-a"].accuracy == pytest.approx(2 / 6) and rows["node-a"].submission_id == "e1"
    assert rows["node-b"].submission_id == "" and rows["node-b"].accuracy is None
    assert len(rows) == 2  # the refused request for round 3 stored no set
    assert rows["node-a"].answers == [
        answer["completion"] for answer in answers_for_stored(rows["node-a"], mix)
    ]


def answers_for_stored(row: Evaluation, mix) -> list[dict]:
    eval_set = {"questions": [{"ref": ref} for ref in row.questions]}
    return answers_for(eval_set, mix, 2)


def test_a_node_past_the_round_cannot_answer_it(coordinator, campaign):
    """An evaluation is of the policy after its round: a node that reported a later round first
    is refused (evaluation_not_due) and nothing is stored."""
    mix = campaign.settings.mix
    token = create_token(campaign, "t")[1]

    async def scenario() -> tuple[dict, dict]:
        s = await RawSession.open(coordinator)
        await s.hello(token, "node-a")
        await train_rounds(s, "node-a", mix, range(0, 2))
        held = await s.request("eval_request", round=1)
        await train_rounds(s, "node-a", mix, range(2, 3))
        late = await s.request(
            "eval_submit", submission_id="late", eval_id=held["eval_id"], answers=answers_for(held, mix, 6)
        )
        await s.close()
        return held, late

    held, late = run(scenario())
    assert held["type"] == "eval_set" and late["code"] == "evaluation_not_due", late
    assert snapshot(campaign) == [
        (row[0], 1, held["eval_id"], "", 6, None, None, None, None) for row in snapshot(campaign)
    ]


def test_a_nodes_evaluations_endpoint_follows_the_pages_visibility(campaign):
    """/api/campaigns/<id>/evaluations?agent=node:<id> (what `swarm-worker export` reads): a public
    campaign's node for anyone, scored evaluations only; a banned node hidden from the public
    (not from staff, nor from the worker holding its token); a private campaign's only to staff
    and to the node's own token; a bad token refused."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from swarm_app.coordinator.models import WorkerNode

    token, secret = create_token(campaign, "t")
    node = WorkerNode.objects.create(
        node_id="n" * 32, campaign=campaign, token=token, tier="tiny-1m", round=4
    )
    for number, accuracy in ((1, 0.5), (3, None)):
        Evaluation.objects.create(
            campaign=campaign,
            node=node,
            round=number,
            eval_id=f"{number:032d}",
            questions=[],
            n=6,
            correct=3 if accuracy else None,
            accuracy=accuracy,
            reward=accuracy,
            submission_id="s" if accuracy else "",
        )
    url = f"/api/campaigns/{campaign.pk}/evaluations"
    anonymous = Client()
    body = anonymous.get(url, {"agent": f"node:{node.node_id}"}).json()
    assert body["campaign"] == campaign.pk and body["name"] == "eval"
    assert [(e["round"], e["n"], e["correct"], e["accuracy"]) for e in body["evaluations"]] == [
        (1, 6, 3, 0.5)
    ]
    assert anonymous.get(url, {"agent": "node:" + "x" * 32}).status_code == 404
    assert anonymous.get(url, {"agent": "control:1"}).status_code == 400
    staff = Client()
    staff.force_login(
        get_user_model().objects.create_user("org", password="pw-for-tests-only", is_staff=True)
    )
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    WorkerNode.objects.filter(pk=node.pk).update(state=WorkerNode.State.BANNED)
    assert anonymous.get(url, {"agent": f"node:{node.node_id}"}).status_code == 404
    assert staff.get(url, {"agent": f"node:{node.node_id}"}).status_code == 200
    WorkerNode.objects.filter(pk=node.pk).update(state=WorkerNode.State.HEALTHY)
    Campaign.objects.filter(pk=campaign.pk).update(public=False)
    assert anonymous.get(url, {"agent": f"node:{node.node_id}"}).status_code == 404
    assert staff.get(url, {"agent": f"node:{node.node_id}"}).status_code == 200
    assert anonymous.get(url, {"agent": f"node:{node.node_id}"}, **bearer).status_code == 200
    refused = anonymous.get(url, {"agent": f"node:{node.node_id}"}, HTTP_AUTHORIZATION="Bearer sw_nonsense")
    assert refused.status_code == 403 and "unknown worker token" in refused.json()["error"]
