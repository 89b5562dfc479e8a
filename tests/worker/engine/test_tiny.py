"""The built-in tiny tiers: tokenizer, chat template, warm-started model, cache and build lock.

Real tokenizer, real model, real reasoning-gym verifier. tiny-1m comes from the shared model
cache (``tiny_1m_dir`` in conftest.py), built there once per machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from reasoning_gym.utils import SYSTEM_PROMPTS
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.servers import ROOT
from worker.engine.tiny import (
    BUILD_FILE,
    EVAL_STREAM_SEED,
    TINY_TIERS,
    build_tiny_model,
    ensure_tiny_model,
    make_model,
    param_count,
    recipe,
    tier_arch,
    train_tokenizer,
)
from worker.shared.prompts import render_prompt
from worker.shared.questions import QuestionStream, preset
from worker.shared.rewards import reward
from worker.shared.tiers import SHIPPED_DIR, ShippedModelDamaged, verify_shipped


@pytest.fixture(scope="session")
def tiny_1m(tiny_1m_dir: Path) -> Path:
    """The tiny-1m directory, built on first use (minutes on a 2-core CPU)."""
    return tiny_1m_dir


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    """The tiers' tokenizer after a save/load round trip: what a worker actually loads."""
    directory = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer().save_pretrained(directory)
    return AutoTokenizer.from_pretrained(directory)


def sample_texts() -> list[str]:
    texts = []
    for mix in ("cpu", "rgym9"):
        for q in QuestionStream(preset(mix), 12345).take(40):
            texts += [q.question, q.answer]
    texts += list(SYSTEM_PROMPTS.values())
    texts += ["  leading and trailing  ", "tabs\tand\nnewlines\n\n", "héllo wörld ∑ 😀", "-0.5e3 / 1,000"]
    return texts


def test_tokenizer_round_trips_reasoning_gym_text(tokenizer):
    for text in sample_texts():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    prompt = render_prompt(tokenizer, "What is 2 + 2?") + "<answer>4</answer><|im_end|>"
    assert tokenizer.decode(tokenizer(prompt)["input_ids"]) == prompt


