"""worker.shared, the torch-free layer: advantages, filters, batch assembly, arms, questions and
task mixes, rewards, the rollout schema, the protocol reference."""

from __future__ import annotations

import json
import math
import random
import re

import pytest

from worker.shared.advantages import group_advantages, reward_std
from worker.shared.arms import controls_for, sapo_table_arms
from worker.shared.questions import (
    PRESETS,
    QuestionRef,
    QuestionStream,
    TaskError,
    TaskMix,
    TaskSpec,
    preset,
    question,
)
from worker.shared.rewards import RewardConfig, extract_answer, reward
from worker.shared.rollout import Behaviour, Rollout, RolloutError
from worker.shared.sampling import assemble_batch, sample_rollouts

# --- advantages ---------------------------------------------------------------------------


def test_group_advantages_match_trl_definitions():
    rewards = [1.0, 0.0, 0.0, 1.0]
    std = math.sqrt(sum((r - 0.5) ** 2 for r in rewards) / 3)  # Bessel-corrected, as TRL's nanstd
    assert group_advantages(rewards, "group") == pytest.approx([(r - 0.5) / (std + 1e-4) for r in rewards])
    assert group_advantages(rewards, "none") == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert group_advantages([0.3, 0.3, 0.3], "group") == [0.0, 0.0, 0.0]
    assert reward_std(rewards) == pytest.approx(std)
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(rewards, "batch")


# --- sampling and batch assembly ----------------------------------------------------------


def make_rollout(agent: str, rewards: list[float], round: int = 0, index: int = 0) -> Rollout:
    return Rollout(
        ref=QuestionRef("chain_sum", 1, index),
        question="q",
        answer="a",
        metadata={},
        completions=["c"] * len(rewards),
        rewards=rewards,
        advantages=group_advantages(rewards),
        agent_id=agent,
        tier="tiny-1m",
        round=round,
        completion_tokens=[1] * len(rewards),
        truncated=[False] * len(rewards),
    )


def test_behaviour_travels_in_a_version_2_record_and_is_checked():
    """The optional off-policy fields: one id and one log-probability per counted token."""
    plain = make_rollout("a", [1.0, 0.0])
    assert "behaviour" not in plain.to_json() and plain.to_json()["schema_version"] == 1
    assert Rollout.from_json({**plain.to_json(), "schema_version": 1}) == plain  # v1 still read
    record = {
        **plain.to_json(),
        "schema_version": 2,
        "completion_tokens": [2, 1],
        "behaviour": {"prompt_ids": [5, 6], "completion_ids": [[7, 8], [9]], "logp": [[-0.5, -1.0], [0.0]]},
    }
    carried = Rollout.from_json(json.loads(json.dumps(record)))
    assert carried.behaviour == Behaviour(
        prompt_ids=[5, 6], completion_ids=[[7, 8], [9]], logp=[[-0.5, -1.0], [0.0]]
    )
    assert carried.to_json() == record
    for broken, words in [
        ({"schema_version": 1}, "needs schema_version 2"),
        ({"behaviour": {**record["behaviour"], "logp": [[-0.5], [0.0]]}}, "behaviour[0]"),
        ({"behaviour": {**record["behaviour"], "logp": [[-0.5, 0.7], [0.0]]}}, "invalid log-probability"),
        ({"behaviour": {**record["behaviour"], "completion_ids": [[7, 8]]}}, "one per completion"),
        ({"behaviour": {**record["behaviour"], "prompt_ids": [-1]}}, "prompt_ids"),
    ]:
        with pytest.raises(RolloutError, match=re.escape(words)):
            Rollout.from_json({**record, **broken})


def test_filters_drop_exactly_the_zero_advantage_groups():
    informative = [make_rollout("a", [1, 0], index=i) for i in range(3)]
    flat = [make_rollout("a", [0, 0], index=10 + i) for i in range(3)] + [make_rollout("a", [1, 1], index=20)]
    rng = random.Random(0)
    assert len(sample_rollouts(informative + flat, 100, "uniform", rng)) == 7
    kept = sample_rollouts(informative + flat, 100, "nonzero_advantage", rng)
    assert sorted(r.ref.index for r in kept) == [0, 1, 2]
    with pytest.raises(ValueError, match="unknown sampling strategy"):
        sample_rollouts(informative, 1, "easiest", rng)


