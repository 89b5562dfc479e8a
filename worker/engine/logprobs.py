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
(P + T - L) / (P + T) of the compute.

Logits: the decoder's hidden states at the T positions that predict the completion (position j
predicts token j + 1) go through the LM head in chunks of ``chunk_tokens`` positions
(:func:`chunked_token_logprobs`) when the learner asks for chunks (it does where it plans a
memory budget: on GPUs), so a micro-batch never holds [B, T, V] logits, whose fp32 copies were
the largest tensors of a step for Qwen's 151,936-token vocabulary. Logits are
divided by the sampling temperature before the softmax, as in TRL, so ratios compare like with like.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from worker.engine.memory import DEFAULT_CHUNK_TOKENS


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
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns (logp [B, T], entropy [B, T] or None) for the last T tokens of each row.

    ``chunk_tokens``: positions whose logits exist at once (see :func:`chunked_token_logprobs`);
    None computes them all at once, as the CPU tiers' small vocabularies can afford.
    """
    T = num_completion_tokens
    B = input_ids.shape[0]
    decoder = model.get_decoder()
    if prefix_ids is None:
        hidden = decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        ).last_hidden_state
    else:
        L = prefix_ids.shape[1]
        cache = decoder(input_ids=prefix_ids, use_cache=True).past_key_values  # positions 0..L-1
        cache.batch_repeat_interleave(B)  # [1, ...] -> [B, ...]; gradients flow back to the prefix
        full_mask = torch.cat([attention_mask.new_ones((B, L)), attention_mask], dim=1)  # [B, L + P + T]
        hidden = decoder(
            input_ids=input_ids,
            attention_mask=full_mask,
            position_ids=position_ids_from_mask(full_mask)[:, L:],
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
    # The hidden state at position j predicts token j + 1: [B, T, H] for the last T tokens.
    predicting = hidden[:, -(T + 1) : -1, :]
    targets = input_ids[:, -T:]  # [B, T]
    logp, entropy = chunked_token_logprobs(
        model.get_output_embeddings(), predicting, targets, temperature, with_entropy, chunk_tokens
    )
    return logp, entropy


def chunked_token_logprobs(
    head: torch.nn.Module,  # the LM head: [..., H] -> [..., V]
    hidden: torch.Tensor,  # [B, T, H]
    targets: torch.Tensor,  # [B, T]
    temperature: float,
    with_entropy: bool,
    chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) and the entropy at each of B x T positions, ``chunk_tokens`` positions at a time.

    For a chunk of C positions: z = head(h).float() / temperature  [C, V],
    logp = log_softmax(z)[target], entropy = -sum_v softmax(z)_v log_softmax(z)_v (no gradient).
    With gradients enabled each chunk runs under activation checkpointing, so backward
    recomputes its logits instead of keeping them: the [B, T, V] logits (and their fp32 copies)
    never exist at once, only C x V at a time (TRL's selective_log_softmax and
    entropy_from_logits loop for the same reason). The price is the LM head's matmul once more
    in backward. ``chunk_tokens=None``: all positions in one piece, without checkpointing.
    """
    B, T, H = hidden.shape
    flat_hidden = hidden.reshape(B * T, H)
    flat_targets = targets.reshape(B * T)
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []

    def chunk_logprobs(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_softmax = torch.log_softmax(head(h).float() / temperature, dim=-1)  # [C, V]
        logp = log_softmax.gather(-1, t.unsqueeze(-1)).squeeze(-1)  # [C]
        with torch.no_grad():
            entropy = -(log_softmax.exp() * log_softmax).sum(-1) if with_entropy else log_softmax.new_empty(0)
        return logp, entropy

    checkpointed = chunk_tokens is not None and torch.is_grad_enabled() and hidden.requires_grad
    size = max(1, chunk_tokens or B * T)
    for start in range(0, B * T, size):
        h = flat_hidden[start : start + size]
        t = flat_targets[start : start + size]
        if checkpointed:
            logp, entropy = checkpoint(chunk_logprobs, h, t, use_reentrant=False)
        else:
            logp, entropy = chunk_logprobs(h, t)
        logps.append(logp)
        entropies.append(entropy)
    logp = torch.cat(logps).reshape(B, T)
    entropy = torch.cat(entropies).reshape(B, T) if with_entropy else None
    return logp, entropy
