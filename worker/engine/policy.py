"""Loading a tier's policy: every tier goes through the same ``from_pretrained`` call, on a
local directory (the offline-built tiny tiers, worker/engine/tiny.py) or a hub id."""

from __future__ import annotations

from pathlib import Path

from worker.shared.tiers import ModelSpec


def resolve(spec: ModelSpec, cache_dir: Path, log=print) -> str:
    """A path or hub id that ``from_pretrained`` accepts; builds a tiny tier on first use."""
    if spec.source.startswith("builtin:"):
        from worker.engine.tiny import ensure_tiny_model

        return str(ensure_tiny_model(spec.source.removeprefix("builtin:"), cache_dir, log=log))
    return spec.source


def load_policy(spec: ModelSpec, cache_dir: Path, device: str = "cpu", log=print):
    """(model, tokenizer) for ``spec``, the model on ``device`` in training dtype."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    location = resolve(spec, cache_dir, log=log)
    tokenizer = AutoTokenizer.from_pretrained(location)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = getattr(torch, spec.dtype) if device != "cpu" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype).to(device)
    return model, tokenizer
