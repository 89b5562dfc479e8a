"""Group-relative advantages, as TRL's GRPOTrainer computes them.

For one question with rewards r_1..r_G:

    A_g = r_g - mean(r)                               scale_rewards = "none"  (Dr. GRPO)
    A_g = (r_g - mean(r)) / (std(r) + eps)            scale_rewards = "group" (GRPO; TRL default)

with std the unbiased (Bessel-corrected) standard deviation and eps = 1e-4, matching TRL's
``nanstd`` and constant. A group whose rewards are all equal gets A = 0 everywhere in both
modes: it carries no learning signal.
"""

from __future__ import annotations

import math
from typing import Literal

ScaleRewards = Literal["group", "none"]
EPS = 1e-4


def group_advantages(rewards: list[float], scale_rewards: ScaleRewards = "group") -> list[float]:
    if scale_rewards not in ("group", "none"):
        raise ValueError(f"scale_rewards must be 'group' or 'none', got {scale_rewards!r}")
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if scale_rewards == "none":
        return centred
    if len(rewards) == 1:
        return [0.0]
    std = math.sqrt(sum(c * c for c in centred) / (len(rewards) - 1))
    return [c / (std + EPS) for c in centred]


def reward_std(rewards: list[float]) -> float:
    """Unbiased standard deviation (TRL's ``reward_std``); 0 for fewer than two values."""
    if len(rewards) < 2:
        return 0.0
    mean = sum(rewards) / len(rewards)
    return math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))


def zero_advantage(rewards: list[float]) -> bool:
    """True when all G rewards are equal (or there are none): the group carries no GRPO
    learning signal (every advantage is 0)."""
    return max(rewards) - min(rewards) <= 1e-9 if rewards else True
