"""The learner's memory (worker/engine/memory.py, logprobs.py, trainer.py) on CPU: chunked
log-probs equal the unchunked ones, the planner's estimates cover what a Qwen-shaped layer
really keeps for backward and keep micro-batches under a budget, and a mixed-precision step
moves every parameter at lr 1e-5 where pure bf16 does not."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from worker.engine.generation.vllm_backend import engine_memory
from worker.engine.logprobs import completion_logprobs
from worker.engine.memory import (
    ACT_FFN_COPIES,
    ACT_HIDDEN_COPIES,
    ACT_KV_COPIES,
    GIB,
    MAX_BUDGET_SHARE,
    MINIMUM_ROW_TOKENS,
    QWEN25_0_5B,
    QWEN25_1_5B,
    SAFETY_FACTOR,
    LearnerDoesNotFit,
    ModelShape,
    activation_bytes_per_token,
    emulated_budget,
    minimum_vram_bytes,
    optimizer_step_bytes,
    pack_micro_batches,
    plan_learner,
)
from worker.engine.trainer import GRPOLearner, TrainSample, collate
from worker.shared.config import GRPOConfig
from worker.shared.tiers import tier


def tiny_qwen(vocab: int = 300, seed: int = 0) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def reference_logprobs(model, input_ids, attention_mask, T: int, temperature: float):
    """The unchunked computation: the model's full [B, T, V] logits, one log_softmax."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    log_softmax = torch.log_softmax(logits[:, -(T + 1) : -1].float() / temperature, dim=-1)
    logp = log_softmax.gather(-1, input_ids[:, -T:].unsqueeze(-1)).squeeze(-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return logp, entropy


def batch(seed: int = 1, rows: int = 5, vocab: int = 300):
    generator = torch.Generator().manual_seed(seed)
    samples = [
        TrainSample(
            torch.randint(3, vocab, (6 + 3 * i,), generator=generator).tolist(),
            torch.randint(3, vocab, (4 + 2 * i,), generator=generator).tolist(),
            advantage=1.0 - 0.5 * i,
        )
        for i in range(rows)
    ]
    return samples, collate(samples, 0, torch.device("cpu"), mask_truncated=False, share_prefix=False)


@pytest.mark.parametrize("chunk_tokens", [1, 7, 4096])
def test_chunked_logprobs_and_entropy_equal_the_unchunked_ones(chunk_tokens: int):
    model = tiny_qwen()
    _, mb = batch()
    T = mb.num_completion_tokens
    expected_logp, expected_entropy = reference_logprobs(model, mb.input_ids, mb.attention_mask, T, 0.7)
    weights = mb.completion_mask * mb.advantages[:, None]
    (expected_logp * weights).sum().backward()
    expected_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    logp, entropy = completion_logprobs(
        model, mb.input_ids, mb.attention_mask, T, 0.7, with_entropy=True, chunk_tokens=chunk_tokens
    )
    (logp * weights).sum().backward()
    torch.testing.assert_close(logp, expected_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, expected_entropy, atol=1e-5, rtol=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected_grads[name], atol=1e-6, rtol=1e-4, msg=name)


def test_gradient_checkpointing_gives_the_same_step():
    """The planner may turn checkpointing on; the step's numbers must not change."""
    samples, _ = batch(seed=2, rows=6)
    results = []
    for mode in ("off", "on"):
        model = tiny_qwen(seed=3)
        learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-3, gradient_checkpointing=mode), 0)
        metrics = learner.step(samples)
        assert model.is_gradient_checkpointing == (mode == "on")
        results.append((metrics, model.state_dict()))
    (off, off_state), (on, on_state) = results
    for key in ("loss", "entropy", "grad_norm"):
        assert on[key] == pytest.approx(off[key], rel=1e-5, abs=1e-7), key
    for name, tensor in off_state.items():
        torch.testing.assert_close(on_state[name], tensor, atol=5e-6, rtol=1e-5, msg=name)


