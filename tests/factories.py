"""Campaign settings shared by the tests that run real tiny-model rounds."""

from __future__ import annotations

from typing import Any

from worker.shared.campaign import CampaignConfig


def tiny_campaign_config(rounds: int, max_new_tokens: int, **overrides: Any) -> CampaignConfig:
    """tiny-1m, G = 4, 4 questions, I = J = 2: a round takes well under a second on one core."""
    return CampaignConfig(
        tiers=["tiny-1m"],
        group_size=4,
        questions_per_round=4,
        num_local=2,
        num_external=2,
        rounds=rounds,
        max_new_tokens=max_new_tokens,
        **overrides,
    ).validate()
