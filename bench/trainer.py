"""Whole GRPO training rounds: this project's engine against TRL's GRPOTrainer, in one process.

    .venv/bin/python bench/trainer.py [--tier tiny-1m --questions 8 --group-size 8 --max-new-tokens 24
                                       --rounds 5 --blocks 3 --threads 1]

A round is what one optimizer update costs end to end: take B questions (the ``cpu`` task
preset), sample G completions for each with the current policy (transformers ``generate``, no
vLLM, CPU), score every completion with reasoning-gym's verifier (``worker.shared.rewards.reward``), then
one DAPO step. Both sides are configured alike:

    engine   worker.engine.agent.Agent on an isolated LocalTransport (I = B, J = 0), TransformersBackend
    TRL      GRPOTrainer, loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0, num_iterations=1,
             scale_rewards="group", mask_truncated_completions=False, temperature=1, top_k=0,
             top_p=1, the same learning rate (constant), AdamW (torch), max_grad_norm=1, fp32,
             no gradient checkpointing, no logging or saving; per_device_train_batch_size = the
             engine's micro-batch and gradient_accumulation_steps = steps_per_generation = B*G /
             micro-batch, so one generation batch is exactly B questions x G completions of the
             current policy and feeds exactly one optimizer step (no old-logprob pass).

Prompts: TRL gets conversational prompts (reasoning-gym's default system prompt + question) and
renders them with the same chat template; the token ids are checked equal to the engine's for
every question before anything is measured. Questions: round r of either side gets stream
positions r*B .. r*B+B-1 (TRL's dataset is that stream in order, unshuffled); checked too.

Measurement: each block loads both models fresh from the tier's directory (identical weights,
checked by a fingerprint), runs one unmeasured warm-up round, then ``--rounds`` measured rounds,
timed from the end of the warm-up round to the end of the last round, so everything in the loop
counts (generation, scoring, advantages, the update, the trainer's own bookkeeping) and set-up
does not. Blocks alternate which side goes first (engine, TRL | TRL, engine | ...) so machine
noise falls on both. Tokens are the completion tokens actually sampled (up to and including the
end-of-sequence token). After each block both sides must have computed finite losses (TRL: one per
micro-batch of every step) and changed their weights, or the bench stops. Last line:
``ratio=`` engine rounds/s over TRL rounds/s.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from worker.engine.agent import Agent  # noqa: E402
from worker.engine.generation.hf import TransformersBackend  # noqa: E402
from worker.engine.policy import load_policy, resolve  # noqa: E402
from worker.shared.config import AgentConfig  # noqa: E402
from worker.shared.config import GRPOConfig as EngineGRPOConfig  # noqa: E402
from worker.shared.prompts import chat_messages, render_prompt  # noqa: E402
from worker.shared.questions import QuestionRef, QuestionStream, TaskMix, preset  # noqa: E402
from worker.shared.rewards import reward  # noqa: E402
from worker.shared.tiers import tier  # noqa: E402

ENGINE_MICRO_BATCH = EngineGRPOConfig().micro_batch_size


@dataclass
class Workload:
    spec_name: str
    cache_dir: Path
    mix: TaskMix
    questions: int  # B
    group_size: int  # G
    max_new_tokens: int
    rounds: int  # measured rounds per block (after one warm-up round)
    learning_rate: float
    micro_batch: int
    seed: int
    threads: int


@dataclass
class BlockResult:
    side: str
    rounds: int
    seconds: float
    tokens: int
    completions: int
    threads: int
    weight_change: float  # largest absolute parameter change over the block


def micro_batch_for(total: int, cap: int) -> int:
    """The largest divisor of ``total`` not above ``cap``: one micro-batch size both sides can use."""
    return max(d for d in range(1, min(total, cap) + 1) if total % d == 0)


def fingerprint(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> float:
    """Largest absolute parameter change since ``before``."""
    return max((p.detach() - before[name]).abs().max().item() for name, p in model.named_parameters())


def load(work: Workload):
    spec = tier(work.spec_name)
    return load_policy(spec, work.cache_dir, log=lambda _: None)


# --- this project's engine -------------------------------------------------------------------------
def run_engine(work: Workload, expected_fingerprint: str, round_refs: list[list[tuple]]) -> BlockResult:
    from worker.engine.transport import LocalTransport

    leased: list[list[tuple]] = []

    class RecordingTransport(LocalTransport):
        def lease(self, agent_id, round, count):
            lease = super().lease(agent_id, round, count)
            leased.append([(q.ref.task, q.ref.seed, q.ref.index) for q in lease.questions])
            return lease

    torch.manual_seed(work.seed)
    model, tokenizer = load(work)
    assert fingerprint(model) == expected_fingerprint, "engine did not start from the tier's weights"
    before = snapshot(model)
    config = AgentConfig(
        questions_per_round=work.questions,
        group_size=work.group_size,
        num_local=work.questions,
        num_external=0,
        local_strategy="uniform",
        max_new_tokens=work.max_new_tokens,
        seed=work.seed,
        grpo=EngineGRPOConfig(
            learning_rate=work.learning_rate,
            eps_low=0.2,
            eps_high=0.28,
            beta=0.0,
            num_iterations=1,
            max_grad_norm=1.0,
            temperature=1.0,
            scale_rewards="group",
            mask_truncated_completions=False,
            micro_batch_size=work.micro_batch,
        ),
    )
    transport = RecordingTransport(work.mix, seed=work.seed)
    agent = Agent(
        "bench",
        work.spec_name,
        model,
        tokenizer,
        TransformersBackend(model, tokenizer),
        transport,
        work.mix,
        config,
    )
    tokens = completions = 0
    losses = []
    start = 0.0
    for round_index in range(work.rounds + 1):
        if round_index == 0:
            agent.run_round()  # warm-up
            start = time.perf_counter()
            continue
        metrics = agent.run_round()
        tokens += int(metrics["generated_tokens"])
        completions += work.questions * work.group_size
        losses.append(metrics["loss"])
    seconds = time.perf_counter() - start
    threads = torch.get_num_threads()
    assert metrics["trained"] == 1.0, "the engine skipped its update"
    assert all(math.isfinite(loss) for loss in losses), "the engine's loss is not finite"
    delta = changed(model, before)
    assert delta > 0, "the engine's weights did not change"
    assert leased == round_refs, "the engine's rounds got other questions than expected"
    return BlockResult("engine", work.rounds, seconds, tokens, completions, threads, delta)


# --- TRL -------------------------------------------------------------------------------------------
def trl_dataset(work: Workload):
    from datasets import Dataset

    questions = QuestionStream(work.mix, work.seed).take((work.rounds + 1) * work.questions)
    return Dataset.from_list(
        [
            {
                "prompt": chat_messages(q.question),
                "task": q.ref.task,
                "ref_seed": q.ref.seed,
                "ref_index": q.ref.index,
            }
            for q in questions
        ]
    )


def trl_config(work: Workload, output_dir: str):
    from trl import GRPOConfig

    sequences = work.questions * work.group_size
    return GRPOConfig(
        output_dir=output_dir,
        # the workload
        num_generations=work.group_size,
        per_device_train_batch_size=work.micro_batch,
        gradient_accumulation_steps=sequences // work.micro_batch,
        steps_per_generation=sequences // work.micro_batch,  # one generation batch = one optimizer step
        max_completion_length=work.max_new_tokens,
        max_steps=work.rounds + 1,
        shuffle_dataset=False,
        # sampling: plain softmax(logits / T), as the engine
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        min_p=None,
        repetition_penalty=1.0,
        use_vllm=False,
        # the objective
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_iterations=1,
        scale_rewards="group",
        mask_truncated_completions=False,
        # the optimizer, as worker/engine/trainer.py: AdamW, constant lr, no weight decay, clip 1.0
        learning_rate=work.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        weight_decay=0.0,
        max_grad_norm=1.0,
        # CPU, fp32, no checkpointing (TRL defaults to bf16 and gradient checkpointing)
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        dataloader_pin_memory=False,
        dataloader_num_workers=0,
        # no logging, saving or reporting
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        disable_tqdm=True,
        log_completions=False,
        seed=work.seed,
        data_seed=work.seed,
        remove_unused_columns=False,
    )


def run_trl(
    work: Workload,
    expected_fingerprint: str,
    engine_prompt_ids: list[list[int]],
    round_refs: list[list[tuple]],
) -> BlockResult:
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    torch.manual_seed(work.seed)
    model, tokenizer = load(work)
    assert fingerprint(model) == expected_fingerprint, "TRL did not start from the tier's weights"
    before = snapshot(model)
    mix = work.mix
    per_call_tokens: list[int] = []
    per_call_refs: list[list[tuple]] = []

    def reasoning_gym_reward(prompts, completions, completion_ids, task, ref_seed, ref_index, **_):
        per_call_tokens.append(sum(len(ids) for ids in completion_ids))
        per_call_refs.append(list(dict.fromkeys(zip(task, ref_seed, ref_index, strict=True))))
        return [
            reward(mix, QuestionRef(t, s, i), c if isinstance(c, str) else c[0]["content"])
            for c, t, s, i in zip(completions, task, ref_seed, ref_index, strict=True)
        ]

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.threads = 0

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())
            self.threads = torch.get_num_threads()

    clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as output_dir:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reasoning_gym_reward,
            args=trl_config(work, output_dir),
            train_dataset=trl_dataset(work),
            processing_class=tokenizer,
            callbacks=[clock],
        )
        trainer.remove_callback(PrinterCallback)  # it would print the end-of-training summary
        losses: list[torch.Tensor] = []
        compute_loss = trainer._compute_loss

        def recording_compute_loss(model, inputs):  # only keeps a reference: no extra work in the step
            loss = compute_loss(model, inputs)
            losses.append(loss.detach())
            return loss

        trainer._compute_loss = recording_compute_loss
        # TRL's own prompt tokenisation must give the engine's ids for every question.
        rows = trainer.train_dataset
        trl_ids = trainer._tokenize_prompts([rows[i]["prompt"] for i in range(len(rows))])[0]
        assert [list(ids) for ids in trl_ids] == engine_prompt_ids, (
            "TRL's prompt token ids differ from the engine's"
        )
        output = trainer.train()
    assert len(clock.ends) == work.rounds + 1, f"TRL ran {len(clock.ends)} steps, expected {work.rounds + 1}"
    assert len(per_call_tokens) == work.rounds + 1, "TRL did not generate once per optimizer step"
    assert per_call_refs == round_refs, "TRL's rounds got other questions than the engine's"
    micro_steps = (work.rounds + 1) * trainer.args.gradient_accumulation_steps
    assert len(losses) == micro_steps, f"TRL computed {len(losses)} losses, expected {micro_steps}"
    assert all(torch.isfinite(loss) for loss in losses), "TRL's loss is not finite"
    assert torch.isfinite(torch.tensor(output.training_loss)), "TRL's loss is not finite"
    delta = changed(model, before)
    assert delta > 0, "TRL's weights did not change"
    seconds = clock.ends[-1] - clock.ends[0]
    tokens = sum(per_call_tokens[1:])
    completions = work.rounds * work.questions * work.group_size
    return BlockResult("trl", work.rounds, seconds, tokens, completions, clock.threads, delta)


# --- main ------------------------------------------------------------------------------------------
def quiet() -> None:
    os.environ.setdefault("WANDB_DISABLED", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    for name in ("transformers", "trl", "accelerate", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tier", default="tiny-1m")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "data" / "models")
    parser.add_argument("--questions", type=int, default=8, help="B: questions per round")
    parser.add_argument("--group-size", type=int, default=8, help="G: completions per question")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per block and side")
    parser.add_argument("--blocks", type=int, default=3, help="alternating blocks per side")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads, both sides (1: a ~1M-parameter model gains little from more, and on a shared "
        "machine extra threads mostly measure contention)",
    )
    parser.add_argument("--tasks", default="cpu", help="task preset the questions come from")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.blocks < 1 or args.questions < 1 or args.group_size < 2:
        parser.error("need --rounds >= 1, --blocks >= 1, --questions >= 1, --group-size >= 2")

    quiet()
    torch.set_num_threads(args.threads)
    import transformers
    import trl

    spec = tier(args.tier)
    resolve(spec, args.cache_dir, log=lambda line: print(f"# {line}", flush=True))  # waits for a build
    sequences = args.questions * args.group_size
    work = Workload(
        spec_name=spec.name,
        cache_dir=args.cache_dir,
        mix=preset(args.tasks),
        questions=args.questions,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        rounds=args.rounds,
        learning_rate=spec.learning_rate,
        micro_batch=micro_batch_for(sequences, ENGINE_MICRO_BATCH),
        seed=args.seed,
        threads=args.threads,
    )
    model, tokenizer = load(work)
    expected = fingerprint(model)
    questions = QuestionStream(work.mix, work.seed).take((work.rounds + 1) * work.questions)
    round_refs = [
        [
            (q.ref.task, q.ref.seed, q.ref.index)
            for q in questions[r * work.questions : (r + 1) * work.questions]
        ]
        for r in range(work.rounds + 1)
    ]
    engine_prompt_ids = [
        tokenizer(render_prompt(tokenizer, q.question), add_special_tokens=False)["input_ids"]
        for q in questions
    ]
    print(
        f"# tier={spec.name} params={sum(p.numel() for p in model.parameters())} weights={expected} "
        f"tasks={args.tasks} B={work.questions} G={work.group_size} max_new_tokens={work.max_new_tokens} "
        f"temperature=1.0 top_k=0 top_p=1.0 lr={work.learning_rate} loss=dapo eps=0.2/0.28 beta=0 "
        f"micro_batch={work.micro_batch} x{sequences // work.micro_batch} rounds={work.rounds} "
        f"blocks={args.blocks} torch_threads={torch.get_num_threads()} torch={torch.__version__} "
        f"transformers={transformers.__version__} trl={trl.__version__}",
        flush=True,
    )
    del model

    results: dict[str, list[BlockResult]] = {"engine": [], "trl": []}
    for block in range(args.blocks):
        order = ("engine", "trl") if block % 2 == 0 else ("trl", "engine")
        for side in order:
            torch.set_num_threads(args.threads)
            if side == "trl":
                result = run_trl(work, expected, engine_prompt_ids, round_refs)
            else:
                result = run_engine(work, expected, round_refs)
            assert result.threads == args.threads, f"{side} ran with {result.threads} torch threads"
            results[side].append(result)
            print(
                f"block={block} side={side} rounds={result.rounds} seconds={result.seconds:.3f} "
                f"rounds_per_s={result.rounds / result.seconds:.3f} tokens={result.tokens} "
                f"tokens_per_s={result.tokens / result.seconds:.1f} "
                f"mean_completion_tokens={result.tokens / result.completions:.2f} threads={result.threads} "
                f"max_weight_change={result.weight_change:.2e}",
                flush=True,
            )

    rates = {}
    for side, runs in results.items():
        rounds = sum(r.rounds for r in runs)
        seconds = sum(r.seconds for r in runs)
        tokens = sum(r.tokens for r in runs)
        completions = sum(r.completions for r in runs)
        rates[side] = (rounds / seconds, tokens / seconds)
        print(
            f"total side={side} rounds={rounds} seconds={seconds:.3f} rounds_per_s={rates[side][0]:.3f} "
            f"tokens={tokens} tokens_per_s={rates[side][1]:.1f} "
            f"mean_completion_tokens={tokens / completions:.2f}"
        )
    print(f"tokens_ratio={rates['engine'][1] / rates['trl'][1]:.2f}")
    print(f"ratio={rates['engine'][0] / rates['trl'][0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
