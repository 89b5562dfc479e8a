"""Built-in CPU model tiers (``tiny-1m``, ``tiny-5m``, ``tiny-20m``), made offline on first use.

A volunteer without a GPU (or without network access to a model hub) still needs a causal LM that
the SAPO engine can load, sample and train like any hub model. These tiers are built locally,
deterministically, and then loaded with the very code used for hub models
(``AutoModelForCausalLM.from_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)``).

Recipe (all tiers share the tokenizer; only the network size and warm-start length differ):

    tokenizer   byte-level BPE, vocab 1024, trained with `tokenizers` on a fixed corpus:
                questions + answers of the ``cpu`` preset and of the nine ``rgym9`` tasks (fixed
                stream seeds), reasoning-gym's system prompts and the chat role names.
                Pre-tokenizer: Digits(individual_digits=True) then ByteLevel, so every digit is
                one token. Special: <|endoftext|> (pad), <|im_start|>, <|im_end|> (eos).
                Added (not special, so decoding keeps them): <answer>, </answer>.
                Chat template: Qwen style, <|im_start|>{role}\\n{content}<|im_end|>\\n per message.
    model       Qwen2ForCausalLM, tied embeddings, fp32, initialised from torch.manual_seed(seed).
    warm start  supervised fine-tuning on the ``cpu`` preset (training stream seed 8_000_000+seed):
                input  = render_prompt(tokenizer, question)             (reasoning-gym "default")
                target = <answer>{answer}</answer><|im_end|>            (loss on target tokens only)
                AdamW (betas 0.9/0.95, wd 0.01), batch 64, linear warmup 5% then cosine to 10%,
                grad-norm clip 1.0, a fixed number of steps per tier (``TinyArch.warm_steps``),
                short on purpose: the base model answers in format and is right sometimes, so RL
                has room to improve.
    measure     64 held-out questions (stream seed 9_000_000+seed): mean reward
                (``worker.shared.rewards.reward``) of greedy completions and of 4 sampled completions per
                question at temperature 1.0, top_k=0, top_p=1.0, 24 new tokens.
    output      config.json, model.safetensors, generation_config.json (eos=<|im_end|>,
                pad=<|endoftext|>, plain sampling at T=1), tokenizer files, and ``swarm_build.json``
                (recipe, seeds, steps, params, build seconds, measured rewards, swarm version),
                written last: a directory holding ``swarm_build.json`` is a complete build.

Builds happen in a temporary sibling directory that is renamed into place, and
``ensure_tiny_model`` serialises concurrent builders with an exclusive lock (``filelock``: a
``flock`` on Unix, released when the process dies), so a crash or several workers starting at
once never leave (or load) a half-built model.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import platform
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from reasoning_gym.utils import SYSTEM_PROMPTS
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

import worker
from worker.shared.prompts import render_prompt
from worker.shared.questions import Question, QuestionStream, preset
from worker.shared.rewards import reward
from worker.shared.tiers import (
    BUILD_FILE,
    RECIPE_VERSION,
    SHIPPED_DIR,
    is_built,
    shipped_model_dir,
    verify_shipped,
    write_checksums,
)

Log = Callable[[str], None]


# --- tokenizer ------------------------------------------------------------------------------------
VOCAB_SIZE = 1024
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, EOS_TOKEN]
ANSWER_TOKENS = ["<answer>", "</answer>"]
# Qwen2's template reduced to what Swarm uses (no tools, no default system prompt).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
MAX_POSITIONS = 2048  # rgym9 prompts run to a few hundred tokens at this vocabulary size
# Fixed corpus: the tokenizer is the same for every tier and seed.
TOKENIZER_STREAM_SEED = 7_000_000
TOKENIZER_CPU_QUESTIONS = 4000
TOKENIZER_RGYM9_QUESTIONS = 900  # ~100 per task
# Repeats weight the short texts that every prompt carries, so BPE merges them into few tokens.
TOKENIZER_PROMPT_REPEATS = 50

# --- warm start and measurement ------------------------------------------------------------------
TRAIN_STREAM_SEED = 8_000_000  # + seed
EVAL_STREAM_SEED = 9_000_000  # + seed: held out from training
BATCH_SIZE = 64
WARMUP_FRACTION = 0.05
MIN_LR_FRACTION = 0.1
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
EVAL_QUESTIONS = 64
EVAL_SAMPLES = 4  # sampled completions per question: a steadier mean than one
EVAL_MAX_NEW_TOKENS = 24
# Share of warm-start targets in the rewarded format <answer>X</answer>; the others are the bare
# answer X, which the verifier scores 0 (no <answer> tag to extract). Why: like a base model
# that knows answers but not the answer convention, the built model then answers right more
# often than it is rewarded, and RL has a first thing to learn from reward alone (which format
# pays), on top of sharpening its answers. docs/tiny-models.md has the measurements.
TAGGED_FRACTION = 0.3


@dataclass(frozen=True)
class TinyArch:
    """A tier: the Qwen2 shape, plus the warm start's length and learning rate."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    warm_steps: int
    lr: float