def saved_bytes_per_token(shape: ModelShape, layers: int, tokens: int, precision: str) -> float:
    """What ``layers`` decoder layers of ``shape`` keep for backward, per token, minus what one
    layer fewer keeps (embeddings and the final norm cancel), at two token counts so that
    autocast's weight copies (a fixed cost per layer) cancel too. ``precision``: "mixed" (bf16
    autocast over fp32 weights), "bf16" or "fp32" (the weights' dtype, no autocast)."""
    mixed = precision == "mixed"

    def saved(n_layers: int, n_tokens: int) -> int:
        config = Qwen2Config(**{**shape.to_qwen2_config(), "num_hidden_layers": n_layers, "vocab_size": 64})
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        if precision == "bf16":
            model = model.to(torch.bfloat16)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            return t

        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if mixed else contextlib.nullcontext()
        ids = torch.randint(0, 64, (1, n_tokens))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
            model.model(input_ids=ids, use_cache=False)
        return sum(size for ptr, size in storages.items() if ptr not in params)

    short = saved(layers, tokens) - saved(layers - 1, tokens)
    long = saved(layers, 2 * tokens) - saved(layers - 1, 2 * tokens)
    return (long - short) / tokens


@pytest.mark.parametrize("precision", ["bf16", "mixed", "fp32"])
def test_activation_estimate_covers_a_measured_qwen_layer(precision: str):
    """One Qwen2.5-0.5B-shaped layer on CPU: the bytes it keeps for backward per token (pure
    bf16, bf16 autocast over fp32 weights, or plain fp32 as T4s and V100s train) are within the
    planner's estimate, and the estimate is not wildly above (measured 57 KB and 66 KB per layer
    and token in bf16 and mixed)."""
    measured = saved_bytes_per_token(QWEN25_0_5B, 2, 64, precision)
    estimate = (
        activation_bytes_per_token(
            QWEN25_0_5B,
            mixed=precision == "mixed",
            checkpointing=False,
            weight_bytes=2 if precision == "bf16" else 4,
        )
        / QWEN25_0_5B.layers
    )
    print(f"{precision}: measured {measured:.0f} B per layer-token, estimate {estimate:.0f}")
    assert measured <= estimate <= 1.25 * measured


