"""The engine's GRPO loss (worker.engine.loss), against hand computations."""

from __future__ import annotations

import pytest
import torch

from worker.engine.loss import grpo_loss


def test_loss_matches_hand_computation_with_clipped_tokens():
    # Three sequences, two positions. Ratios: seq 0 (A=+1) 1.5 (above 1+0.28: high-clipped) and
    # 1.0; seq 1 (A=-1) 0.5 (below 1-0.2: low-clipped) and 1.1; seq 2 (A=0) one real token.
    ratios = torch.tensor([[1.5, 1.0], [0.5, 1.1], [0.7, 1.0]])
    old_logp = torch.log(torch.tensor([[0.2, 0.3], [0.4, 0.5], [0.6, 0.7]]))
    logp = (old_logp + torch.log(ratios)).requires_grad_(True)
    advantages = torch.tensor([1.0, -1.0, 0.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    out = grpo_loss(logp, old_logp, advantages, mask, num_tokens=5, eps_low=0.2, eps_high=0.28)

    # per token: -min(r*A, clip(r)*A) = -1.28, -1.0, +0.8, +1.1, 0 -> sum -0.38 over N = 5 tokens
    assert out.loss.item() == pytest.approx(-0.38 / 5, abs=1e-6)
    assert out.high_clipped.item() == 1
    assert out.low_clipped.item() == 1
    out.loss.backward()
    # d loss / d logp = -r*A/N on unclipped tokens, 0 where the clip removed the gradient
    expected = torch.tensor([[0.0, -1.0 / 5], [0.0, 1.1 / 5], [0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=0)


def test_loss_with_unit_ratio_is_advantage_weighted_likelihood_and_kl_is_nonnegative():
    logp = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_(True)
    out = grpo_loss(logp, logp.detach(), torch.tensor([2.0]), torch.ones(1, 2), num_tokens=2)
    assert out.loss.item() == pytest.approx(-2.0)  # -(1*2 + 1*2)/2
    ref = torch.log(torch.tensor([[0.4, 0.3]]))
    with_kl = grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), 2, beta=0.1, ref_logp=ref)
    delta = ref - logp.detach()
    kl = (torch.exp(delta) - delta - 1).sum()
    assert with_kl.kl_sum.item() == pytest.approx(kl.item(), abs=1e-6)
    assert with_kl.loss.item() == pytest.approx(0.1 * kl.item() / 2, abs=1e-6)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), 2, beta=0.1)
