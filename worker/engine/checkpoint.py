"""Checkpoints: model, optimizer, loop state and RNG states in one file, written atomically.

The agent's own randomness (question positions, generation seeds, batch draws) is derived
from (seed, agent, round), so the round number restores it; the global torch/python RNG
states are saved too so that anything else drawing from them resumes identically.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from worker.shared.files import write_atomic


def checkpoint_bytes(params: int) -> int:
    """The size of a checkpoint of a model of ``params`` parameters: its fp32 weights (4 bytes a
    parameter) and AdamW's two fp32 moments (8), what :func:`save_checkpoint` writes (measured
    within a few percent in tests/worker/engine/test_doctor.py)."""
    return params * (4 + 8)


def save_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": state,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    # A crash mid-save leaves the previous checkpoint intact.
    write_atomic(path, lambda handle: torch.save(payload, handle))


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    payload = torch.load(path, map_location=next(model.parameters()).device, weights_only=False)
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["rng"]["torch"])
    random.setstate(payload["rng"]["python"])
    return payload["state"]
