"""The campaign's evaluation questions: reserved (never a training question, not even by the random
numbers reasoning-gym draws them from), fresh at every evaluation, the same for every node; the
cadence; and the verifier's score."""

from __future__ import annotations

import pytest

from worker.shared.campaign import CampaignConfig, cpu_demo_config, sapo_table_config
from worker.shared.config import stable_seed
from worker.shared.evaluation import (
    EVAL_SEED_BASE,
    MAX_EVAL_QUESTIONS,
    eval_index,
    eval_refs,
    eval_rounds,
    is_eval_ref,
    score_answers,
)
from worker.shared.paired import control_stream, extra_refs, round_refs
from worker.shared.questions import DATASET_SIZE, PRESETS, question, ref_at


def test_cadence_every_n_rounds_and_the_last():
    assert eval_rounds(10, 40) == [9, 19, 29, 39]
    assert eval_rounds(10, 25) == [9, 19, 24]
    assert eval_rounds(10, 5) == [4]
    assert eval_rounds(0, 40) == []
    for every, rounds in ((10, 40), (10, 25), (3, 7), (1, 4), (10, 5)):
        due = eval_rounds(every, rounds)
        assert [eval_index(every, rounds, r) for r in due] == list(range(len(due)))
        assert all(eval_index(every, rounds, r) is None for r in range(rounds + 2) if r not in due)


def test_evaluations_share_no_question_and_every_node_gets_the_same_set():
    mix = PRESETS["cpu"]
    sets = [eval_refs(mix, 0, index, 64) for index in range(5)]
    assert sets[0] == eval_refs(mix, 0, 0, 64)  # one set per evaluation, whoever asks
    assert all(len(s) == 64 * len(mix.names) for s in sets)
    seen: set = set()
    for refs in sets:
        keys = {(r.task, r.seed + r.index) for r in refs}  # what reasoning-gym draws an entry from
        assert len(keys) == len(refs) and not keys & seen
        seen |= keys
    # another campaign seed, another set
    assert {(r.task, r.seed, r.index) for r in eval_refs(mix, 1, 0, 64)}.isdisjoint(
        {(r.task, r.seed, r.index) for r in sets[0]}
    )


def test_no_evaluation_question_is_ever_a_training_question():
    """Every training stream's questions have seed + index below EVAL_SEED_BASE, every evaluation
    question's at or above it; and the texts of a sample differ as well."""
    mix = PRESETS["cpu"]
    training = [ref_at(mix, 0, position) for position in range(2000)]
    for seed in range(3):
        training += round_refs(mix, control_stream(seed), 5, 8)
        training += extra_refs(mix, control_stream(seed), 5, 0, 8)
    assert not any(is_eval_ref(ref) for ref in training)
    assert (2**31 - 1) + DATASET_SIZE < EVAL_SEED_BASE  # the largest training seed + index
    evaluation = [ref for index in range(3) for ref in eval_refs(mix, stable_seed("any"), index, 64)]
    assert all(is_eval_ref(ref) and ref.seed + ref.index >= EVAL_SEED_BASE for ref in evaluation)


def test_the_score_is_the_verifiers_exact_rate_and_mean_reward():
    mix = PRESETS["cpu"]
    refs = eval_refs(mix, 0, 0, 2)
    truths = [question(mix, ref).answer for ref in refs]
    completions = [
        f"<answer>{truths[0]}</answer>",
        "<answer>wrong</answer>",
        "no tags",
        f"<answer>{truths[3]}</answer>",
    ]
    score = score_answers(mix, refs, completions)
    assert (score.n, score.correct, score.accuracy) == (4, 2, 0.5)
    assert 0.5 <= score.reward < 1.0  # full marks twice, partial credit at most for the rest
    weighted = score_answers(mix, refs, completions, format_weight=0.5)
    assert weighted.reward == pytest.approx(score.reward + 0.5 * 3 / 4)


def test_settings_bound_an_evaluation_to_what_one_message_holds():
    assert cpu_demo_config().eval_every >= 1
    problems = CampaignConfig(eval_questions=600).problems()
    assert [p.path for p in problems] == ["eval_questions"]
    assert CampaignConfig(eval_questions=600, eval_every=0).problems() == []
    assert sapo_table_config().eval_questions * 9 <= MAX_EVAL_QUESTIONS  # the presets are valid
