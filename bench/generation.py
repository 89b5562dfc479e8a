"""Generation throughput: vLLM against transformers on the same prompts, in one process.

    python bench/generation.py --tier tiny-20m [--prompts 4 --n 8 --max-new-tokens 48 --repeats 7]
                               [--device cuda]

Both backends are the worker's own (worker/generation): the same rendered reasoning-gym prompts
(the ``cpu`` task preset), the same n, max_new_tokens, temperature and seeds, called alternately
(transformers, vLLM, transformers, ...) after one unmeasured warm-up call each, so that machine
noise falls on both. The engine is synced before each call, as the agent syncs it after each
step, so no call profits from the previous call's prefix cache.

``--lengths fixed`` (the default) makes every sample exactly max_new_tokens long in both
(end-of-sequence suppressed until then: transformers' ``min_new_tokens``, vLLM's
``min_tokens``): the warm-started tiny tiers answer in a handful of tokens, which would measure
per-call latency, not generation. ``--lengths natural`` runs the backends exactly as the agent
does. Tokens are the sampled tokens returned.

Output: one line per measurement, then the totals, then ``ratio=`` last: vLLM's median tokens/s
over transformers' median tokens/s (medians, because on a shared machine one disturbed call
would otherwise decide it; the ratio of the totals is printed just before).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from worker.engine.generation.base import GenerationBackend  # noqa: E402
from worker.engine.generation.hf import TransformersBackend  # noqa: E402
from worker.engine.policy import load_policy, resolve  # noqa: E402
from worker.shared.prompts import render_prompt  # noqa: E402
from worker.shared.questions import QuestionStream, preset  # noqa: E402
from worker.shared.tiers import tier  # noqa: E402


def measure(
    backend: GenerationBackend, prompts: list[str], n: int, max_new_tokens: int, temperature: float, seed: int
) -> tuple[int, float]:
    start = time.perf_counter()
    samples = backend.generate(
        prompts, n=n, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
    )
    seconds = time.perf_counter() - start
    return sum(len(s.token_ids) for group in samples for s in group), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tier", default="tiny-1m")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "data" / "models")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per call")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=7, help="measured calls per backend")
    parser.add_argument("--lengths", choices=["fixed", "natural"], default="fixed")
    parser.add_argument("--tasks", default="cpu", help="task preset the prompts come from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the policy runs")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from worker.engine.generation.vllm_backend import VLLMBackend

    spec = tier(args.tier)
    model_dir = resolve(spec, args.cache_dir, log=lambda _: None)
    model, tokenizer = load_policy(spec, args.cache_dir, device=args.device, log=lambda _: None)
    questions = QuestionStream(preset(args.tasks), seed=args.seed).take(args.prompts)
    prompts = [render_prompt(tokenizer, q.question) for q in questions]
    print(
        f"# tier={spec.name} params={sum(p.numel() for p in model.parameters())} prompts={len(prompts)} "
        f"n={args.n} max_new_tokens={args.max_new_tokens} lengths={args.lengths} temperature={args.temperature} "
        f"torch_threads={torch.get_num_threads()} torch={torch.__version__} "
        f"load_average={os.getloadavg()[0]:.2f} cpus={os.cpu_count()}",
        flush=True,
    )
    overrides: dict = {}
    if args.lengths == "fixed":
        model.generate = functools.partial(model.generate, min_new_tokens=args.max_new_tokens)
        overrides = {"min_tokens": args.max_new_tokens}
    backends: list[GenerationBackend] = [
        TransformersBackend(model, tokenizer),
        VLLMBackend(
            model_dir,
            tokenizer,
            spec=spec,
            seed=args.seed,
            device=args.device,
            # the engine's memory plan needs the card's size (the learner's share stays free)
            vram_bytes=torch.cuda.get_device_properties(0).total_memory if args.device == "cuda" else 0,
            sampling_overrides=overrides,
            log=lambda line: print(f"# {line}"),
        ),
    ]
    start = time.perf_counter()
    backends[1].sync_weights(model)
    print(f"# vllm weight sync {time.perf_counter() - start:.3f} s", flush=True)

    for backend in backends:  # warm-up, not measured
        measure(backend, prompts, args.n, args.max_new_tokens, args.temperature, args.seed)
    totals: dict[str, list[tuple[int, float]]] = {b.name: [] for b in backends}
    for repeat in range(args.repeats):
        for backend in backends:
            seed = args.seed + 1000 * (repeat + 1)
            # As in the agent, the engine is synced (which empties its prefix cache) before each
            # round's generation; not timed here, it is reported above.
            backend.sync_weights(model)
            tokens, seconds = measure(backend, prompts, args.n, args.max_new_tokens, args.temperature, seed)
            totals[backend.name].append((tokens, seconds))
            print(
                f"backend={backend.name} tier={spec.name} repeat={repeat} tokens={tokens} "
                f"seconds={seconds:.3f} tokens_per_s={tokens / seconds:.1f}",
                flush=True,
            )
    medians: dict[str, float] = {}
    totals_rate: dict[str, float] = {}
    for name, runs in totals.items():
        tokens = sum(t for t, _ in runs)
        seconds = sum(s for _, s in runs)
        totals_rate[name] = tokens / seconds
        medians[name] = statistics.median(t / s for t, s in runs)
        print(
            f"total backend={name} tokens={tokens} seconds={seconds:.3f} "
            f"tokens_per_s={totals_rate[name]:.1f} median_tokens_per_s={medians[name]:.1f}"
        )
    print(f"# ratio of totals {totals_rate['vllm'] / totals_rate['transformers']:.2f}")
    print(f"# load_average={os.getloadavg()[0]:.2f} at the end")
    # Medians: on a shared machine one disturbed call would otherwise decide the ratio.
    print(f"ratio={medians['vllm'] / medians['transformers']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