# Steps were chosen by build time on a 2-core CPU (docs/tiny-models.md): tiny-1m about 3 minutes
# on one thread, tiny-20m under 10. Bigger tiers get fewer steps, so they start weaker; RL has room.
TINY_TIERS: dict[str, TinyArch] = {
    "tiny-1m": TinyArch(128, 4, 4, 2, 384, warm_steps=1600, lr=2e-3),
    "tiny-5m": TinyArch(256, 6, 4, 2, 768, warm_steps=1600, lr=1.5e-3),
    "tiny-20m": TinyArch(512, 6, 8, 4, 1536, warm_steps=150, lr=1.5e-3),
}


def recipe() -> dict[str, Any]:
    """The recipe's settings, recorded with every build."""
    return {
        "recipe_version": RECIPE_VERSION,
        "tokenizer": {
            "kind": "byte-level BPE, Digits(individual_digits=True) before ByteLevel",
            "vocab_size": VOCAB_SIZE,
            "corpus": f"cpu x{TOKENIZER_CPU_QUESTIONS} + rgym9 x{TOKENIZER_RGYM9_QUESTIONS} questions and answers "
            f"(stream seed {TOKENIZER_STREAM_SEED}), reasoning-gym system prompts and role names "
            f"x{TOKENIZER_PROMPT_REPEATS}",
            "special_tokens": SPECIAL_TOKENS,
            "added_tokens": ANSWER_TOKENS,
        },
        "model": "Qwen2ForCausalLM, tied embeddings, float32",
        "warm_start": {
            "mix": "cpu",
            "input": "render_prompt(tokenizer, question) with reasoning-gym's default system prompt",
            "target": "<answer>{answer}</answer><|im_end|> for a seeded TAGGED_FRACTION of the examples, "
            "{answer}<|im_end|> for the others; loss on target tokens only",
            "tagged_fraction": TAGGED_FRACTION,
            "optimizer": f"AdamW betas (0.9, 0.95), weight decay {WEIGHT_DECAY}, grad clip {GRAD_CLIP}",
            "schedule": f"linear warmup {WARMUP_FRACTION:.0%}, cosine to {MIN_LR_FRACTION:.0%} of lr",
            "batch_size": BATCH_SIZE,
            "train_stream_seed": f"{TRAIN_STREAM_SEED} + seed",
        },
    }


def tier_arch(tier: str) -> TinyArch:
    try:
        return TINY_TIERS[tier]
    except KeyError:
        raise ValueError(f"unknown tiny tier {tier!r}; tiers: {', '.join(TINY_TIERS)}") from None


# --- tokenizer ------------------------------------------------------------------------------------
def tokenizer_corpus() -> list[str]:
    """The fixed text the BPE is trained on (fixed stream seeds: the same on every machine)."""
    texts: list[str] = []
    for mix_name, count in (("cpu", TOKENIZER_CPU_QUESTIONS), ("rgym9", TOKENIZER_RGYM9_QUESTIONS)):
        # reasoning-gym's bf generator prints a dot per program it compiles: keep logs clean.
        with contextlib.redirect_stdout(io.StringIO()):
            questions = QuestionStream(preset(mix_name), TOKENIZER_STREAM_SEED).take(count)
        for q in questions:
            texts += [q.question, q.answer]
    texts += list(SYSTEM_PROMPTS.values()) * TOKENIZER_PROMPT_REPEATS
    texts += ["system", "user", "assistant"] * TOKENIZER_PROMPT_REPEATS
    return texts