@pytest.mark.parametrize(
    (
        "num_local",
        "num_external",
        "local_strategy",
        "external_strategy",
        "expected_local",
        "expected_external",
    ),
    [
        (8, 0, "uniform", "uniform", 8, 0),
        (4, 4, "uniform", "uniform", 4, 4),
        (2, 6, "uniform", "uniform", 2, 5),  # only 5 external offered: short by 1
        (8, 0, "nonzero_advantage", "uniform", 5, 0),  # 5 of 8 local qualify: short by 3
        (4, 4, "nonzero_advantage", "nonzero_advantage", 4, 2),  # 2 of 5 external qualify
        (6, 2, "uniform", "nonzero_advantage", 6, 2),
    ],
)
def test_batch_composition(
    num_local, num_external, local_strategy, external_strategy, expected_local, expected_external
):
    local = [make_rollout("me", [1, 0], index=i) for i in range(5)] + [
        make_rollout("me", [0, 0], index=5 + i) for i in range(3)
    ]
    external = [make_rollout("other", [0, 1], index=100 + i) for i in range(2)] + [
        make_rollout("other", [1, 1], index=200 + i) for i in range(3)
    ]
    batch, stats = assemble_batch(
        local, external, num_local, num_external, local_strategy, external_strategy, random.Random(1)
    )
    assert stats.local_used == expected_local
    assert stats.external_used == expected_external
    assert sum(r.agent_id == "me" for r in batch) == expected_local
    assert sum(r.agent_id == "other" for r in batch) == expected_external
    metrics = stats.metrics()
    assert metrics["batch/local_shortfall"] == num_local - expected_local
    assert metrics["batch/external_shortfall"] == num_external - expected_external
    total = expected_local + expected_external
    assert metrics["external_fraction"] == pytest.approx(expected_external / total)
    if local_strategy == "nonzero_advantage":
        assert metrics["filtered/local"] == 3
    assert len({r.rollout_id for r in batch}) == len(batch)  # drawn without replacement


def test_arms_of_the_sapo_table_and_their_controls():
    names = [arm.name for arm in sapo_table_arms(8)]
    assert names == ["8/0", "6/2", "4/4", "2/6", "8/0-filtered", "4/4-unfiltered", "4/4-self", "8/0-dyn"]
    arms = {arm.name: arm for arm in sapo_table_arms(8)}
    assert arms["4/4"].external_strategy == "nonzero_advantage"
    assert arms["8/0"].local_strategy == "uniform"
    assert arms["8/0-filtered"].local_strategy == "nonzero_advantage"
    assert arms["4/4-unfiltered"].external_strategy == "uniform"
    assert [c.name for c in controls_for(arms["6/2"])] == ["8/0", "8/0-filtered"]


# --- questions and rewards (real reasoning-gym verifiers) ---------------------------------


def test_questions_regenerate_from_their_reference():
    mix = preset("cpu")
    first = QuestionStream(mix, seed=11).take(6)
    again = [question(mix, q.ref) for q in first]
    assert [(q.question, q.answer) for q in again] == [(q.question, q.answer) for q in first]
    assert {q.ref.task for q in first} <= {"chain_sum", "spell_backward"}
    other = QuestionStream(mix, seed=12).take(6)
    assert [q.question for q in other] != [q.question for q in first]
    assert len(PRESETS["rgym9"].tasks) == 9


def test_task_mix_errors_name_the_problem():
    with pytest.raises(TaskError, match="unknown reasoning-gym task 'no_such_task'"):
        TaskMix((TaskSpec("no_such_task"),))
    with pytest.raises(TaskError, match="weight must be positive"):
        TaskMix((TaskSpec("chain_sum", 0.0),))
    with pytest.raises(TaskError, match="invalid config"):
        TaskMix((TaskSpec("chain_sum", 1.0, {"min_terms": "many"}),)).validate_configs()


@pytest.mark.parametrize("task", ["chain_sum", "spell_backward", "basic_arithmetic", "propositional_logic"])
def test_rewards_from_real_verifiers(task):
    mix = TaskMix((TaskSpec(task),))
    q = QuestionStream(mix, seed=3).take(1)[0]
    answer = q.answer or q.metadata["example_answer"]  # propositional_logic has no single answer
    right = f"<think>easy</think><answer>{answer}</answer>"
    assert reward(mix, q.ref, right) == 1.0
    assert reward(mix, q.ref, f"<answer> {answer} </answer>") == 1.0  # stripped, not partial
    assert reward(mix, q.ref, "no tags here") == 0.0
    assert reward(mix, q.ref, "<answer>") == 0.0
    # the last answer counts
    assert reward(mix, q.ref, f"<answer>{answer}</answer> no, <answer>zzz</answer>") < 1.0
    assert reward(mix, q.ref, "<answer>zzz</answer>", RewardConfig(format_weight=0.5)) == pytest.approx(
        0.5 + reward(mix, q.ref, "<answer>zzz</answer>")
    )


