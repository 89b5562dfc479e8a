"""Checkpoints: model, optimizer, loop state and RNG states in one file, written atomically.

The agent's own randomness (question positions, generation seeds, batch draws) is derived
from (seed, agent, round), so the round number restores it; the global torch/python RNG
states are saved too so that anything else drawing from them resumes identically.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": state,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # a crash mid-save leaves the previous checkpoint intact


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    payload = torch.load(path, map_location=next(model.parameters()).device, weights_only=False)
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["rng"]["torch"])
    random.setstate(payload["rng"]["python"])
    return payload["state"]
