"""One GRPO/DAPO optimizer update on a batch of completions (see worker/engine/loss.py for the loss).

The trainer takes :class:`TrainSample` s (prompt ids, completion ids, one advantage each) that
the agent built from I local and J external rollouts; external ones were re-tokenised with this
model's tokenizer, so every sample is scored under this node's own policy.

With ``num_iterations`` = mu > 1, the batch is reused for mu optimizer steps and the ratio
compares against the log-probs taken before the first step (``old_logp``), so the clip can
act; with mu = 1 the ratio is exactly 1 and only the advantage-weighted log-likelihood remains
(as in TRL, ``old_logp = logp.detach()``).

Samples that carry the sampler's own log-probs (``sampler_logp``: vLLM's, for local rollouts)
are weighted by TRL's truncated importance-sampling ratio exp(old_logp - sampler_logp), capped
(``vllm_importance_sampling_*`` in GRPOConfig); the others (transformers' samples, which the
learner's module itself produced, and external rollouts without the correction below) get weight 1.

Off-policy external rollouts (opt-in, ``external_importance_sampling_correction``; the record
carries them, worker/shared/rollout.py's Behaviour): an external sample that carries its
generator's per-token log-probs (``behaviour_logp``) is weighted by
min(exp(old_logp - behaviour_logp), ``external_importance_sampling_clip_max``), truncated
importance sampling from the generator's policy to this one; its statistics are the
``sampling/external_*`` metrics.

``grad_norm`` is the total gradient norm *before* clipping (what ``clip_grad_norm_`` returns and
TRL/transformers log); ``grad_norm_clipped`` is the fraction of the step's mu updates whose
norm exceeded ``max_grad_norm`` and so were scaled down.

Memory (worker/engine/memory.py): on a CUDA device the learner trains fp32 master weights under
bf16 autocast, packs micro-batches under a token budget derived from the device's free memory
before each step, and turns gradient checkpointing on when that budget needs it (which turns
the shared-prefix path off: it needs the key/value cache that checkpointing disables).
Without a budget (CPU) micro-batches are ``micro_batch_size`` rows, as they always were.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from dataclasses import dataclass

import torch

from worker.engine.logprobs import common_prefix_length, completion_logprobs
from worker.engine.loss import grpo_loss, importance_weights
from worker.engine.memory import (
    DEFAULT_CHUNK_TOKENS,
    DEVICE_MARGIN_BYTES,
    GIB,
    LearnerPlan,
    ModelShape,
    pack_micro_batches,
    plan_learner,
)
from worker.engine.policy import default_autocast_dtype
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
    sampler_logp: list[float] | None = None  # the sampler's log-prob of each completion token
    # an external sample's generator's log-prob of each completion token (off-policy correction)
    behaviour_logp: list[float] | None = None


@dataclass
class _MicroBatch:
    input_ids: torch.Tensor  # [b, P + T]
    attention_mask: torch.Tensor  # [b, P + T]
    completion_mask: torch.Tensor  # [b, T]  tokens that count in the loss
    advantages: torch.Tensor  # [b]
    num_completion_tokens: int  # T
    prefix_ids: torch.Tensor | None = None  # [1, L]: tokens every row's prompt starts with, run once
    sampler_logp: torch.Tensor | None = None  # [b, T]: the sampler's log-probs (0 where none)
    has_sampler: torch.Tensor | None = None  # [b] bool: rows whose sampler log-probs are known
    behaviour_logp: torch.Tensor | None = None  # [b, T]: external generators' log-probs (0 where none)
    has_behaviour: torch.Tensor | None = None  # [b] bool
    old_logp: torch.Tensor | None = None  # [b, T]
    ref_logp: torch.Tensor | None = None  # [b, T]
    is_weights: torch.Tensor | None = None  # [b, T] or [b, 1]


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
    sampler_logp = torch.zeros((b, T), dtype=torch.float32)
    has_sampler = torch.zeros(b, dtype=torch.bool)
    behaviour_logp = torch.zeros((b, T), dtype=torch.float32)
    has_behaviour = torch.zeros(b, dtype=torch.bool)
    for i, s in enumerate(samples):
        p, t = len(s.prompt_ids), len(s.completion_ids)
        input_ids[i, P - p : P] = torch.tensor(s.prompt_ids)
        attention_mask[i, P - p : P] = 1
        if t:
            input_ids[i, P : P + t] = torch.tensor(s.completion_ids)
            attention_mask[i, P : P + t] = 1
            if not (mask_truncated and s.truncated):
                completion_mask[i, :t] = 1.0
        if s.sampler_logp is not None:
            if len(s.sampler_logp) != t:
                raise ValueError(f"{len(s.sampler_logp)} sampler log-probs for {t} completion tokens")
            sampler_logp[i, :t] = torch.tensor(s.sampler_logp, dtype=torch.float32)
            has_sampler[i] = True
        if s.behaviour_logp is not None:
            if len(s.behaviour_logp) != t:
                raise ValueError(f"{len(s.behaviour_logp)} behaviour log-probs for {t} completion tokens")
            behaviour_logp[i, :t] = torch.tensor(s.behaviour_logp, dtype=torch.float32)
            has_behaviour[i] = True
    any_sampler = bool(has_sampler.any())
    any_behaviour = bool(has_behaviour.any())
    return _MicroBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        completion_mask=completion_mask.to(device),
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
        num_completion_tokens=T,
        prefix_ids=prefix_ids,
        sampler_logp=sampler_logp.to(device) if any_sampler else None,
        has_sampler=has_sampler.to(device) if any_sampler else None,
        behaviour_logp=behaviour_logp.to(device) if any_behaviour else None,
        has_behaviour=has_behaviour.to(device) if any_behaviour else None,
    )


class _SamplerStats:
    """TRL's sampling/* metrics over a step's tokens (or sequences) that carry sampler log-probs.

    ``prefix`` "sampling/" gives TRL's names (``sampling/sampling_logp_difference/mean``,
    ``sampling/importance_sampling_ratio/mean``, ...); "sampling/external_" the same statistics
    of the external correction (``sampling/external_logp_difference/mean``,
    ``sampling/external_importance_sampling_ratio/mean``, ...), which also counts the share of
    ratios the cap truncated (``sampling/external_importance_sampling_truncated``).
    """

    def __init__(self, prefix: str = "sampling/", cap: float | None = None) -> None:
        self.prefix = prefix
        self.cap = cap
        self.diff_sum = self.diff_max = self.diff_count = 0.0
        self.ratio_sum = self.ratio_count = self.truncated = 0.0
        self.ratio_min, self.ratio_max = float("inf"), float("-inf")

    def add(
        self,
        mb: _MicroBatch,
        old_logp: torch.Tensor,
        weights: torch.Tensor,
        logp: torch.Tensor,
        rows: torch.Tensor,
    ) -> None:
        tokens = mb.completion_mask.bool() & rows[:, None]  # [b, T]
        delta = (old_logp.detach() - logp).abs()[tokens]
        if delta.numel():
            self.diff_sum += float(delta.sum())
            self.diff_count += delta.numel()
            self.diff_max = max(self.diff_max, float(delta.max()))
        # token modes: one ratio per counted token; sequence modes: one per row
        ratios = weights[tokens] if weights.shape[1] > 1 else weights[rows, 0]
        if ratios.numel():
            self.ratio_sum += float(ratios.sum())
            self.ratio_count += ratios.numel()
            self.ratio_min = min(self.ratio_min, float(ratios.min()))
            self.ratio_max = max(self.ratio_max, float(ratios.max()))
            if self.cap is not None:
                raw = torch.exp(old_logp.detach() - logp)[tokens]
                self.truncated += float((raw > self.cap).sum())

    def metrics(self) -> dict[str, float]:
        if not self.ratio_count:
            return {}
        diff = "sampling_logp_difference" if self.prefix == "sampling/" else "logp_difference"
        out = {
            f"{self.prefix}{diff}/mean": self.diff_sum / max(self.diff_count, 1.0),
            f"{self.prefix}{diff}/max": self.diff_max,
            f"{self.prefix}importance_sampling_ratio/min": self.ratio_min,
            f"{self.prefix}importance_sampling_ratio/mean": self.ratio_sum / self.ratio_count,
            f"{self.prefix}importance_sampling_ratio/max": self.ratio_max,
        }
        if self.cap is not None:
            out[f"{self.prefix}importance_sampling_truncated"] = self.truncated / self.ratio_count
        return out


class GRPOLearner:
    """Holds the policy, its optimizer and (with beta > 0) a frozen reference model.

    ``memory_budget_bytes``: what a step may allocate beyond the weights; None asks the CUDA
    device for its free memory before each step, and means no budget on other devices.
    ``autocast_dtype``: "auto" (:func:`default_autocast_dtype`), a dtype, or None (off).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: GRPOConfig,
        pad_token_id: int,
        *,
        memory_budget_bytes: int | None = None,
        autocast_dtype: torch.dtype | str | None = "auto",
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    ) -> None:
        self.model = model
        self.config = config
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.autocast_dtype = default_autocast_dtype(model) if autocast_dtype == "auto" else autocast_dtype
        self.memory_budget_bytes = memory_budget_bytes
        self.chunk_tokens = chunk_tokens
        self.plan: LearnerPlan | None = None  # the last step's
        try:
            self.shape: ModelShape | None = ModelShape.from_config(model.config)
        except AttributeError:  # not a transformers decoder config: no memory planning
            self.shape = None
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            betas=config.adam_betas,
            weight_decay=config.weight_decay,
            # one tensor at a time: the default multi-tensor update on CUDA holds a temporary as
            # large as all the weights (worker/engine/memory.py), this one the largest tensor's
            foreach=False,
        )
        self.ref_model = None
        if config.beta != 0.0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)

    # --- memory ----------------------------------------------------------------------------
    def _budget_bytes(self) -> int | None:
        if self.memory_budget_bytes is not None:
            return self.memory_budget_bytes
        if self.device.type != "cuda":
            return None
        free, _ = torch.cuda.mem_get_info(self.device)
        cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return max(0, free + cached - DEVICE_MARGIN_BYTES)

    def plan_step(self, samples: list[TrainSample]) -> LearnerPlan | None:
        """The memory plan of a step on ``samples`` (None without a budget or a known shape)."""
        budget = self._budget_bytes()
        if budget is None or self.shape is None:
            return None
        longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        return plan_learner(
            self.shape,
            budget,
            longest,
            mixed=self.autocast_dtype is not None,
            gradient_checkpointing=self.config.gradient_checkpointing,
            chunk_tokens=self.chunk_tokens,
            optimizer_state_allocated=bool(self.optimizer.state),
            weight_bytes=next(self.model.parameters()).element_size(),
        )

    def _set_checkpointing(self, on: bool) -> None:
        if getattr(self.model, "is_gradient_checkpointing", False) == on:
            return
        if on:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            self.model.gradient_checkpointing_disable()

    def _autocast(self) -> contextlib.AbstractContextManager[object]:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _micro_batches(self, samples: list[TrainSample]) -> list[_MicroBatch]:
        plan = self.plan = self.plan_step(samples)
        checkpointing = (
            plan.gradient_checkpointing if plan is not None else self.config.gradient_checkpointing == "on"
        )
        self._set_checkpointing(checkpointing)
        # Sorting by length packs similar lengths together: less padding, same loss (the sum
        # over tokens does not depend on order).
        groups = pack_micro_batches(
            [len(s.prompt_ids) + len(s.completion_ids) for s in samples],
            plan.token_budget if plan is not None else None,
            self.config.micro_batch_size,
        )
        return [
            collate(
                [samples[i] for i in group],
                self.pad_token_id,
                self.device,
                self.config.mask_truncated_completions,
                share_prefix=not checkpointing,  # the prefix path needs the KV cache
            )
            for group in groups
        ]

    def _logprobs(
        self, model: torch.nn.Module, mb: _MicroBatch, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        with self._autocast():
            return completion_logprobs(
                model,
                mb.input_ids,
                mb.attention_mask,
                mb.num_completion_tokens,
                self.config.temperature,
                with_entropy=with_entropy,
                prefix_ids=mb.prefix_ids,
                # chunks where a budget is planned (a GPU); in one piece otherwise, as before
                chunk_tokens=self.plan.chunk_tokens if self.plan is not None else None,
            )

    def _importance_weights(
        self, mb: _MicroBatch, old_logp: torch.Tensor, stats: _SamplerStats, external: _SamplerStats
    ) -> None:
        cfg = self.config
        weights: torch.Tensor | None = None
        if cfg.vllm_importance_sampling_correction and mb.sampler_logp is not None:
            assert mb.has_sampler is not None
            sampler = importance_weights(
                old_logp,
                mb.sampler_logp,
                mb.completion_mask,
                cfg.vllm_importance_sampling_mode,
                cfg.vllm_importance_sampling_clip_max,
            )
            # rows without sampler log-probs (external, transformers) keep weight 1
            weights = torch.where(mb.has_sampler[:, None], sampler, torch.ones_like(sampler))
            stats.add(mb, old_logp, sampler, mb.sampler_logp, mb.has_sampler)
        if cfg.external_importance_sampling_correction and mb.behaviour_logp is not None:
            assert mb.has_behaviour is not None
            behaviour = importance_weights(
                old_logp,
                mb.behaviour_logp,
                mb.completion_mask,
                "token_truncate",
                cfg.external_importance_sampling_clip_max,
            )
            behaviour = torch.where(mb.has_behaviour[:, None], behaviour, torch.ones_like(behaviour))
            external.add(mb, old_logp, behaviour, mb.behaviour_logp, mb.has_behaviour)
            weights = behaviour if weights is None else weights * behaviour
        if weights is not None:
            mb.is_weights = weights

    @torch.no_grad()
    def score(self, samples: list[TrainSample]) -> list[list[float]]:
        """Each sample's per-token log-probs of its completion under the current policy (no update)."""
        out: list[list[float]] = []
        size = self.config.micro_batch_size
        for start in range(0, len(samples), size):
            chunk = samples[start : start + size]
            mb = collate(chunk, self.pad_token_id, self.device, mask_truncated=False)
            logp, _ = self._logprobs(self.model, mb)
            out += [logp[i, : len(s.completion_ids)].float().tolist() for i, s in enumerate(chunk)]
        return out

    def step(self, samples: list[TrainSample]) -> dict[str, float]:
        """mu optimizer updates on ``samples``; returns TRL-named metrics of the step."""
        cfg = self.config
        start = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        batches = self._micro_batches(samples)
        num_tokens = int(sum(mb.completion_mask.sum().item() for mb in batches))
        if num_tokens == 0:
            return {"step_time": time.perf_counter() - start, "trained": 0.0, "loss": 0.0}

        self.model.train()
        sampler_stats = _SamplerStats()
        external_stats = _SamplerStats("sampling/external_", cfg.external_importance_sampling_clip_max)
        if cfg.num_iterations > 1 or self.ref_model is not None:
            with torch.no_grad():
                for mb in batches:
                    if cfg.num_iterations > 1:
                        mb.old_logp, _ = self._logprobs(self.model, mb)
                        self._importance_weights(mb, mb.old_logp, sampler_stats, external_stats)
                    if self.ref_model is not None:
                        mb.ref_logp, _ = self._logprobs(self.ref_model, mb)

        totals = {
            "loss": 0.0,
            "low": 0.0,
            "high": 0.0,
            "kl": 0.0,
            "entropy": 0.0,
            "grad_norm": 0.0,
            "clipped": 0.0,
        }
        for iteration in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for mb in batches:
                logp, entropy = self._logprobs(self.model, mb, with_entropy=iteration == 0)
                old_logp = mb.old_logp if mb.old_logp is not None else logp.detach()
                if cfg.num_iterations == 1:  # old_logp is this pass's, as in TRL's separate pass
                    self._importance_weights(mb, old_logp, sampler_stats, external_stats)
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
                    is_weights=mb.is_weights,
                )
                out.loss.backward()
                totals["loss"] += out.loss.item()
                totals["low"] += out.low_clipped.item()
                totals["high"] += out.high_clipped.item()
                totals["kl"] += out.kl_sum.item()
                if entropy is not None:
                    totals["entropy"] += (entropy * mb.completion_mask).sum().item()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            totals["grad_norm"] += float(grad_norm)  # the norm before clipping
            totals["clipped"] += float(float(grad_norm) > cfg.max_grad_norm)
            self.optimizer.step()
        # The gradients are not needed until the next step: their memory goes to generation.
        self.optimizer.zero_grad(set_to_none=True)

        iters = cfg.num_iterations
        metrics = {
            "loss": totals["loss"] / iters,
            "entropy": totals["entropy"] / num_tokens,
            "clip_ratio/low_mean": totals["low"] / (num_tokens * iters),
            "clip_ratio/high_mean": totals["high"] / (num_tokens * iters),
            "clip_ratio/region_mean": (totals["low"] + totals["high"]) / (num_tokens * iters),
            "grad_norm": totals["grad_norm"] / iters,
            "grad_norm_clipped": totals["clipped"] / iters,
            "train_tokens": float(num_tokens),
            "micro_batches": float(len(batches)),
            "step_time": time.perf_counter() - start,
            "trained": 1.0,
        }
        if cfg.beta != 0.0:
            metrics["kl"] = totals["kl"] / (num_tokens * iters)
        metrics.update(sampler_stats.metrics())
        metrics.update(external_stats.metrics())
        if self.device.type == "cuda":
            metrics["peak_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / GIB
            # what the allocator held at its peak: allocated plus its cached, fragmented blocks
            metrics["peak_reserved_memory_gib"] = torch.cuda.max_memory_reserved(self.device) / GIB
        return metrics
