"""The volunteer's generation backend: the engine's choice, as the client reports and fails it.

worker/engine/generation/select.py decides which backend fits this machine and builds it; here
its refusals become :class:`~worker.client.errors.FatalError` (``backend_unavailable``), which
stops the worker with a message instead of a traceback. :func:`measure_generation_speed` times
a short real generation for the hello's ``generation_tokens_per_second``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.client.errors import FatalError

if TYPE_CHECKING:
    from worker.shared.hardware import Hardware
    from worker.shared.tiers import ModelSpec

log = logging.getLogger(__name__)


def choose_backend(requested: str, hardware: Hardware) -> tuple[str, str]:
    """(backend name, reason) for the startup line (worker/engine/generation/select.py decides)."""
    from worker.engine.generation.select import BackendUnavailable
    from worker.engine.generation.select import choose_backend as select

    try:
        return select(requested, hardware)
    except (BackendUnavailable, ValueError) as error:
        raise FatalError("backend_unavailable", str(error)) from None


def build_backend(
    name: str,
    model: Any,
    tokenizer: Any,
    model_dir: str | Path,
    spec: ModelSpec,
    hardware: Hardware,
    seed: int,
) -> Any:
    """The generation backend object for ``name``, sharing (transformers) or synced from (vLLM)
    the policy module."""
    from worker.engine.generation.select import BackendUnavailable, make_backend

    try:
        return make_backend(
            name,
            model,
            tokenizer,
            model_dir,
            spec,
            hardware=hardware,
            seed=seed,
            log=lambda m: log.info("%s", m),
        )
    except BackendUnavailable as error:
        raise FatalError("backend_unavailable", str(error)) from None


def measure_generation_speed(backend: Any, tokenizer: Any, system_prompt: str = "default") -> float:
    """Tokens per second of a short real generation (2 prompts x 2 samples x 16 tokens)."""
    from worker.shared.prompts import render_prompt

    prompts = [render_prompt(tokenizer, "What is 17 + 25?", system_prompt)] * 2
    start = time.perf_counter()
    groups = backend.generate(prompts, n=2, max_new_tokens=16, temperature=1.0, seed=0)
    elapsed = time.perf_counter() - start
    tokens = sum(len(sample.token_ids) for group in groups for sample in group)
    return tokens / elapsed if elapsed > 0 else 0.0
