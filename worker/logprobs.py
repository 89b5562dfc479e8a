"""Per-token log-probabilities and entropies of completions under a causal LM.

The sequence fed to the model is ``[left-padded prompt | right-padded completion]``:

    input_ids      [B, P + T]
    attention_mask [B, P + T]  (0 on both kinds of padding)
    position_ids   = cumsum(attention_mask) - 1, clamped at 0

which are the position ids transformers' ``generate`` uses for left-padded prompts, so the
learner scores exactly what the sampler produced. Only the last T + 1 positions' logits are
computed (``logits_to_keep``); the logits at position j predict token j + 1. Logits are divided
by the sampling temperature before the softmax, as in TRL, so ratios compare like with like.
"""

from __future__ import annotations

import torch


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # [B, P + T]
    attention_mask: torch.Tensor,  # [B, P + T]
    num_completion_tokens: int,  # T
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns (logp [B, T], entropy [B, T] or None) for the last T tokens of each row."""
    T = num_completion_tokens
    outputs = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=T + 1,
        use_cache=False,
    )
    logits = outputs.logits[:, :-1, :].float() / temperature  # [B, T, V]: predictions of the last T tokens
    targets = input_ids[:, -T:]  # [B, T]
    log_softmax = torch.log_softmax(logits, dim=-1)  # [B, T, V]
    logp = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(log_softmax.exp() * log_softmax).sum(-1)  # [B, T]
    return logp, entropy
