"""Per-token log-probabilities and entropies of completions under a causal LM.

The sequence fed to the model is ``[left-padded prompt | right-padded completion]``:

    input_ids      [B, P + T]
    attention_mask [B, P + T]  (0 on both kinds of padding)
    position_ids   = cumsum(attention_mask) - 1, clamped at 0

which are the position ids transformers' ``generate`` uses for left-padded prompts, so the
learner scores exactly what the sampler produced.

Shared prefix: when every row starts with the same L tokens (reasoning-gym's system turn and the
user header: about 95 of a tiny model's ~120 tokens per row), they can be given once as
``prefix_ids [1, L]``; ``input_ids``/``attention_mask`` then hold only the rest of each row,
laid out as above. The prefix runs once (batch 1, with gradients when enabled), its key/value
cache is repeated over the B rows, and the rows attend to it as if it were theirs: the same
positions, the same attention, the same log-probs (a test checks against full rows), at about
(P + T - L) / (P + T) of the compute. Only the last T + 1 positions' logits are
computed (``logits_to_keep``); the logits at position j predict token j + 1. Logits are divided
by the sampling temperature before the softmax, as in TRL, so ratios compare like with like.
"""

from __future__ import annotations

import torch


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def common_prefix_length(rows: list[list[int]]) -> int:
    """Length of the longest token prefix shared by every row."""
    if not rows:
        return 0
    first = rows[0]
    length = min(len(row) for row in rows)
    for row in rows[1:]:
        i = 0
        while i < length and row[i] == first[i]:
            i += 1
        length = i
    return length


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # [B, P + T]  (the rows after the shared prefix, if one is given)
    attention_mask: torch.Tensor,  # [B, P + T]
    num_completion_tokens: int,  # T
    temperature: float = 1.0,
    with_entropy: bool = False,
    prefix_ids: torch.Tensor | None = None,  # [1, L]: tokens every row starts with
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns (logp [B, T], entropy [B, T] or None) for the last T tokens of each row."""
    T = num_completion_tokens
    B = input_ids.shape[0]
    if prefix_ids is None:
        outputs = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            logits_to_keep=T + 1,
            use_cache=False,
        )
    else:
        L = prefix_ids.shape[1]
        cache = model(input_ids=prefix_ids, use_cache=True).past_key_values  # positions 0..L-1
        cache.batch_repeat_interleave(B)  # [1, ...] -> [B, ...]; gradients flow back to the prefix
        full_mask = torch.cat([attention_mask.new_ones((B, L)), attention_mask], dim=1)  # [B, L + P + T]
        outputs = model(
            input_ids=input_ids,
            attention_mask=full_mask,
            position_ids=position_ids_from_mask(full_mask)[:, L:],
            past_key_values=cache,
            logits_to_keep=T + 1,
            use_cache=True,
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
