"""Rewards: reasoning-gym's verifier applied to the last ``<answer>...</answer>`` of a completion.

    answer  = text inside the last <answer>...</answer>, stripped (reasoning-gym's extract_answer)
    reward  = score_answer(answer, entry) + format_weight * [answer tags present]

``score_answer`` is in [0, 1] and may give partial credit (reasoning-gym gives containment
credit, so an unstripped ``"6 "`` would score 0.5 for ``"6"``: answers are always stripped).
A completion without answer tags scores 0 from the task (``score_answer(None) == 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

from reasoning_gym.utils import extract_answer as rg_extract_answer

from worker.shared.questions import QuestionRef, TaskMix, answer_scorer


def extract_answer(completion: str) -> str | None:
    return rg_extract_answer(completion, tag_name="answer", strip=True)


@dataclass(frozen=True)
class RewardConfig:
    format_weight: float = 0.0  # weight of the format reward (1 when answer tags are present)

    def to_json(self) -> dict:
        return {"format_weight": self.format_weight}


def rewards(
    mix: TaskMix, ref: QuestionRef, completions: list[str], config: RewardConfig = RewardConfig()
) -> list[float]:
    """The rewards of a group's completions: the one verification, used by the agent (its claim)
    and the coordinator (the verified rewards it stores and trains others on)."""
    score = answer_scorer(mix, ref)
    out = []
    for completion in completions:
        answer = extract_answer(completion)
        out.append(score(answer) + config.format_weight * (1.0 if answer is not None else 0.0))
    return out


def reward(mix: TaskMix, ref: QuestionRef, completion: str, config: RewardConfig = RewardConfig()) -> float:
    return rewards(mix, ref, [completion], config)[0]