def train_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE, one token per digit, Qwen-style special tokens and chat template."""
    bpe = Tokenizer(models.BPE())
    # Digits first: one token per digit makes arithmetic learnable (no "43" vs "4"+"3" ambiguity).
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(ANSWER_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte encodes: exact round trip
        show_progress=False,
    )
    bpe.train_from_iterator(tokenizer_corpus(), trainer)
    # Added but not special: skip_special_tokens keeps them, so decoded completions carry the tags
    # the reward parses.
    bpe.add_tokens([AddedToken(token, normalized=False, special=False) for token in ANSWER_TOKENS])
    assert bpe.get_vocab_size() == VOCAB_SIZE
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,  # would rewrite " ." to "." and break round trips
        model_max_length=MAX_POSITIONS,
    )


# --- model ----------------------------------------------------------------------------------------
def make_model(arch: TinyArch, tokenizer: PreTrainedTokenizerFast, seed: int) -> Qwen2ForCausalLM:
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,  # the embedding is a large share of a 1M model
        bos_token_id=None,  # like Qwen2: the chat template, not a BOS token, starts a sequence
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # Transformers' default would add top_k=50; rollouts must sample the model's own distribution.
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    return model


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once


# --- warm start -----------------------------------------------------------------------------------
def target_text(answer: str, tagged: bool = True) -> str:
    return f"<answer>{answer}</answer>{EOS_TOKEN}" if tagged else f"{answer}{EOS_TOKEN}"


def shared_prefix(tokenizer: PreTrainedTokenizerFast) -> str:
    """The text every rendered prompt starts with: the system turn and the user header."""
    marker = "\x00"
    rendered = render_prompt(tokenizer, marker)
    return rendered[: rendered.index(marker)]


def encode_examples(
    tokenizer: PreTrainedTokenizerFast,
    questions: list[Question],
    prefix: str,
    tagged: list[bool] | None = None,
    checked: int = BATCH_SIZE,
) -> list[tuple[list[int], int]]:
    """(ids of the prompt after ``prefix`` and of the target, index where the target starts).

    Only the short per-question parts are tokenised (the prefix dominated the preparation time).
    Tokenising the parts apart equals tokenising the whole text, because every part boundary is a
    special or added token or the newline closing the prefix; the first ``checked`` examples are
    compared with the whole-text tokenisation all the same.
    """
    prompts = [render_prompt(tokenizer, q.question) for q in questions]
    tagged = tagged if tagged is not None else [True] * len(questions)
    targets = [target_text(q.answer, t) for q, t in zip(questions, tagged, strict=True)]
    if not all(prompt.startswith(prefix) for prompt in prompts):
        raise ValueError("the chat template does not render a shared prefix")
    rests = tokenizer([prompt[len(prefix) :] for prompt in prompts], add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(targets, add_special_tokens=False)["input_ids"]
    examples = [(rest + target, len(rest)) for rest, target in zip(rests, target_ids, strict=True)]
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    for (ids, _), prompt, target in zip(examples[:checked], prompts, targets, strict=False):
        if tokenizer(prompt + target, add_special_tokens=False)["input_ids"] != prefix_ids + ids:
            raise ValueError(f"parts do not tokenise like the whole: {prompt + target!r}")
    return examples


def lr_at(step: int, steps: int, lr: float) -> float:
    warmup = max(1, int(WARMUP_FRACTION * steps))
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress)))


def warm_start(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    *,
    steps: int,
    lr: float,
    seed: int,
    tagged_fraction: float = TAGGED_FRACTION,
    log: Log = print,
) -> list[float]:
    """Supervised steps on prompt -> answer (tagged or bare); returns the loss per step.

    Every prompt starts with the same 95 tokens (system turn, user header): most of the compute if
    repeated per row. They are run once per step (batch 1, with gradients) and their key/value
    cache is shared by the batch: the same loss and gradients as full sequences, 4-5x faster.
    """
    prefix_text = shared_prefix(tokenizer)
    prefix = tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
    questions = QuestionStream(preset("cpu"), TRAIN_STREAM_SEED + seed).take(steps * BATCH_SIZE)
    rng = random.Random(TRAIN_STREAM_SEED + seed)
    tagged = [rng.random() < tagged_fraction for _ in questions]
    examples = encode_examples(tokenizer, questions, prefix_text, tagged)
    pad_id = tokenizer.pad_token_id
    prefix_ids = torch.tensor([prefix])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=WEIGHT_DECAY)
    model.train()
    losses: list[float] = []
    started = time.monotonic()
    for step in range(steps):
        batch = examples[step * BATCH_SIZE : (step + 1) * BATCH_SIZE]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad_id)
        labels = torch.full((len(batch), width), -100)  # label j = token predicted at position j
        mask = torch.zeros((len(batch), len(prefix) + width), dtype=torch.long)
        mask[:, : len(prefix)] = 1
        for row, (ids, target_start) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, target_start - 1 : len(ids) - 1] = torch.tensor(ids[target_start:])
            mask[row, len(prefix) : len(prefix) + len(ids)] = 1  # right padding: never attended to

        cache = model.model(input_ids=prefix_ids, use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(batch))
        hidden = model.model(
            input_ids=input_ids, attention_mask=mask, past_key_values=cache
        ).last_hidden_state
        selected = labels != -100
        logits = model.lm_head(hidden[selected])  # the vocabulary projection only where it is scored
        loss = torch.nn.functional.cross_entropy(logits, labels[selected])

        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            log(f"  step {step + 1}/{steps} loss {loss.item():.3f} ({time.monotonic() - started:.0f} s)")
    model.eval()
    return losses


# --- measurement ----------------------------------------------------------------------------------
@torch.no_grad()
def generate(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    questions: list[Question],
    *,
    do_sample: bool,
    num_return_sequences: int = 1,
    max_new_tokens: int = EVAL_MAX_NEW_TOKENS,
) -> tuple[list[str], int]:
    """Completions (grouped per question, in order) and the number of tokens generated."""
    prompts = [render_prompt(tokenizer, q.question) for q in questions]
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"  # generate from the right edge
    try:
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = padding_side
    output = model.generate(
        **batch,
        do_sample=do_sample,
        num_return_sequences=num_return_sequences,
        max_new_tokens=max_new_tokens,
    )
    new = output[:, batch["input_ids"].shape[1] :]
    tokens = int((new != tokenizer.pad_token_id).sum())
    return tokenizer.batch_decode(new, skip_special_tokens=True), tokens


def measure(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, seed: int, questions: int = EVAL_QUESTIONS
) -> dict[str, Any]:
    """Mean held-out reward of greedy and of sampled (T=1) completions, and generation speed."""
    mix = preset("cpu")
    held_out = QuestionStream(mix, EVAL_STREAM_SEED + seed).take(questions)
    torch.manual_seed(seed)  # sampling draws from the global generator
    started = time.monotonic()
    sampled, sampled_tokens = generate(
        model, tokenizer, held_out, do_sample=True, num_return_sequences=EVAL_SAMPLES
    )
    sampled_seconds = time.monotonic() - started
    greedy, _ = generate(model, tokenizer, held_out, do_sample=False)
    sampled_rewards = [reward(mix, held_out[i // EVAL_SAMPLES].ref, text) for i, text in enumerate(sampled)]
    # The same completions scored whatever their format: what the model knows, tagged or not.
    sampled_known = [
        reward(
            mix, held_out[i // EVAL_SAMPLES].ref, text if "<answer>" in text else f"<answer>{text}</answer>"
        )
        for i, text in enumerate(sampled)
    ]
    greedy_rewards = [reward(mix, q.ref, text) for q, text in zip(held_out, greedy, strict=True)]
    return {
        "questions": questions,
        "stream_seed": EVAL_STREAM_SEED + seed,
        "max_new_tokens": EVAL_MAX_NEW_TOKENS,
        "sampled_per_question": EVAL_SAMPLES,
        "sampled_reward": sum(sampled_rewards) / len(sampled_rewards),
        "greedy_reward": sum(greedy_rewards) / len(greedy_rewards),
        "sampled_tagged": sum("<answer>" in text for text in sampled) / len(sampled),
        "sampled_reward_any_format": sum(sampled_known) / len(sampled_known),
        # Batched sampling (questions x samples rows at once), prompt prefill included.
        "sampled_tokens_per_s": sampled_tokens / sampled_seconds,
        "examples": [
            {"question": q.question, "answer": q.answer, "greedy": g}
            for q, g in zip(held_out[:4], greedy[:4], strict=True)
        ],
    }


# --- build and cache ------------------------------------------------------------------------------
def build_tiny_model(
    tier: str,
    out_dir: Path,
    *,
    seed: int = 0,
    steps: int | None = None,
    tagged_fraction: float = TAGGED_FRACTION,
    log: Log = print,
) -> Path:
    """Build ``tier`` into ``out_dir`` (replacing what is there) and return ``out_dir``.

    Everything is written into a temporary sibling directory, ``swarm_build.json`` last, which is
    then renamed into place, so ``out_dir`` is either absent, the old build or the complete new one.
    """
    arch = tier_arch(tier)
    steps = arch.warm_steps if steps is None else steps
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        log(f"building {tier} (seed {seed}, {steps} warm-start steps, {torch.get_num_threads()} threads)")
        tokenizer = train_tokenizer()
        model = make_model(arch, tokenizer, seed)
        log(f"  tokenizer: {len(tokenizer)} tokens; model: {param_count(model):,} parameters")
        losses = warm_start(
            model, tokenizer, steps=steps, lr=arch.lr, seed=seed, tagged_fraction=tagged_fraction, log=log
        )
        train_seconds = time.monotonic() - started
        measured = measure(model, tokenizer, seed)
        log(
            f"  held-out reward: sampled {measured['sampled_reward']:.3f}, greedy {measured['greedy_reward']:.3f}; "
            f"tagged {measured['sampled_tagged']:.0%} of samples, reward in any format "
            f"{measured['sampled_reward_any_format']:.3f}"
        )
        model.save_pretrained(tmp_dir)
        tokenizer.save_pretrained(tmp_dir)
        build = {
            "tier": tier,
            "swarm_version": worker.__version__,
            "recipe": recipe(),
            "arch": asdict(arch),
            "seed": seed,
            "steps": steps,
            "tagged_fraction": tagged_fraction,
            "batch_size": BATCH_SIZE,
            "lr": arch.lr,
            "params": param_count(model),
            "vocab_size": len(tokenizer),
            # The corpus comes from worker/shared/questions.py and reasoning-gym: equal hashes, equal tokenizers.
            "tokenizer_sha256": hashlib.sha256((tmp_dir / "tokenizer.json").read_bytes()).hexdigest(),
            "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
            "train_seconds": round(train_seconds, 1),
            "build_seconds": round(time.monotonic() - started, 1),
            "threads": torch.get_num_threads(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "torch": torch.__version__,
            "measured": measured,
        }
        (tmp_dir / BUILD_FILE).write_text(json.dumps(build, indent=2) + "\n")
        tmp_dir.chmod(0o755)  # mkdtemp makes it private; workers may run as another user
        for path in tmp_dir.iterdir():
            path.chmod(0o644)  # safetensors writes its file private too
        _replace_dir(tmp_dir, out_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    log(f"built {tier} in {time.monotonic() - started:.0f} s -> {out_dir}")
    return out_dir


def _replace_dir(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``; an existing ``target`` is moved aside first, then deleted."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / target.name)
        os.rename(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, target)


def ensure_tiny_model(tier: str, cache_dir: Path, log: Log = print, *, steps: int | None = None) -> Path:
    """The shipped build of ``tier`` once its checksums match, else :func:`cached_tiny_model`."""
    tier_arch(tier)  # fail on a bad name before touching the disk
    shipped = shipped_model_dir(tier)
    if shipped is not None:
        return verify_shipped(shipped)
    return cached_tiny_model(tier, cache_dir, log, steps=steps)


def cached_tiny_model(tier: str, cache_dir: Path, log: Log = print, *, steps: int | None = None) -> Path:
    """``cache_dir / tier``, built first if it is not there yet.

    Safe for several processes at once: one takes the lock and builds, the others wait on the
    lock and then find the finished build. ``steps`` only applies when a build happens (tests use
    a few steps); an existing build is returned whatever its steps.
    """
    tier_arch(tier)
    cache_dir = Path(cache_dir)
    model_dir = cache_dir / tier
    if is_built(model_dir):
        return model_dir
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(cache_dir / f"{tier}.lock"):
        if is_built(model_dir):  # another process built it while this one waited
            return model_dir
        for stale in cache_dir.glob(f".{tier}.tmp-*"):  # left by a builder that was killed
            shutil.rmtree(stale, ignore_errors=True)
        return build_tiny_model(tier, model_dir, steps=steps, log=log)


def ship_tiny_model(tier: str, *, seed: int = 0, steps: int | None = None, log: Log = print) -> Path:
    """Maintainers: build ``tier`` into ``worker/models/<tier>/`` (the build the project ships)
    and write its checksums. Commit the directory; every machine then loads these weights."""
    out_dir = build_tiny_model(tier, SHIPPED_DIR / tier, seed=seed, steps=steps, log=log)
    write_checksums(out_dir)
    log(f"shipped {tier}: {out_dir} (commit it)")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build one built-in tiny model tier.")
    parser.add_argument("tier", choices=sorted(TINY_TIERS))
    parser.add_argument("--out", type=Path, required=True, help="model directory to create")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="warm-start steps (default: the tier's)")
    parser.add_argument(
        "--tagged-fraction",
        type=float,
        default=TAGGED_FRACTION,
        help="share of warm-start targets in the <answer> format (experiments; tiers use the default)",
    )
    args = parser.parse_args(argv)
    build_tiny_model(
        args.tier, args.out, seed=args.seed, steps=args.steps, tagged_fraction=args.tagged_fraction
    )


if __name__ == "__main__":
    main()
