"""The learner's memory: what one training step keeps on the device, and micro-batches that fit.

A step holds, besides the weights, three things whose size the learner controls:

    state        = P x (4 grads + 8 Adam moments)                     fp32, created at the first step
                 + P x 2                                              bf16 copies of the weights under
                                                                      autocast (kept for backward)
    activations  = tokens x bytes_per_token                           tokens = rows x padded length
    logit chunk  = C x V x LOGIT_CHUNK_COPIES x 4                     C positions' fp32 logits at a time

and, once backward is done, the optimizer's update holds the gradients, the moments and two
temporaries the size of the largest parameter tensor (the embedding; AdamW's square root of
its second moment and the denominator made from it): the learner's AdamW runs with
``foreach=False``. torch's default on CUDA, the multi-tensor update, takes the square root of
all second moments into one new list, P x 4 bytes: 5.8 GiB for 1.5B where the per-tensor
update needs 1.7 (tests/worker/engine/test_memory.py measures the learner's on CPU).

P parameters, V vocabulary, C = ``chunk_tokens`` (worker/engine/logprobs.py never holds more
than C positions' logits). Per token and decoder layer, a Qwen2 layer (hidden H, FFN width F)
keeps for backward about ``10 H + 4 F + 3 K`` values (K = kv_heads x head_dim): the residual
stream, the norms, q/k/v, the attention output, gate, up, SiLU(gate), their product
(measured on CPU with saved-tensor hooks, per token: 1.38 MB for the Qwen2.5-0.5B shape in
pure bf16 and 1.59 MB under bf16 autocast with fp32 weights; 2.90 and 3.33 MB for 1.5B;
tests/worker/engine/test_memory.py checks the estimate against such a measurement). A value
takes 2.5 bytes under autocast and the weights' own size without it: 4 on the cards without
bf16 (T4, V100), which train in plain fp32. With gradient checkpointing a layer keeps only its
input (H values) and one layer's full activations exist at a time during backward.

Micro-batches are planned under MAX_BUDGET_SHARE (90%) of the free memory, not all of it: the
estimate does not see the allocator's fragmentation (reserved beyond allocated) or, beside a
vLLM engine, its CUDA-graph pool and non-torch memory.

:func:`plan_learner` turns a byte budget (the device's free memory) into a token budget per
micro-batch and decides whether gradient checkpointing is needed; :func:`pack_micro_batches`
packs rows sorted by length under that budget. All of it is pure arithmetic: no torch, so
the device check (bench/gpu_check.py) and the tests can plan for a 24 GB or 80 GB card on a CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MIB = 1024**2
GIB = 1024**3

# Values kept for backward per token and layer, in units of H and F (see the module docstring).
ACT_HIDDEN_COPIES = 10
ACT_FFN_COPIES = 4
ACT_KV_COPIES = 3  # keys and values (before and after the rotary embedding), in units of kv_heads x head_dim
# Mixed precision keeps the residual stream and the norms' outputs in fp32 (4 bytes) while the
# matmuls' inputs and outputs are bf16: measured 2.34 bytes a value on average (0.5B and 1.5B
# shapes), where pure bf16 takes 2; 2.5 leaves a margin.
MIXED_BYTES_PER_VALUE = 2.5
# fp32 copies of a chunk's logits alive at once: the upcast, the division by the temperature,
# log_softmax, its exp for the entropy, and the gradient's two in backward.
LOGIT_CHUNK_COPIES = 6
DEFAULT_CHUNK_TOKENS = 256  # x 151,936 x 4 bytes x 6 copies = 0.9 GiB for Qwen
# Allocator fragmentation and temporaries the estimate does not count.
SAFETY_FACTOR = 1.25
# Without checkpointing a micro-batch must hold at least this many of the longest rows; below
# that, checkpointing (about a third more compute) beats a step of one-row micro-batches.
MIN_ROWS_WITHOUT_CHECKPOINTING = 4
# Gradients (fp32) + AdamW's two moments (fp32) + autocast's bf16 weight copies; without
# autocast gradients and moments take the weights' dtype (3 values per parameter).
STATE_BYTES_PER_PARAM_MIXED = 4 + 8 + 2
# Temporaries of the per-tensor AdamW update, in units of the largest tensor (measured on CPU).
OPTIMIZER_TEMPORARY_COPIES = 2
# The share of the free memory a step plans to use (see the module docstring).
MAX_BUDGET_SHARE = 0.9
# The row a tier's minimum VRAM must train (worker/shared/tiers.py): 200 prompt + 1,024
# completion tokens, the device check's long case.
MINIMUM_ROW_TOKENS = 1224
# The CUDA context and kernels (not counted by torch's allocator) and the margin the learner
# keeps back from the free memory it plans with (worker/engine/trainer.py).
CUDA_CONTEXT_BYTES = GIB // 2
DEVICE_MARGIN_BYTES = GIB // 2


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that set its training memory."""

    hidden: int  # H
    intermediate: int  # F
    layers: int  # L
    heads: int
    kv_heads: int
    vocab: int  # V
    tied_embeddings: bool = False

    @property
    def params(self) -> int:
        head_dim = self.hidden // self.heads
        attention = self.hidden * self.hidden * 2 + self.hidden * self.kv_heads * head_dim * 2
        attention += self.hidden + 2 * self.kv_heads * head_dim  # q, k, v biases (Qwen2)
        ffn = 3 * self.hidden * self.intermediate
        per_layer = attention + ffn + 2 * self.hidden  # two RMSNorm weights
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embeddings + self.hidden

    @property
    def largest_tensor(self) -> int:
        """Parameters of the largest weight tensor: the embedding (or the FFN's, were it larger)."""
        return max(self.vocab * self.hidden, self.hidden * self.intermediate)

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        """From a transformers config (Qwen2Config or anything with the same field names)."""
        return cls(
            hidden=config.hidden_size,
            intermediate=config.intermediate_size,
            layers=config.num_hidden_layers,
            heads=config.num_attention_heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            vocab=config.vocab_size,
            tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        )

    def to_qwen2_config(self) -> dict[str, Any]:
        """Keyword arguments of a Qwen2Config with this shape (bench/gpu_check.py builds from it)."""
        return {
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied_embeddings,
        }