def test_partial_credit_and_extraction():
    mix = preset("cpu")
    q = next(q for q in QuestionStream(mix, seed=5).take(20) if q.ref.task == "chain_sum")
    assert extract_answer(f"<answer> {q.answer}\n</answer>") == q.answer
    # reasoning-gym gives containment credit: the answer inside a longer string scores in (0, 1)
    partial = reward(mix, q.ref, f"<answer>{q.answer} apples</answer>")
    assert 0.0 < partial < 1.0


# --- rollout schema -----------------------------------------------------------------------


def test_rollout_round_trips_and_rejects_bad_records():
    rollout = make_rollout("a", [1.0, 0.0])
    data = rollout.to_json()
    assert Rollout.from_json(data).to_json() == data

    def broken(**changes):
        return {**rollout.to_json(), **changes}

    cases = [
        (broken(schema_version=99), "schema_version"),
        (broken(rewards=[1.0]), "rollout.rewards"),
        (broken(rewards=[1.0, float("nan")]), r"rollout.rewards\[1\]"),
        (broken(completions="text"), "rollout.completions"),
        (
            broken(completions=["x" * 40_000, "y"]),
            r"rollout.completions\[0\]: expected `str` of length <= 32000",
        ),
        (broken(truncated=[0, 1]), "rollout.truncated"),
        (broken(ref={"task": "chain_sum", "seed": 1}), "rollout.ref"),
        (broken(round=-1), "rollout.round"),
        (broken(extra=1), "unknown fields"),
        ({k: v for k, v in rollout.to_json().items() if k != "answer"}, "missing field 'answer'"),
        ("not an object", "expected `object`"),
        (broken(rewards=[True, 0.0]), r"rollout.rewards\[0\]: expected `float`, got `bool`"),
        (broken(metadata={"x": "y" * 70_000}), "rollout.metadata: larger than"),
    ]
    for data, message in cases:
        with pytest.raises(RolloutError, match=message):
            Rollout.from_json(data)


def test_protocol_reference_in_docs_is_generated_from_the_code():
    from pathlib import Path

    from worker.shared.protocol import render_docs

    doc = (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text()
    assert render_docs() in doc, (
        "regenerate: python -m worker.shared.protocol, then paste into docs/protocol.md"
    )


def test_protocol_parse_is_bounded_and_names_the_field():
    """Frames that used to crash the hand-written parser get invalid_message, at a bounded cost."""
    from tests.wsclient import frame as encode
    from worker.shared.protocol import ErrorCode, ProtocolError, parse

    rollout = make_rollout("a", [1.0, 0.0]).to_json()
    rollout["metadata"] = {"x": "__DEEP__"}
    frame = encode("submit", id="s1", submission_id="s", lease_id="l", rollouts=[rollout])
    deep = frame.replace('"__DEEP__"', "[" * 100_000 + "]" * 100_000)
    # (frame, code, words in the message, the request id the error answers)
    cases = [
        (deep, ErrorCode.INVALID_MESSAGE, "nested too deeply", None),  # its id is as deep to read
        (
            '{"type": "lease_request", "id": "r", "round": ' + "7" * 5000 + "}",
            ErrorCode.INVALID_MESSAGE,
            "out of range",
            "r",
        ),
        (
            '{"type": "lease_request", "id": "r", "round": 1.5}',
            ErrorCode.INVALID_MESSAGE,
            "field 'round'",
            "r",
        ),
        ('{"type": "teleport", "id": "r"}', ErrorCode.UNKNOWN_TYPE, "teleport", "r"),
        ('{"type": "heartbeat", "id": "r", "x": 1}', ErrorCode.INVALID_MESSAGE, "unknown fields ['x']", "r"),
        ("[]", ErrorCode.MALFORMED_JSON, "JSON object", None),
        ('{"type": "heartbeat", "id": "r\\u0000"}', ErrorCode.INVALID_MESSAGE, "U+0000", "r\x00"),
        ('{"type": "heartbeat", "id": "\\ud800"}', ErrorCode.MALFORMED_JSON, "not valid JSON", None),
    ]
    for raw, code, words, request_id in cases:
        with pytest.raises(ProtocolError) as caught:
            parse(raw, "worker")
        assert caught.value.code == code, (raw[:60], caught.value.message)
        assert words in caught.value.message, caught.value.message
        assert caught.value.request_id == request_id, raw[:60]
