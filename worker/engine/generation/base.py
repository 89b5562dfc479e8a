"""The interface every generation backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class Sample:
    """One sampled completion.

    ``token_ids`` are the sampled tokens, including the end-of-sequence token when the model
    produced it (``finished``); ``finished`` is False when generation stopped at max_new_tokens.
    ``text`` is decoded without special tokens. ``logprobs`` are the sampler's log-probs of the
    sampled tokens where the backend provides them (vLLM), else None.
    """

    token_ids: list[int]
    text: str
    finished: bool
    logprobs: list[float] | None = None


class GenerationBackend(Protocol):
    name: str

    def generate(
        self,
        prompts: list[str],  # rendered prompt texts (chat template applied)
        n: int,  # samples per prompt (G)
        max_new_tokens: int,
        temperature: float,
        seed: int,
    ) -> list[list[Sample]]:  # [len(prompts)][n]
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next ``generate`` use ``model``'s current weights (after an optimizer step)."""
        ...
