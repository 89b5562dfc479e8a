"""One GRPO/DAPO optimizer update on a batch of completions (see worker/engine/loss.py for the loss).

The trainer takes :class:`TrainSample` s (prompt ids, completion ids, one advantage each) that
the agent built from I local and J external rollouts; external ones were re-tokenised with this
model's tokenizer, so every sample is scored under this node's own policy.

With ``num_iterations`` = mu > 1, the batch is reused for mu optimizer steps and the ratio
compares against the log-probs taken before the first step (``old_logp``), so the clip can
act; with mu = 1 the ratio is exactly 1 and only the advantage-weighted log-likelihood remains
(as in TRL, ``old_logp = logp.detach()``).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import torch

from worker.engine.logprobs import common_prefix_length, completion_logprobs
from worker.engine.loss import grpo_loss
from worker.shared.config import GRPOConfig

# A shared prefix shorter than this is not worth a separate forward pass.
MIN_SHARED_PREFIX = 16


@dataclass
class TrainSample:
    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    truncated: bool = False
    external: bool = False


@dataclass
class _MicroBatch:
    input_ids: torch.Tensor  # [b, P + T]
    attention_mask: torch.Tensor  # [b, P + T]
    completion_mask: torch.Tensor  # [b, T]  tokens that count in the loss
    advantages: torch.Tensor  # [b]
    num_completion_tokens: int  # T
    prefix_ids: torch.Tensor | None = None  # [1, L]: tokens every row's prompt starts with, run once
    old_logp: torch.Tensor | None = None  # [b, T]
    ref_logp: torch.Tensor | None = None  # [b, T]


def collate(
    samples: list[TrainSample],
    pad_id: int,
    device: torch.device,
    mask_truncated: bool,
    share_prefix: bool = True,
) -> _MicroBatch:
    """Left-pad prompts and right-pad completions to ``[pad.. prompt | completion ..pad]``.

    With ``share_prefix``, the tokens every prompt starts with (at least MIN_SHARED_PREFIX of
    them; one prompt token per row is always kept in the row) become ``prefix_ids`` and are cut
    from the rows: worker/engine/logprobs.py runs them once per micro-batch.
    """
    prefix_ids = None
    shared = min(
        common_prefix_length([s.prompt_ids for s in samples]),
        min(len(s.prompt_ids) for s in samples) - 1,
    )
    if share_prefix and shared >= MIN_SHARED_PREFIX:
        prefix_ids = torch.tensor([samples[0].prompt_ids[:shared]], device=device)
        samples = [dataclasses.replace(s, prompt_ids=s.prompt_ids[shared:]) for s in samples]
    P = max(len(s.prompt_ids) for s in samples)
    T = max(1, max(len(s.completion_ids) for s in samples))
    b = len(samples)
    input_ids = torch.full((b, P + T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((b, P + T), dtype=torch.long)
    completion_mask = torch.zeros((b, T), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, t = len(s.prompt_ids), len(s.completion_ids)
        input_ids[i, P - p : P] = torch.tensor(s.prompt_ids)
        attention_mask[i, P - p : P] = 1
        if t:
            input_ids[i, P : P + t] = torch.tensor(s.completion_ids)
            attention_mask[i, P : P + t] = 1
            if not (mask_truncated and s.truncated):
                completion_mask[i, :t] = 1.0
    return _MicroBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        completion_mask=completion_mask.to(device),
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
        num_completion_tokens=T,
        prefix_ids=prefix_ids,
    )


class GRPOLearner:
    """Holds the policy, its optimizer and (with beta > 0) a frozen reference model."""

    def __init__(self, model: torch.nn.Module, config: GRPOConfig, pad_token_id: int) -> None:
        self.model = model
        self.config = config
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            betas=config.adam_betas,
            weight_decay=config.weight_decay,
        )
        self.ref_model = None
        if config.beta != 0.0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)

    def _micro_batches(self, samples: list[TrainSample]) -> list[_MicroBatch]:
        size = self.config.micro_batch_size
        # Sorting by length packs similar lengths together: less padding, same loss (the sum
        # over tokens does not depend on order).
        ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
        return [
            collate(
                ordered[i : i + size], self.pad_token_id, self.device, self.config.mask_truncated_completions
            )
            for i in range(0, len(ordered), size)
        ]

    def step(self, samples: list[TrainSample]) -> dict[str, float]:
        """mu optimizer updates on ``samples``; returns TRL-named metrics of the step."""
        cfg = self.config
        start = time.perf_counter()
        batches = self._micro_batches(samples)
        num_tokens = int(sum(mb.completion_mask.sum().item() for mb in batches))
        if num_tokens == 0:
            return {"step_time": time.perf_counter() - start, "trained": 0.0, "loss": 0.0}

        self.model.train()
        if cfg.num_iterations > 1 or self.ref_model is not None:
            with torch.no_grad():
                for mb in batches:
                    if cfg.num_iterations > 1:
                        mb.old_logp, _ = completion_logprobs(
                            self.model,
                            mb.input_ids,
                            mb.attention_mask,
                            mb.num_completion_tokens,
                            cfg.temperature,
                            prefix_ids=mb.prefix_ids,
                        )
                    if self.ref_model is not None:
                        mb.ref_logp, _ = completion_logprobs(
                            self.ref_model,
                            mb.input_ids,
                            mb.attention_mask,
                            mb.num_completion_tokens,
                            cfg.temperature,
                            prefix_ids=mb.prefix_ids,
                        )

        totals = {"loss": 0.0, "low": 0.0, "high": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
        for iteration in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for mb in batches:
                logp, entropy = completion_logprobs(
                    self.model,
                    mb.input_ids,
                    mb.attention_mask,
                    mb.num_completion_tokens,
                    cfg.temperature,
                    with_entropy=iteration == 0,
                    prefix_ids=mb.prefix_ids,
                )
                old_logp = mb.old_logp if mb.old_logp is not None else logp.detach()
                out = grpo_loss(
                    logp,
                    old_logp,
                    mb.advantages,
                    mb.completion_mask,
                    num_tokens,
                    eps_low=cfg.eps_low,
                    eps_high=cfg.eps_high,
                    beta=cfg.beta,
                    ref_logp=mb.ref_logp,
                )
                out.loss.backward()
                totals["loss"] += out.loss.item()
                totals["low"] += out.low_clipped.item()
                totals["high"] += out.high_clipped.item()
                totals["kl"] += out.kl_sum.item()
                if entropy is not None:
                    totals["entropy"] += (entropy * mb.completion_mask).sum().item()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            totals["grad_norm"] += float(grad_norm)
            self.optimizer.step()

        iters = cfg.num_iterations
        metrics = {
            "loss": totals["loss"] / iters,
            "entropy": totals["entropy"] / num_tokens,
            "clip_ratio/low_mean": totals["low"] / (num_tokens * iters),
            "clip_ratio/high_mean": totals["high"] / (num_tokens * iters),
            "clip_ratio/region_mean": (totals["low"] + totals["high"]) / (num_tokens * iters),
            "grad_norm": totals["grad_norm"] / iters,
            "train_tokens": float(num_tokens),
            "step_time": time.perf_counter() - start,
            "trained": 1.0,
        }
        if cfg.beta != 0.0:
            metrics["kl"] = totals["kl"] / (num_tokens * iters)
        return metrics
