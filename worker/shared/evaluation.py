"""Held-out evaluation: a campaign's evaluation questions, its cadence, and how answers are scored.

**Questions reserved for evaluation.** A question is ``(task, dataset seed, index)``
(worker/shared/questions.py), and reasoning-gym draws entry ``index`` of dataset ``seed`` from
``Random(seed + index)``. Every training stream (the campaign's shared stream, a control seed's
paired stream, over-generation's streams) is a :func:`~worker.shared.questions.ref_at` stream,
whose dataset seeds are below 2**31 and whose indices are below ``DATASET_SIZE`` (10**9), so
every training question has ``seed + index < 2**31 + 10**9 < EVAL_SEED_BASE``. An evaluation
question's dataset seed is ``EVAL_SEED_BASE`` plus a 31-bit seed derived from the campaign's
seed and the task (:func:`eval_seed`): its ``seed + index`` is at least ``EVAL_SEED_BASE``, so
no evaluation question is ever a training question, not even by the random numbers it is drawn
from, and no node can be leased one.

**Fresh questions at every evaluation.** The k-th evaluation of a campaign (k = 0, 1, ...: its
:func:`eval_rounds`, in order) takes, for each task of the mix, entries ``k * n .. k * n + n -
1`` of that task's evaluation dataset (n = ``eval_questions``): two evaluations never share a
question, so a node cannot learn the set it is scored on; every node and control of the
campaign gets the same questions at the same evaluation (an arm comparison at one evaluation is
paired on its questions). The price is comparability across evaluations: each draw has its own
difficulty, so a curve moves with the draw as well as with learning. Every arm gets the same
draw, so the difference between arms at one evaluation is free of it (docs/web.md).

**Cadence.** A node is evaluated after training round r (its policy after r + 1 steps) for r in
:func:`eval_rounds`: every ``eval_every`` rounds (r + 1 a multiple of it) and after its last
round; ``eval_every = 0`` turns evaluation off.

**Scoring.** Each question is answered once, greedily (temperature 0), and scored by the
coordinator with the task's verifier (:func:`score_answers`): ``accuracy`` is the share of
answers the verifier gives its full score (1), ``reward`` the mean of the campaign's reward
(worker/shared/rewards.py: partial credit and the format weight included), the training reward's
measure.
"""

from __future__ import annotations

from typing import NamedTuple

from worker.shared.config import stable_seed
from worker.shared.questions import QuestionRef, TaskMix, answer_scorer
from worker.shared.rewards import extract_answer

EVAL_SEED_BASE = 2**32  # above every training question's seed + index (module docstring)
MAX_EVAL_QUESTIONS = 1024  # questions of one evaluation, over every task (sapo-table's 9 x 64 = 576)
MAX_EVAL_ANSWER_CHARS = 2000  # the tail of a completion a node submits (the answer is at its end)


def eval_seed(campaign_seed: int, task: str) -> int:
    """The dataset seed of task ``task``'s evaluation questions in a campaign of seed ``campaign_seed``."""
    return EVAL_SEED_BASE + stable_seed("evaluation", campaign_seed, task)


def eval_rounds(eval_every: int, rounds: int) -> list[int]:
    """The rounds after which a node is evaluated, in order (see the module docstring)."""
    if eval_every < 1:
        return []
    due = list(range(eval_every - 1, rounds, eval_every))
    if not due or due[-1] != rounds - 1:
        due.append(rounds - 1)
    return due


def eval_index(eval_every: int, rounds: int, round: int) -> int | None:
    """Which evaluation (0, 1, ...) follows round ``round``; None when none does."""
    if eval_every < 1 or not 0 <= round < rounds:
        return None
    if (round + 1) % eval_every == 0:
        return (round + 1) // eval_every - 1
    return (rounds - 1) // eval_every if round == rounds - 1 else None


def eval_refs(mix: TaskMix, campaign_seed: int, index: int, per_task: int) -> list[QuestionRef]:
    """The questions of evaluation ``index``: ``per_task`` fresh ones of every task of the mix, task by task."""
    start = index * per_task
    return [
        QuestionRef(task, eval_seed(campaign_seed, task), start + offset)
        for task in mix.names
        for offset in range(per_task)
    ]


def is_eval_ref(ref: QuestionRef) -> bool:
    """Whether ``ref`` lies in the region reserved for evaluation."""
    return ref.seed >= EVAL_SEED_BASE


class Score(NamedTuple):
    """An evaluation's score: ``correct`` answers of ``n`` given the verifier's full score, and
    the sum of their rewards."""

    n: int
    correct: int
    reward_sum: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def reward(self) -> float:
        return self.reward_sum / self.n if self.n else 0.0


def score_answers(
    mix: TaskMix, refs: list[QuestionRef], completions: list[str], format_weight: float = 0.0
) -> Score:
    """Score one completion per question with each task's verifier (see the module docstring)."""
    correct, reward_sum = 0, 0.0
    for ref, completion in zip(refs, completions, strict=True):
        answer = extract_answer(completion)
        score = answer_scorer(mix, ref)(answer)
        correct += score >= 1.0
        reward_sum += score + format_weight * (1.0 if answer is not None else 0.0)
    return Score(len(refs), correct, reward_sum)
