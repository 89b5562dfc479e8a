"""Loading a tier's policy: every tier goes through the same ``from_pretrained`` call, on a
local directory (the offline-built tiny tiers, worker/engine/tiny.py) or a hub id."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the learner imports without the tiers' dependencies
    from worker.shared.tiers import ModelSpec


def resolve(spec: ModelSpec, cache_dir: Path, log=print) -> str:
    """A path or hub id that ``from_pretrained`` accepts; builds a tiny tier on first use."""
    if spec.source.startswith("builtin:"):
        from worker.engine.tiny import ensure_tiny_model

        return str(ensure_tiny_model(spec.source.removeprefix("builtin:"), cache_dir, log=log))
    return spec.source


def load_policy(spec: ModelSpec, cache_dir: Path, device: str = "cpu", log=print):
    """(model, tokenizer) for ``spec``, the model on ``device`` in float32 whatever ``spec.dtype``:
    these are the optimizer's master weights. On a GPU the learner computes in bf16 under
    autocast (worker/engine/trainer.py), as TRL does; pure-bf16 weights with AdamW at lr 1e-5
    barely move (bf16 cannot represent 1 + 1e-5), and the vLLM engine loads its own bf16 copy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    location = resolve(spec, cache_dir, log=log)
    tokenizer = AutoTokenizer.from_pretrained(location)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(location, dtype=torch.float32).to(device)
    return model, tokenizer


def default_autocast_dtype(model: Any) -> Any:
    """torch.bfloat16 for fp32 weights on a CUDA device that computes in bf16 (compute
    capability 8.0+), else None (plain fp32, as on CPU): the learner trains under it and the
    transformers backend samples under it, so both see the same kernels' numbers."""
    import torch

    param = next(model.parameters())
    if param.device.type != "cuda" or param.dtype != torch.float32:
        return None
    # not torch.cuda.is_bf16_supported(), which also says yes to emulated bf16 on older GPUs
    return torch.bfloat16 if torch.cuda.get_device_capability(param.device) >= (8, 0) else None