def test_answer_tags_are_single_tokens_and_digits_split(tokenizer):
    assert len(tokenizer) == 1024
    ids = tokenizer("<answer>-4071</answer>", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["<answer>", "-", "4", "0", "7", "1", "</answer>"]
    # Not special: completions decoded for the reward keep their tags.
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<answer>-4071</answer>"
    pieces = tokenizer.convert_ids_to_tokens(
        tokenizer("98 + 93 = 191", add_special_tokens=False)["input_ids"]
    )
    assert all(len(piece.lstrip("Ġ")) <= 1 for piece in pieces if any(c.isdigit() for c in piece))
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"


def test_chat_template_renders_system_prompt_and_assistant_header(tokenizer):
    prompt = render_prompt(tokenizer, "Spell this word backward (example: sun -> nus): cat")
    assert prompt == (
        f"<|im_start|>system\n{SYSTEM_PROMPTS['default']}<|im_end|>\n"
        "<|im_start|>user\nSpell this word backward (example: sun -> nus): cat<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    closed = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=False
    )
    assert closed == "<|im_start|>user\nhi<|im_end|>\n"


def test_tiers_have_the_specified_shapes():
    shapes = {
        name: (a.hidden_size, a.num_layers, a.num_heads, a.num_kv_heads, a.intermediate_size)
        for name, a in TINY_TIERS.items()
    }
    assert shapes == {
        "tiny-1m": (128, 4, 4, 2, 384),
        "tiny-5m": (256, 6, 4, 2, 768),
        "tiny-20m": (512, 6, 8, 4, 1536),
    }


def test_failed_build_leaves_nothing_behind(tmp_path: Path):
    def crash(message: str) -> None:
        if "parameters" in message:  # after the tokenizer and model exist, before training
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        build_tiny_model("tiny-1m", tmp_path / "tiny-1m", log=crash)
    assert list(tmp_path.iterdir()) == []


def test_unknown_tier_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="unknown tiny tier"):
        ensure_tiny_model("tiny-3b", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_model_loads_like_a_hub_model(tiny_1m: Path):
    model = AutoModelForCausalLM.from_pretrained(tiny_1m)
    tokenizer = AutoTokenizer.from_pretrained(tiny_1m)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert 0.8e6 < sum(p.numel() for p in model.parameters()) < 1.1e6
    assert model.config.tie_word_embeddings
    generation = model.generation_config
    assert generation.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert generation.pad_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert (generation.do_sample, generation.top_k, generation.top_p, generation.temperature) == (
        True,
        0,
        1.0,
        1.0,
    )
    build = json.loads((tiny_1m / BUILD_FILE).read_text())
    assert hashlib.sha256((tiny_1m / "tokenizer.json").read_bytes()).hexdigest() == build["tokenizer_sha256"]
    ids = tokenizer("<answer>42</answer>", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["<answer>", "4", "2", "</answer>"]


@pytest.mark.slow
def test_warm_start_rewards_leave_room_for_rl(tiny_1m: Path):
    build = json.loads((tiny_1m / BUILD_FILE).read_text())
    measured = build["measured"]
    assert 0.02 < measured["sampled_reward"] < 0.6
    # Some answers are in the rewarded format, most are bare (TAGGED_FRACTION): the model knows
    # more than it is rewarded for, which is RL's first thing to learn.
    assert 0.1 < measured["sampled_tagged"] < 0.6
    assert measured["sampled_reward_any_format"] > measured["sampled_reward"] + 0.05
    assert build["params"] < 1.1e6
    assert build["swarm_version"]

    # Re-measure a few held-out questions greedily with the loaded model and the real verifier.
    model = AutoModelForCausalLM.from_pretrained(tiny_1m)
    tokenizer = AutoTokenizer.from_pretrained(tiny_1m, padding_side="left")
    mix = preset("cpu")
    questions = QuestionStream(mix, EVAL_STREAM_SEED + build["seed"]).take(16)
    batch = tokenizer(
        [render_prompt(tokenizer, q.question) for q in questions], return_tensors="pt", padding=True
    )
    with torch.no_grad():
        output = model.generate(**batch, do_sample=False, max_new_tokens=24)
    completions = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    # Each answer is tagged or bare, nothing else: wrapped in tags, some are right.
    assert all(text.startswith("<answer>") or "<" not in text for text in completions)
    wrapped = [text if text.startswith("<answer>") else f"<answer>{text}</answer>" for text in completions]
    assert sum(reward(mix, q.ref, text) for q, text in zip(questions, wrapped, strict=True)) > 0


@pytest.mark.slow
def test_ensure_returns_an_existing_build_at_once(tiny_1m: Path):
    build_file = tiny_1m / BUILD_FILE
    before = build_file.stat().st_mtime_ns
    started = time.monotonic()
    assert ensure_tiny_model("tiny-1m", tiny_1m.parent, log=pytest.fail) == tiny_1m
    assert time.monotonic() - started < 1.0
    assert build_file.stat().st_mtime_ns == before


# Each process waits for a "go" file so both reach cached_tiny_model together (the cache's build,
# what a tier the project does not ship goes through), then calls it on the same empty cache
# with a 2-step warm start.
RACE_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from worker.engine.tiny import cached_tiny_model

    cache, name = Path(sys.argv[1]), sys.argv[2]
    (cache.parent / f"ready-{name}").touch()
    while not (cache.parent / "go").exists():
        time.sleep(0.01)
    print("RESULT", cached_tiny_model("tiny-1m", cache, steps=2), flush=True)
    """
)


@pytest.mark.slow
def test_concurrent_ensure_builds_once(tmp_path: Path):
    cache = tmp_path / "models"
    # One thread each: two processes share the machine's cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACE_SCRIPT, str(cache), name],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("a", "b")
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{name}").exists() for name in ("a", "b")):
        assert time.monotonic() < deadline, "workers did not start"
        assert all(p.poll() is None for p in processes), [p.communicate()[0] for p in processes]
        time.sleep(0.05)
    (tmp_path / "go").touch()
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs

    assert sum(out.count("building tiny-1m") for out in outputs) == 1, outputs
    assert all(f"RESULT {cache / 'tiny-1m'}" in out for out in outputs), outputs
    assert json.loads((cache / "tiny-1m" / BUILD_FILE).read_text())["steps"] == 2
    assert sorted(p.name for p in cache.iterdir()) == ["tiny-1m", "tiny-1m.lock"]  # no temp dirs left


@pytest.mark.slow
def test_command_line_builds_a_tier(tmp_path: Path):
    out = tmp_path / "built"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "worker.engine.tiny",
            "tiny-1m",
            "--out",
            str(out),
            "--steps",
            "1",
            "--seed",
            "3",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    build = json.loads((out / BUILD_FILE).read_text())
    assert (build["tier"], build["steps"], build["seed"]) == ("tiny-1m", 1, 3)
    assert AutoModelForCausalLM.from_pretrained(out).config.model_type == "qwen2"


# --- the shipped tiers (worker/models/) -----------------------------------------------------------
SHIPPED = sorted(
    path.name for path in SHIPPED_DIR.iterdir() if path.is_dir() and not path.name.startswith(".")
)


def test_the_demo_tiers_are_shipped_and_load_without_a_build(tmp_path: Path):
    assert {"tiny-1m", "tiny-5m"} <= set(SHIPPED)
    for name in SHIPPED:
        path = ensure_tiny_model(name, tmp_path / "empty-cache", log=pytest.fail)
        assert path == SHIPPED_DIR / name
        assert not (tmp_path / "empty-cache").exists()  # nothing built, nothing cached
        build = json.loads((path / BUILD_FILE).read_text())
        assert AutoModelForCausalLM.from_pretrained(path).num_parameters() == build["params"]


@pytest.mark.parametrize("name", SHIPPED)
def test_a_rebuild_reproduces_the_shipped_build_s_recorded_config(name: str, tmp_path: Path):
    """What CI can afford of a rebuild: the recipe, the tier's shape and warm start, the
    tokenizer (trained again, byte for byte) and the model's config are the shipped build's.
    (The weights take minutes and differ across CPUs; docs/tiny-models.md.)"""
    shipped = SHIPPED_DIR / name
    build = json.loads((shipped / BUILD_FILE).read_text())
    arch = tier_arch(name)
    assert build["recipe"] == json.loads(json.dumps(recipe()))
    assert build["arch"] == dataclasses.asdict(arch)
    assert (build["steps"], build["lr"], build["seed"]) == (arch.warm_steps, arch.lr, 0)
    tokenizer = train_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    shipped_json = (shipped / "tokenizer.json").read_bytes()
    assert hashlib.sha256(shipped_json).hexdigest() == build["tokenizer_sha256"]

    def pipeline(text: bytes) -> dict:  # the trained tokenizer, without the padding its use set
        return {k: v for k, v in json.loads(text).items() if k not in ("padding", "truncation")}

    assert pipeline((tmp_path / "tokenizer.json").read_bytes()) == pipeline(shipped_json)
    model = make_model(arch, tokenizer, seed=0)
    model.save_pretrained(tmp_path / "model")
    rebuilt = json.loads((tmp_path / "model" / "config.json").read_text())
    assert rebuilt == json.loads((shipped / "config.json").read_text())
    assert param_count(model) == build["params"]


def test_a_damaged_shipped_model_is_refused_with_the_file_named(tmp_path: Path):
    copy = tmp_path / "tiny-1m"
    shutil.copytree(SHIPPED_DIR / "tiny-1m", copy)
    assert verify_shipped(copy) == copy
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of one weight
    (copy / "model.safetensors").write_bytes(bytes(weights))
    fresh = tmp_path / "again" / "tiny-1m"  # verify_shipped checks a directory once per process
    shutil.copytree(copy, fresh)
    with pytest.raises(ShippedModelDamaged, match=r"model\.safetensors"):
        verify_shipped(fresh)
    (fresh / "extra.bin").write_bytes(b"x")
    with pytest.raises(ShippedModelDamaged, match=r"extra\.bin"):
        verify_shipped(fresh)
