"""`auto`'s vLLM is accepted only once it has generated (worker/engine/generation/select.py): an
engine that starts but fails at its first generation (a kernel that does not compile), or fails
to start with an exception nobody listed, leaves the worker on transformers with the reason,
and is no longer referenced when the device's memory is freed. The failing engines are
deliberate stand-ins for vLLM; the learner's model and the transformers backend are real."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest

from worker.engine.generation import select, vllm_backend
from worker.engine.generation.select import BackendChoice, BackendUnavailable, make_backend
from worker.engine.policy import load_policy, resolve
from worker.shared.tiers import model_cache_dir, tier

ENGINES: list[weakref.ref] = []


class EngineFailingAtFirstGenerate:
    """Starts and syncs like VLLMBackend, then fails where a kernel compiles: the first generate."""

    name = "vllm"

    def __init__(self, model_dir: Path, tokenizer: Any, **_: Any) -> None:
        self.cache = bytearray(8 << 20)  # stands for the KV cache a real engine holds
        ENGINES.append(weakref.ref(self))

    def sync_weights(self, model: Any) -> None:
        pass

    def generate(self, *args: Any, **kwargs: Any) -> list:
        raise AssertionError("attention kernel failed to compile")


class EngineFailingAtStart(EngineFailingAtFirstGenerate):
    def __init__(self, model_dir: Path, tokenizer: Any, **kwargs: Any) -> None:
        super().__init__(model_dir, tokenizer, **kwargs)
        raise KeyError("no attention backend for this device")


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any, str]:
    spec = tier("tiny-1m")
    model, tokenizer = load_policy(spec, model_cache_dir(), log=lambda _: None)
    return model, tokenizer, resolve(spec, model_cache_dir(), log=lambda _: None)


@pytest.mark.parametrize(
    ("engine", "reason", "by_name"),
    [
        (
            EngineFailingAtFirstGenerate,
            "could not generate: AssertionError: attention kernel failed to compile",
            BackendUnavailable,
        ),
        # an unlisted error at the start: auto falls back, --backend vllm shows it as it is
        (EngineFailingAtStart, "KeyError: 'no attention backend for this device'", KeyError),
    ],
)
def test_auto_falls_back_from_an_engine_that_cannot_generate(
    monkeypatch: pytest.MonkeyPatch, policy: tuple, engine: type, reason: str, by_name: type
):
    model, tokenizer, model_dir = policy
    monkeypatch.setattr(vllm_backend, "VLLMBackend", engine)
    free_device_memory = select.free_device_memory
    alive_when_freed: list[bool] = []

    def free_and_look() -> None:  # the real freeing, then: is the failed engine still there?
        free_device_memory()
        alive_when_freed.append(any(ref() is not None for ref in ENGINES))

    monkeypatch.setattr(select, "free_device_memory", free_and_look)
    ENGINES.clear()
    lines: list[str] = []
    automatic = BackendChoice("vllm", automatic=True)
    backend = make_backend(automatic, model, tokenizer, model_dir, tier("tiny-1m"), log=lines.append)

    assert backend.name == "transformers"
    assert len(lines) == 1 and lines[0].startswith("generation: transformers: auto, vLLM cannot run here: ")
    assert reason in lines[0]
    assert ENGINES and alive_when_freed == [False]  # the engine was gone before its memory was freed
    # the worker generates with what it fell back to
    samples = backend.generate(["1 + 1 ="], n=2, max_new_tokens=3, temperature=1.0, seed=0)
    assert len(samples) == 1 and len(samples[0]) == 2

    # asked for by name: no fallback, the reason is the error
    with pytest.raises(by_name, match="attention"):
        make_backend("vllm", model, tokenizer, model_dir, tier("tiny-1m"), log=lines.append)


def test_the_smoke_generation_is_one_prompt_of_two_tokens(monkeypatch: pytest.MonkeyPatch, policy: tuple):
    """An engine that generates is accepted, after exactly one call: one prompt, two tokens."""
    model, tokenizer, model_dir = policy
    calls: list[tuple] = []

    class GeneratingEngine(EngineFailingAtFirstGenerate):
        def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, seed: int):
            calls.append((len(prompts), n, max_new_tokens))
            return [[] for _ in prompts]

    monkeypatch.setattr(vllm_backend, "VLLMBackend", GeneratingEngine)
    automatic = BackendChoice("vllm", automatic=True)
    backend = make_backend(automatic, model, tokenizer, model_dir, tier("tiny-1m"), log=print)
    assert isinstance(backend, GeneratingEngine)
    assert calls == [(1, 1, 2)]