def fp32_peak_bytes(shape: ModelShape, plan, rows: int, length: int) -> float:
    """A micro-batch's peak at 4 bytes per activation value, written out here rather than taken
    from the planner: what a card without bf16 (a T4) really keeps."""
    kv = shape.kv_heads * (shape.hidden // shape.heads)
    per_layer = ACT_HIDDEN_COPIES * shape.hidden + ACT_FFN_COPIES * shape.intermediate + ACT_KV_COPIES * kv
    per_token = (
        shape.layers * shape.hidden * 4 + per_layer * 4
        if plan.gradient_checkpointing
        else shape.layers * per_layer * 4
    )
    return plan.fixed_bytes + rows * length * per_token * SAFETY_FACTOR


@pytest.mark.parametrize("completion", [256, 1024])
def test_a_t4_plans_fp32_activations(completion: int):
    """A T4 (16 GB, reports 14.6 GiB; compute capability 7.5: no bf16 autocast, plain fp32)
    training Qwen2.5-0.5B alone (no vLLM there): every micro-batch fits when its activations
    are counted at 4 bytes a value, as fp32 keeps them (at 2, the old count, they filled the
    budget with a real use a third above it)."""
    budget = emulated_budget(QWEN25_0_5B, int(14.6 * GIB), 0)
    lengths = [180 + (i * 7) % 40 + completion - (i * 13) % 50 for i in range(64)]
    plan = plan_learner(QWEN25_0_5B, budget, max(lengths), mixed=False)
    groups = pack_micro_batches(lengths, plan.token_budget, max_rows=32)
    peaks = [fp32_peak_bytes(QWEN25_0_5B, plan, len(g), max(lengths[i] for i in g)) for g in groups]
    print(
        f"T4, {completion}: {plan.note()}, {len(groups)} micro-batches, fp32 peak {max(peaks) / GIB:.1f} GiB"
    )
    assert max(peaks) <= MAX_BUDGET_SHARE * budget


@pytest.mark.parametrize(
    ("shape", "tier_name", "vram_gib"),
    [(QWEN25_0_5B, "qwen2.5-0.5b", 24), (QWEN25_0_5B, "qwen2.5-0.5b", 80), (QWEN25_1_5B, "qwen2.5-1.5b", 80)],
)
@pytest.mark.parametrize("completion", [256, 1024])
def test_planner_keeps_the_estimated_peak_under_the_budget(
    shape: ModelShape, tier_name: str, vram_gib: int, completion: int
):
    """A 24 GB and an 80 GB card with the vLLM engine's share taken (docs/vllm.md), 64 rows of
    ~200 prompt + ``completion`` tokens: every micro-batch's estimated peak stays under what the
    learner finds free."""
    vram = vram_gib * GIB
    budget = emulated_budget(shape, vram, engine_memory(tier(tier_name), vram).engine_bytes)
    lengths = [180 + (i * 7) % 40 + completion - (i * 13) % 50 for i in range(64)]
    plan = plan_learner(shape, budget, max(lengths), mixed=True)
    groups = pack_micro_batches(lengths, plan.token_budget, max_rows=32)
    assert sorted(i for g in groups for i in g) == list(range(64))
    peaks = [plan.peak_bytes(len(g), max(lengths[i] for i in g)) for g in groups]
    print(f"{tier_name} on {vram_gib} GiB, {completion}: {plan.note()}, {len(groups)} micro-batches")
    # a tenth of the free memory stays free for what the estimate does not see (fragmentation,
    # the engine's CUDA-graph pool): the tight cases reached 97-99% of the budget without it
    assert max(peaks) <= MAX_BUDGET_SHARE * budget
    assert plan.optimizer_bytes <= MAX_BUDGET_SHARE * budget
    if vram_gib == 80 and completion == 256:
        assert not plan.gradient_checkpointing  # a big card trains without recomputation
    if vram_gib == 24 and completion == 256:  # ... where the old fixed 32 rows would not fit
        unplanned = pack_micro_batches(lengths, None, max_rows=32)
        assert max(plan.peak_bytes(len(g), max(lengths[i] for i in g)) for g in unplanned) > budget


# Runs in a fresh process: the rise of its resident-set peak (VmHWM, reset through clear_refs)
# during one AdamW step of the learner's optimizer, moments already allocated. A fixed malloc
# mmap threshold makes every freed tensor go back to the system at once.
OPTIMIZER_PEAK = """
import json, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from worker.engine.memory import ModelShape
from worker.engine.trainer import GRPOLearner
from worker.shared.config import GRPOConfig

def status(field):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field))

config = Qwen2Config(vocab_size=4096, hidden_size=256, intermediate_size=2048, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
torch.manual_seed(0)
model = Qwen2ForCausalLM(config)
learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-3), 0)
for p in model.parameters():
    p.grad = torch.randn_like(p)
learner.optimizer.step()  # allocates the moments
before = status("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")
learner.optimizer.step()
print(json.dumps({"rise": status("VmHWM:") - before, "shape": ModelShape.from_config(config).__dict__}))
"""


def test_the_optimizer_step_stays_within_its_planned_temporary():
    """The learner's AdamW step, measured on CPU in a model whose layers outweigh its embedding
    (as Qwen's do): it allocates no more than the plan's temporaries (two of the largest tensor,
    8 MiB here), where the multi-tensor update (torch's default on CUDA) takes one fp32 copy of
    every parameter (33 MiB)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", OPTIMIZER_PEAK],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    shape = ModelShape(**result["shape"])
    planned = optimizer_step_bytes(shape, moments_allocated=True) - 4 * shape.params  # less the gradients
    print(f"AdamW step: {result['rise'] / 2**20:.1f} MiB measured, {planned / 2**20:.1f} MiB planned")
    assert result["rise"] <= 1.1 * planned
    assert 4 * shape.params > 3 * planned  # the multi-tensor update's copy would not fit the plan


def test_tier_minimums_come_from_the_plan_and_fit_real_cards():
    """The tiers' min_vram_bytes are the plan's own minimum (rounded up to 0.1 GiB): a card of
    that size plans a 1,224-token row, one 0.2 GiB smaller does not, and both are below what
    real "12 GB" (11.8 GiB) and "32 GB" (31.4 GiB) cards report."""
    for shape, name, real_card_gib in (
        (QWEN25_0_5B, "qwen2.5-0.5b", 11.8),
        (QWEN25_1_5B, "qwen2.5-1.5b", 31.4),
    ):
        minimum = tier(name).min_vram_bytes
        assert minimum == int(math.ceil(minimum_vram_bytes(shape) / GIB * 10) / 10 * GIB), name
        assert minimum < real_card_gib * GIB, name
        plan_learner(shape, emulated_budget(shape, minimum, 0), MINIMUM_ROW_TOKENS, mixed=True)
        smaller = emulated_budget(shape, minimum - int(0.2 * GIB), 0)
        with pytest.raises(LearnerDoesNotFit):
            plan_learner(shape, smaller, MINIMUM_ROW_TOKENS, mixed=True)


def test_planner_refuses_what_cannot_fit_and_turns_checkpointing_on_when_needed():
    with pytest.raises(LearnerDoesNotFit):
        plan_learner(QWEN25_1_5B, 20 * GIB, 1224, mixed=True)  # its state alone is ~20 GiB
    tight = plan_learner(QWEN25_0_5B, 9 * GIB, 1224, mixed=True)
    assert tight.gradient_checkpointing and tight.token_budget >= 1224
    with pytest.raises(LearnerDoesNotFit, match="checkpointing is off"):
        plan_learner(QWEN25_0_5B, 8 * GIB, 1224, mixed=True, gradient_checkpointing="off")
    roomy = plan_learner(QWEN25_0_5B, 60 * GIB, 456, mixed=True)
    assert not roomy.gradient_checkpointing


def test_token_budget_packs_rows_and_without_one_keeps_the_old_micro_batches():
    lengths = [10, 50, 20, 40, 30]
    assert pack_micro_batches(lengths, None, max_rows=2) == [[0, 2], [4, 3], [1]]
    assert pack_micro_batches(lengths, 90, max_rows=8) == [[0, 2, 4], [3], [1]]  # 3 x 30, 40, 50
    assert pack_micro_batches(lengths, 90, max_rows=2) == [[0, 2], [4, 3], [1]]


def test_learner_packs_micro_batches_under_an_emulated_budget():
    """A learner told it has little memory splits the batch, with the same step as one batch."""
    samples, _ = batch(seed=4, rows=6)
    results = []
    for budget in (None, "tight"):
        model = tiny_qwen(seed=5)
        learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-3, gradient_checkpointing="off"), 0)
        if budget == "tight":
            assert learner.shape is not None
            plan = plan_learner(learner.shape, 10 * GIB, 40, mixed=False, gradient_checkpointing="off")
            fixed, per_token = plan.fixed_bytes, plan.bytes_per_token
            # room for 60 padded tokens in the planned share of the budget
            learner.memory_budget_bytes = math.ceil((fixed + 60 * per_token) / MAX_BUDGET_SHARE)
        metrics = learner.step(samples)
        results.append((metrics, model.state_dict()))
    (whole, whole_state), (split, split_state) = results
    assert whole["micro_batches"] == 1 and split["micro_batches"] >= 3
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-5, abs=1e-7)
    for name, tensor in whole_state.items():
        torch.testing.assert_close(
            split_state[name], tensor, atol=5e-6, rtol=1e-5, msg=name
        )  # Adam: 1e-3 a step


def changed_fraction(before: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, float]:
    return {
        name: (tensor.float() != before[name].float()).float().mean().item()
        for name, tensor in model.state_dict().items()
    }


def test_mixed_precision_step_changes_every_parameter_at_lr_1e_5():
    """fp32 master weights under bf16 autocast (the GPU path, run on CPU): one AdamW step at
    lr 1e-5 changes every parameter tensor, norm weights (1.0) included; the same step on pure
    bf16 weights leaves the norms where they were (bf16 cannot represent 1 + 1e-5)."""
    samples, _ = batch(seed=6, rows=4)
    config = GRPOConfig(learning_rate=1e-5)

    model = tiny_qwen(seed=7)
    before = copy.deepcopy(model.state_dict())
    learner = GRPOLearner(model, config, 0, autocast_dtype=torch.bfloat16)
    learner.step(samples)
    mixed = changed_fraction(before, model)
    assert all(param.dtype == torch.float32 for param in model.parameters())
    unchanged = [name for name, fraction in mixed.items() if fraction == 0.0]
    assert not unchanged, unchanged
    assert mixed["model.norm.weight"] == 1.0  # every element of a norm weight moved

    bf16 = tiny_qwen(seed=7).to(torch.bfloat16)
    before = copy.deepcopy(bf16.state_dict())
    GRPOLearner(bf16, config, 0, autocast_dtype=None).step(samples)
    pure = changed_fraction(before, bf16)
    assert pure["model.norm.weight"] == 0.0
    print(
        f"mean fraction changed: mixed {sum(mixed.values()) / len(mixed):.3f}, "
        f"pure bf16 {sum(pure.values()) / len(pure):.3f}"
    )
