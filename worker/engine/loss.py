"""The GRPO/DAPO policy loss, with TRL's definitions (``loss_type="dapo"``).

Per completion token t of sequence i, with advantage A_i (one value per completion):

    ratio_it   = exp(logp_it - old_logp_it)
    loss_it    = -min(ratio_it * A_i, clip(ratio_it, 1 - eps_low, 1 + eps_high) * A_i)
    kl_it      = exp(ref_logp_it - logp_it) - (ref_logp_it - logp_it) - 1        (only if beta > 0)
    loss       = sum_{i,t} mask_it * (loss_it + beta * kl_it) / N

N is the number of completion tokens in the *whole* batch (DAPO's token-level aggregation), so
every token weighs the same whatever its sequence's length; with micro-batches, each micro-batch
divides by the same N and their gradients add up to the full batch's.

Sampler/learner mismatch (TRL's ``vllm_importance_sampling_correction``): when the tokens were
sampled by another implementation of the policy (vLLM's bf16 kernels), its log-probs
sampler_logp_it differ from the learner's old_logp_it even with the same weights, and each
token's loss is weighted by a truncated importance-sampling ratio (:func:`importance_weights`):

    rho_it  = exp(old_logp_it - sampler_logp_it)                   "token_*" modes
    rho_i   = exp(sum_t mask_it (old_logp_it - sampler_logp_it))   "sequence_*" modes
    w       = min(rho, cap)  ("*_truncate")   or   rho if rho <= cap else 0  ("*_mask")
    loss_it <- w * loss_it      (before the KL term is added, as TRL does)

Clip metrics (TRL's names): a token is low-clipped when ratio < 1 - eps_low and A < 0, high-
clipped when ratio > 1 + eps_high and A > 0, i.e. when the clip actually removes its gradient.

Shapes: B sequences, T completion positions (right-padded; mask marks real tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worker.shared.config import IS_MODES


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, to backpropagate
    low_clipped: torch.Tensor  # scalar: number of low-clipped tokens
    high_clipped: torch.Tensor  # scalar: number of high-clipped tokens
    kl_sum: torch.Tensor  # scalar: sum of per-token KL over masked tokens (0 when beta == 0)


def grpo_loss(
    logp: torch.Tensor,  # [B, T] log-probs of the taken tokens under the current policy
    old_logp: torch.Tensor,  # [B, T] under the policy that produced the batch (detached)
    advantages: torch.Tensor,  # [B]
    mask: torch.Tensor,  # [B, T] 1 for completion tokens that count, 0 for padding
    num_tokens: int | torch.Tensor,  # N: masked tokens in the whole batch (>= 1)
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,  # [B, T], required when beta > 0
    is_weights: torch.Tensor | None = None,  # [B, T] or [B, 1]: importance_weights(), detached
) -> LossOutput:
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(1)  # [B, 1]
    ratio = torch.exp(logp - old_logp.detach())  # [B, T]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.min(unclipped, clipped)  # [B, T]
    if is_weights is not None:
        per_token = per_token * is_weights.detach().to(logp.dtype)

    kl_sum = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp (log-probs under the reference model)")
        delta = ref_logp.detach() - logp
        per_token_kl = torch.exp(delta) - delta - 1.0  # [B, T], k3 estimator, >= 0
        per_token = per_token + beta * per_token_kl
        kl_sum = (per_token_kl * mask).sum().detach()

    normaliser = torch.as_tensor(num_tokens, dtype=logp.dtype, device=logp.device).clamp(min=1.0)
    loss = (per_token * mask).sum() / normaliser
    with torch.no_grad():
        low = ((ratio < 1.0 - eps_low) & (adv < 0)).to(logp.dtype)
        high = ((ratio > 1.0 + eps_high) & (adv > 0)).to(logp.dtype)
        low_clipped = (low * mask).sum()
        high_clipped = (high * mask).sum()
    return LossOutput(loss=loss, low_clipped=low_clipped, high_clipped=high_clipped, kl_sum=kl_sum)


def importance_weights(
    old_logp: torch.Tensor,  # [B, T] the learner's log-probs before the update (no gradient)
    sampler_logp: torch.Tensor,  # [B, T] the sampler's log-probs of the same tokens
    mask: torch.Tensor,  # [B, T] tokens that count
    mode: str = "token_truncate",
    cap: float = 3.0,
) -> torch.Tensor:
    """TRL's truncated (or masked) importance-sampling weights, [B, T] for "token_*" modes and
    [B, 1] for "sequence_*"; see the module docstring for the formulas."""
    if mode not in IS_MODES:
        raise ValueError(f"unknown importance sampling mode {mode!r}; choose one of {', '.join(IS_MODES)}")
    diff = (old_logp.detach() - sampler_logp) * mask.to(old_logp.dtype)  # [B, T]
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)  # [B, 1]
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, max=cap)
    return ratio.masked_fill(ratio > cap, 0.0)
