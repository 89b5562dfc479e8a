"""The device check's learner parts (bench/gpu_check.py): torch and transformers only, so they
run on a machine that has nothing else of the worker's dependencies (no msgspec, no
reasoning-gym); tests/bench/test_gpu_check.py runs them with both blocked.

    memory      the learner's plan (worker/engine/memory.py) for B x G = 64 rows of 200 prompt +
                256 or 1,024 completion tokens on emulated 24 GB and 80 GB cards (the vLLM
                engine's share taken, docs/vllm.md); on CUDA one real step under each budget,
                its measured peaks (allocated and reserved) against the budget and its time
    saved_tensors  bytes one layer keeps for backward per token, against the plan
    precision   one AdamW step at lr 1e-5: the fraction of weights (and of parameter tensors)
                that changed, fp32 master weights under bf16 autocast against pure bf16
"""

from __future__ import annotations

import gc
import time
from typing import Any

import torch

from worker.engine.memory import (
    GIB,
    QWEN25_0_5B,
    QWEN25_1_5B,
    LearnerDoesNotFit,
    ModelShape,
    activation_bytes_per_token,
    emulated_budget,
    pack_micro_batches,
    plan_learner,
)
from worker.engine.trainer import GRPOLearner, TrainSample
from worker.shared.config import GRPOConfig

SHAPES = {"qwen2.5-0.5b": QWEN25_0_5B, "qwen2.5-1.5b": QWEN25_1_5B}
CARDS_GIB = (24, 80)
COMPLETIONS = (256, 1024)
PROMPT_TOKENS = 200
ROWS = 64  # B x G = 8 x 8


def say(message: str) -> None:
    print(f"gpu_check: {message}", flush=True)


class Clock:
    def __init__(self, budget_s: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)


def random_model(shape: ModelShape, device: str, layers: int | None = None, seed: int = 0) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    overrides = {"num_hidden_layers": layers} if layers else {}
    config = Qwen2Config(**{**shape.to_qwen2_config(), **overrides}, max_position_embeddings=4096)
    config.pad_token_id, config.eos_token_id = 0, 1
    torch.manual_seed(seed)
    with torch.device(device):  # built where it trains: a 1.5B init on a CPU takes half a minute
        return Qwen2ForCausalLM(config)


def random_rows(count: int, prompt: int, completion: int, vocab: int, seed: int) -> list[TrainSample]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(count):
        length = completion - (i * 13) % max(1, completion // 4)  # completions of varied lengths
        ids = torch.randint(2, vocab, (prompt + length,), generator=generator).tolist()
        rows.append(TrainSample(ids[:prompt], ids[prompt:], advantage=1.0 if i % 2 else -1.0))
    return rows


# --- memory ---------------------------------------------------------------------------------------
def learner_budgets(name: str, shape: ModelShape, vram: int) -> dict[str, Any]:
    """What the learner finds free on the card: beside the vLLM engine, or alone (transformers)."""
    # the tiers enter with the part that needs them (the other learner parts import none)
    from worker.engine.generation.vllm_backend import engine_memory
    from worker.shared.tiers import tier

    try:
        engine = engine_memory(tier(name), vram)
        return {
            "backend": "vllm",
            "engine_gib": engine.engine_bytes / GIB,
            "budget": emulated_budget(shape, vram, engine.engine_bytes),
        }
    except ValueError as error:
        return {
            "backend": "transformers",
            "engine_refused": str(error),
            "budget": emulated_budget(shape, vram, 0),
        }


def check_memory(clock: Clock, cuda: bool) -> list[dict[str, Any]]:
    results = []
    for name, shape in SHAPES.items():
        model = None
        for vram_gib in CARDS_GIB:
            budgets = learner_budgets(name, shape, vram_gib * GIB)
            budget = budgets.pop("budget")
            for completion in COMPLETIONS:
                entry: dict[str, Any] = {
                    "tier": name,
                    "card_gib": vram_gib,
                    "completion_tokens": completion,
                    **budgets,
                }
                entry["budget_gib"] = budget / GIB
                rows = random_rows(ROWS, PROMPT_TOKENS, completion, shape.vocab, seed=completion)
                lengths = [len(r.prompt_ids) + len(r.completion_ids) for r in rows]
                try:
                    plan = plan_learner(shape, budget, max(lengths), mixed=True)
                except LearnerDoesNotFit as error:
                    entry["plan"] = f"does not fit: {error}"
                    say(f"memory {name} {vram_gib} GB {completion} tokens: {entry['plan']}")
                    results.append(entry)
                    continue
                groups = pack_micro_batches(lengths, plan.token_budget, GRPOConfig().micro_batch_size)
                entry.update(
                    plan=plan.note(),
                    gradient_checkpointing=plan.gradient_checkpointing,
                    micro_batches=len(groups),
                    estimated_peak_gib=max(
                        plan.peak_bytes(len(g), max(lengths[i] for i in g)) for g in groups
                    )
                    / GIB,
                )
                if not cuda:
                    entry["measured"] = "skipped: no CUDA"
                elif clock.left() < 120:
                    entry["measured"] = "skipped: out of time"
                else:
                    model = model or random_model(shape, "cuda")
                    entry.update(measure_step(model, rows, budget))
                    worst = max(entry["measured_peak_gib"], entry["measured_reserved_gib"])
                    entry["measured"] = f"{'within' if worst <= entry['budget_gib'] else 'OVER'} the budget"
                say(
                    f"memory {name} {vram_gib} GB {completion} tokens: {plan.note()}, {len(groups)} micro-batches, "
                    f"estimated peak {entry['estimated_peak_gib']:.1f} GiB; measured: "
                    + (
                        f"{entry['measured_peak_gib']:.1f} GiB allocated, {entry['measured_reserved_gib']:.1f} "
                        f"reserved, step {entry['step_seconds']:.1f} s, "
                        if "measured_peak_gib" in entry
                        else ""
                    )
                    + entry["measured"]
                )
                results.append(entry)
        del model
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return results


def measure_step(model: torch.nn.Module, rows: list[TrainSample], budget: int) -> dict[str, Any]:
    """One real step under ``budget``: the peak beyond the weights, as the plan counts it."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    reserved = torch.cuda.memory_reserved()
    learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-5), 0, memory_budget_bytes=budget)
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    metrics = learner.step(rows)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - weights
    # what the allocator took from the device beyond what it held before: the budget's real test
    peak_reserved = torch.cuda.max_memory_reserved() - reserved
    del learner
    model.zero_grad(set_to_none=True)
    return {
        "measured_peak_gib": peak / GIB,
        "measured_reserved_gib": peak_reserved / GIB,
        "step_seconds": time.perf_counter() - start,
        "step_micro_batches": metrics["micro_batches"],
        "loss_finite": bool(torch.isfinite(torch.tensor(metrics["loss"]))),
    }


def check_saved_bytes(cuda: bool) -> list[dict[str, Any]]:
    """Bytes one layer keeps for backward per token, measured with saved-tensor hooks, against the plan."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    device = "cuda" if cuda else "cpu"
    results = []
    for name, shape in SHAPES.items():

        def saved(layers: int, tokens: int, shape: ModelShape = shape) -> int:
            config = Qwen2Config(**{**shape.to_qwen2_config(), "num_hidden_layers": layers, "vocab_size": 64})
            with torch.device(device):
                model = Qwen2ForCausalLM(config)
            params = {p.untyped_storage().data_ptr() for p in model.parameters()}
            storages: dict[int, int] = {}

            def pack(t: torch.Tensor) -> torch.Tensor:
                storages.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                return t

            ids = torch.randint(0, 64, (1, tokens), device=device)
            with (
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
                torch.autocast(device, torch.bfloat16),
            ):
                model.model(input_ids=ids, use_cache=False)
            return sum(size for ptr, size in storages.items() if ptr not in params)

        per_token = ((saved(2, 128) - saved(1, 128)) - (saved(2, 64) - saved(1, 64))) / 64
        estimate = activation_bytes_per_token(shape, mixed=True, checkpointing=False) / shape.layers
        results.append(
            {"tier": name, "device": device, "measured_bytes": per_token, "estimated_bytes": estimate}
        )
        say(
            f"saved tensors {name} ({device}, bf16 autocast): {per_token:.0f} bytes per layer and token, plan {estimate:.0f}"
        )
    return results


# --- precision ------------------------------------------------------------------------------------
def check_precision(cuda: bool) -> dict[str, Any]:
    device = "cuda" if cuda else "cpu"
    layers = None if cuda else 2
    rows = random_rows(
        4 if not cuda else 16, 16 if not cuda else 64, 16 if not cuda else 64, QWEN25_0_5B.vocab, seed=3
    )
    result: dict[str, Any] = {
        "shape": "qwen2.5-0.5b",
        "layers": layers or QWEN25_0_5B.layers,
        "device": device,
    }
    for label, autocast, dtype in (
        ("mixed", torch.bfloat16, torch.float32),
        ("pure_bf16", None, torch.bfloat16),
    ):
        model = random_model(QWEN25_0_5B, device, layers=layers, seed=1).to(dtype)
        before = {n: t.detach().clone() for n, t in model.state_dict().items()}
        GRPOLearner(model, GRPOConfig(learning_rate=1e-5), 0, autocast_dtype=autocast).step(rows)
        changed = {n: (t != before[n]).float().mean().item() for n, t in model.state_dict().items()}
        elements = sum(t.numel() for t in before.values())
        result[label] = {
            "fraction_of_weights_changed": sum(changed[n] * before[n].numel() for n in changed) / elements,
            "tensors_changed": sum(f > 0 for f in changed.values()),
            "tensors": len(changed),
            "norm_weight_changed": changed["model.norm.weight"],
        }
        say(
            f"precision {label} ({device}, {result['layers']} layers): {result[label]['fraction_of_weights_changed']:.3f} "
            f"of the weights and {result[label]['tensors_changed']}/{len(changed)} tensors changed at lr 1e-5"
        )
        del model, before
        gc.collect()
    return result