# Qwen2.5-0.5B-Instruct and -1.5B-Instruct (their config.json).
QWEN25_0_5B = ModelShape(896, 4864, 24, 14, 2, 151936, tied_embeddings=True)
QWEN25_1_5B = ModelShape(1536, 8960, 28, 12, 2, 151936, tied_embeddings=True)


def activation_bytes_per_token(
    shape: ModelShape, *, mixed: bool, checkpointing: bool, weight_bytes: int = 4
) -> int:
    """Bytes kept for backward per token of a micro-batch (all layers), before the safety factor.

    Without checkpointing: L x (10 H + 4 F + 3 K) x b, with b = 2.5 bytes a value under mixed
    precision and otherwise ``weight_bytes`` (the weights' dtype: 4 in fp32, 2 in pure bf16).
    With checkpointing: the L layer inputs (H values each, in the residual stream's dtype: 4
    bytes mixed, else the weights') plus one layer's full set, recomputed in backward.
    """
    kv = shape.kv_heads * (shape.hidden // shape.heads)
    per_layer = ACT_HIDDEN_COPIES * shape.hidden + ACT_FFN_COPIES * shape.intermediate + ACT_KV_COPIES * kv
    value = MIXED_BYTES_PER_VALUE if mixed else weight_bytes
    if not checkpointing:
        return math.ceil(shape.layers * per_layer * value)
    residual = 4 if mixed else weight_bytes
    return math.ceil(shape.layers * shape.hidden * residual + per_layer * value)


def logit_chunk_bytes(shape: ModelShape, chunk_tokens: int) -> int:
    return chunk_tokens * shape.vocab * 4 * LOGIT_CHUNK_COPIES


def state_bytes(shape: ModelShape, *, mixed: bool, weight_bytes: int = 4) -> int:
    """Gradients, AdamW moments and (mixed) autocast's weight copies: not the weights themselves."""
    return shape.params * (STATE_BYTES_PER_PARAM_MIXED if mixed else 3 * weight_bytes)


def optimizer_step_bytes(shape: ModelShape, *, weight_bytes: int = 4, moments_allocated: bool = False) -> int:
    """What ``optimizer.step()`` holds beyond the weights: gradients, AdamW's moments (unless they
    exist already) and the per-tensor update's temporaries (``foreach=False``: two of the largest
    tensor). The master weights are ``weight_bytes`` a value (fp32 under autocast too)."""
    moments = 0 if moments_allocated else 2 * weight_bytes
    temporaries = OPTIMIZER_TEMPORARY_COPIES * shape.largest_tensor * weight_bytes
    return shape.params * (weight_bytes + moments) + temporaries


@dataclass(frozen=True)
class LearnerPlan:
    """How the learner trains within ``budget_bytes``; see :func:`plan_learner`."""

    budget_bytes: int  # what the step may allocate beyond the weights (the device's free memory)
    token_budget: int  # padded tokens (rows x longest row) per micro-batch
    gradient_checkpointing: bool
    chunk_tokens: int
    mixed: bool
    bytes_per_token: int  # activations per token, safety factor included
    fixed_bytes: int  # state + logit chunk
    optimizer_bytes: int  # what optimizer.step() holds (optimizer_step_bytes)

    @property
    def usable_bytes(self) -> int:
        """The share of the budget micro-batches and the optimizer step are planned under."""
        return int(self.budget_bytes * MAX_BUDGET_SHARE)

    def peak_bytes(self, rows: int, length: int) -> int:
        """Estimated peak of a micro-batch of ``rows`` rows padded to ``length`` tokens."""
        return self.fixed_bytes + rows * length * self.bytes_per_token

    def note(self) -> str:
        return (
            f"learner: {self.token_budget} tokens per micro-batch in {self.usable_bytes / GIB:.1f} GiB"
            f" ({MAX_BUDGET_SHARE:.0%} of {self.budget_bytes / GIB:.1f} GiB free;"
            f" {self.bytes_per_token / MIB:.2f} MiB per token"
            + (", gradient checkpointing" if self.gradient_checkpointing else "")
            + (", bf16 autocast" if self.mixed else "")
            + ")"
        )


def emulated_budget(shape: ModelShape, vram_bytes: int, engine_bytes: int) -> int:
    """What the learner would find free on a card of ``vram_bytes`` once the engine has taken
    ``engine_bytes`` and the fp32 weights are loaded, less its margin: the budget a step on
    such a card plans with (tests and bench/gpu_check.py emulate cards with it)."""
    return vram_bytes - engine_bytes - CUDA_CONTEXT_BYTES - 4 * shape.params - DEVICE_MARGIN_BYTES


class LearnerDoesNotFit(ValueError):
    """Not even one row of the longest sequence fits the budget, checkpointing included."""


def plan_learner(
    shape: ModelShape,
    budget_bytes: int,
    longest_row: int,
    *,
    mixed: bool,
    gradient_checkpointing: str = "auto",
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    optimizer_state_allocated: bool = False,
    weight_bytes: int = 4,
) -> LearnerPlan:
    """A token budget per micro-batch whose estimated peak stays under MAX_BUDGET_SHARE of
    ``budget_bytes``.

    ``budget_bytes`` is what a step may still allocate (grads, Adam moments, activations);
    ``longest_row`` the longest prompt + completion of the batch. ``gradient_checkpointing``:
    "on", "off", or "auto" (on when a micro-batch without it would hold fewer than
    MIN_ROWS_WITHOUT_CHECKPOINTING of the longest rows). ``optimizer_state_allocated``: AdamW's
    moments exist already (after the first step), so the budget no longer has to hold them.
    ``weight_bytes``: the weights' element size (the master weights' under autocast).
    Raises :class:`LearnerDoesNotFit`.
    """
    if gradient_checkpointing not in ("auto", "on", "off"):
        raise ValueError("gradient_checkpointing must be 'auto', 'on' or 'off'")
    fixed = state_bytes(shape, mixed=mixed, weight_bytes=weight_bytes) + logit_chunk_bytes(
        shape, chunk_tokens
    )
    if optimizer_state_allocated:
        fixed -= shape.params * 2 * weight_bytes
    optimizer = optimizer_step_bytes(
        shape, weight_bytes=weight_bytes, moments_allocated=optimizer_state_allocated
    )

    def plan(checkpointing: bool) -> LearnerPlan:
        per_token = math.ceil(
            activation_bytes_per_token(
                shape, mixed=mixed, checkpointing=checkpointing, weight_bytes=weight_bytes
            )
            * SAFETY_FACTOR
        )
        usable = int(budget_bytes * MAX_BUDGET_SHARE)
        tokens = max(0, (usable - fixed) // per_token)
        return LearnerPlan(
            budget_bytes, int(tokens), checkpointing, chunk_tokens, mixed, per_token, fixed, optimizer
        )

    if gradient_checkpointing == "on":
        chosen = plan(True)
    elif gradient_checkpointing == "off":
        chosen = plan(False)
    else:
        chosen = plan(False)
        if chosen.token_budget < MIN_ROWS_WITHOUT_CHECKPOINTING * longest_row:
            chosen = plan(True)
    usable = f"{chosen.usable_bytes / GIB:.1f} GiB usable ({MAX_BUDGET_SHARE:.0%} of {budget_bytes / GIB:.1f} free)"
    if chosen.optimizer_bytes > chosen.usable_bytes:
        raise LearnerDoesNotFit(
            f"the optimizer step needs {chosen.optimizer_bytes / GIB:.1f} GiB (gradients, AdamW's "
            f"moments and its temporary), {usable}"
        )
    if chosen.token_budget < longest_row:
        raise LearnerDoesNotFit(
            f"a row of {longest_row} tokens needs {chosen.peak_bytes(1, longest_row) / GIB:.1f} GiB, {usable}"
            + ("" if chosen.gradient_checkpointing else " (gradient checkpointing is off)")
        )
    return chosen


def minimum_vram_bytes(
    shape: ModelShape, longest_row: int = MINIMUM_ROW_TOKENS, engine_bytes: int = 0
) -> int:
    """The smallest card (total memory) on which :func:`plan_learner` plans a step of one row of
    ``longest_row`` tokens under bf16 autocast, beside an engine of ``engine_bytes``: the same
    formula as the plan, solved for the card (the tiers' ``min_vram_bytes`` come from it)."""
    overhead = emulated_budget(shape, 0, engine_bytes)  # negative: what the card loses before a step
    plan = plan_learner(shape, 1 << 60, longest_row, mixed=True, gradient_checkpointing="on")
    needed = max(plan.optimizer_bytes, plan.peak_bytes(1, longest_row))
    return math.ceil(needed / MAX_BUDGET_SHARE) - overhead


def pack_micro_batches(lengths: Sequence[int], token_budget: int | None, max_rows: int) -> list[list[int]]:
    """Indices of rows grouped into micro-batches, rows sorted by length, each group's
    rows x longest-length within ``token_budget`` (None: no limit) and at most ``max_rows``.

    Sorting packs similar lengths together (less padding); with no token budget the groups are
    consecutive runs of ``max_rows`` sorted rows, as before the budget existed.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for index in order:
        rows, longest = len(current) + 1, lengths[index]  # sorted: the newcomer is the longest
        fits = token_budget is None or rows * longest <= token_budget
        if current and (rows > max_rows or not fits):
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups
