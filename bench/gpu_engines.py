"""The device check's generating parts (bench/gpu_check.py):

    generation  the transformers backend's tokens/s at B x G = 64 (8 prompts x 8 samples) and 256
                new tokens, on a random Qwen2.5-0.5B-shaped model (fp32 weights, bf16 autocast)
    sapo        a few SAPO rounds through the engine's Agent with the transformers backend: two
                tiny-1m agents (the shipped weights) sharing rollouts 2 local + 2 external, on the
                device; needs msgspec and reasoning-gym (bench/gpu_wheelhouse.py carries them)
    vllm        engine start (KV blocks), weight sync, generation, the learner scoring the samples
                (sampler/learner log-prob difference: what the importance weights correct), a
                GRPO step with the correction, and the engine's log-probs of the same tokens
                before and after syncing the new weights (the engine sees them)

Without CUDA each runs reduced (2 layers, a few short samples) and says so.
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bench.gpu_learner import random_model, say
from worker.engine.generation.hf import TransformersBackend
from worker.engine.memory import QWEN25_0_5B
from worker.engine.trainer import GRPOLearner, TrainSample
from worker.shared.config import GRPOConfig
from worker.shared.tiers import ModelSpec


def random_prompts(count: int, words: int, vocab: int, seed: int) -> list[str]:
    generator = torch.Generator().manual_seed(seed)
    return [
        " ".join(f"w{i}" for i in torch.randint(2, vocab, (words,), generator=generator).tolist())
        for _ in range(count)
    ]


# --- generation -----------------------------------------------------------------------------------
def check_generation(cuda: bool, work: Path) -> dict[str, Any]:
    device = "cuda" if cuda else "cpu"
    layers = None if cuda else 2
    prompts_count, n, new_tokens = (8, 8, 256) if cuda else (2, 2, 8)
    model = random_model(QWEN25_0_5B, device, layers=layers, seed=4)
    tokenizer = word_tokenizer(QWEN25_0_5B.vocab, work / "generation")
    # every sample exactly new_tokens long: a random model would stop at any moment
    model.generate = functools.partial(model.generate, min_new_tokens=new_tokens)
    backend = TransformersBackend(model, tokenizer)
    prompts = random_prompts(prompts_count, 64, QWEN25_0_5B.vocab, seed=6)
    backend.generate(prompts[:1], n=1, max_new_tokens=new_tokens, temperature=1.0, seed=0)  # warm-up
    rates = []
    for repeat in range(3):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        groups = backend.generate(prompts, n=n, max_new_tokens=new_tokens, temperature=1.0, seed=repeat)
        if cuda:
            torch.cuda.synchronize()
        rates.append(sum(len(s.token_ids) for g in groups for s in g) / (time.perf_counter() - start))
    result = {
        "device": device,
        "layers": layers or QWEN25_0_5B.layers,
        "sequences": prompts_count * n,
        "new_tokens": new_tokens,
        "tokens_per_second": statistics.median(rates),
        "tokens_per_second_all": rates,
    }
    say(
        f"generation transformers ({device}, {result['layers']} layers, {prompts_count} x {n} x {new_tokens} "
        f"tokens): {result['tokens_per_second']:.0f} tokens/s (median of 3)"
    )
    return result


# --- SAPO rounds ----------------------------------------------------------------------------------
def check_sapo(cuda: bool, rounds: int = 3) -> dict[str, Any]:
    # msgspec and reasoning-gym enter here, and only here
    from worker.engine.agent import Agent
    from worker.engine.policy import load_policy
    from worker.engine.transport import LocalTransport, RolloutPool
    from worker.shared.config import AgentConfig
    from worker.shared.questions import preset
    from worker.shared.tiers import model_cache_dir, tier

    device = "cuda" if cuda else "cpu"
    spec = tier("tiny-1m")
    mix = preset("cpu")
    pool = RolloutPool()
    agents = []
    for index in range(2):
        model, tokenizer = load_policy(spec, model_cache_dir(), device=device, log=lambda _: None)
        config = AgentConfig(
            questions_per_round=4,
            group_size=8,
            num_local=2,
            num_external=2,
            local_strategy="uniform",
            external_strategy="uniform",
            max_new_tokens=32,
            seed=index,
            grpo=GRPOConfig(learning_rate=spec.learning_rate),
        )
        transport = LocalTransport(mix, seed=10 + index, pool=pool)
        backend = TransformersBackend(model, tokenizer)
        agents.append(Agent(f"agent-{index}", spec.name, model, tokenizer, backend, transport, mix, config))
    history = []
    for _ in range(rounds):
        start = time.perf_counter()
        for agent in agents:  # every agent shares before any trains, as the simulator runs them
            agent.generate_phase()
        metrics = [agent.train_phase() for agent in agents]
        history.append(
            {
                "seconds": time.perf_counter() - start,
                "reward": statistics.mean(m["reward"] for m in metrics),
                "trained": [m["trained"] for m in metrics],
                "external_from_others": [m.get("batch/external_from_others", 0.0) for m in metrics],
                "peak_memory_gib": [m.get("peak_memory_gib", 0.0) for m in metrics],
            }
        )
        say(
            f"sapo round {len(history) - 1} ({device}, 2 x {spec.name}, transformers): mean reward "
            f"{history[-1]['reward']:.3f}, {history[-1]['seconds']:.1f} s"
        )
    return {"device": device, "tier": spec.name, "agents": len(agents), "rounds": history}


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


def check_vllm(cuda: bool, work: Path) -> dict[str, Any]:
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
    prompts = random_prompts(4, 48, shape.vocab, seed=5)
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
