"""``swarm-worker simulate``: N agents over an in-process pool (worker/research/simulate.py).

A simulated swarm runs a campaign's settings: its flags for them are built from the campaign's
declarations (worker/cli/declared.py: ``--questions-per-round``, ``--num-local``,
``--grpo-learning-rate``...; the older ``--questions``, ``--local``, ``--lr``... are aliases),
checked as a campaign is checked (bounds and the rules between settings, every problem
printed, exit 2), and turned into each agent's AgentConfig as a campaign's node gets it
(``CampaignConfig.agent_config``). The simulator's own options (agents, arms, controls,
backend...) follow.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from worker.cli.declared import add_declared_command, add_setting_flag, given
from worker.cli.defaults import fill_defaults, formatter

PROG = "swarm-worker simulate"

# The campaign settings a simulation takes, with the command's older flag names.
SETTING_ALIASES: dict[str, tuple[str, ...]] = {
    "questions_per_round": ("--questions",),
    "group_size": (),
    "num_local": ("--local",),
    "num_external": ("--external",),
    "local_strategy": (),
    "external_strategy": (),
    "batch_rule": (),
    "decay_rounds": (),
    "max_new_tokens": (),
    "system_prompt": (),
    "format_weight": (),
    "seed": (),
    "rounds": (),
    "pool_window": (),
    "grpo.learning_rate": ("--lr",),
    "grpo.num_iterations": ("--num-iterations",),
    "grpo.temperature": ("--temperature",),
    "grpo.beta": ("--beta",),
    "grpo.external_importance_sampling_correction": ("--external-is",),
}
# The simulator's own options whose default is its configuration's (worker/cli/defaults.py).
OWN_DEFAULTS = {
    "checkpoint_every": "worker.research.simulate:SimulationConfig.checkpoint_every",
    "backend": "worker.research.simulate:SimulationConfig.backend",
    "device": "worker.research.simulate:SimulationConfig.device",
}


def build_parser() -> argparse.ArgumentParser:
    from worker.shared.campaign import SETTINGS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run N agents over an in-process pool.",
        formatter_class=formatter(OWN_DEFAULTS),
    )
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--tier", default="tiny-1m")
    parser.add_argument("--tasks", default="cpu", help="task preset (cpu, rgym9)")
    parser.add_argument("--out", type=Path, default=Path("results.json"))
    parser.add_argument(
        "--controls", action="store_true", help="also run the isolated and filtered-isolated arms"
    )
    parser.add_argument(
        "--control-kinds",
        default=None,
        help="comma-separated isolated controls to run beside the arm: isolated, filtered, self "
        "(I/J-self: J from the agent's own last pool-window/agents groups), dyn (over-generation "
        "to I + J informative groups, at most 2 (I + J) questions); implies --controls",
    )
    parser.add_argument(
        "--preset", choices=["sapo-table"], help="run the paper's arms plus the missing controls"
    )
    parser.add_argument(
        "--arms",
        default=None,
        help="comma-separated study arms to run instead (e.g. 8/0,4/4@B4,backfill,4/4-decay,4/4-is; "
        "any of them at another B as <arm>@B<n>); --questions-per-round is the B of those without their own",
    )
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=None, help="rounds; 0: never")
    parser.add_argument(
        "--backend",
        choices=["auto", "transformers", "vllm"],  # worker/engine/generation/select.py's BACKENDS
        default=None,
        help="generation backend of every agent (vllm: one engine per agent, synced after each step)",
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default=None, help="where every agent trains and generates"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    settings = parser.add_argument_group("campaign settings (default: the campaign's declaration)")
    for path, aliases in SETTING_ALIASES.items():
        words = "default: the tier's" if path == "grpo.learning_rate" else None
        add_setting_flag(settings, SETTINGS[path], aliases, default_words=words)
    return parser


def fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def cmd_simulate(args: argparse.Namespace) -> int:
    from worker.engine.generation.select import BackendUnavailable
    from worker.research.simulate import SimulationConfig, simulate
    from worker.shared.arms import Arm, controls_for, pool_share_window, sapo_table_arms
    from worker.shared.campaign import SETTINGS, CampaignConfig
    from worker.shared.config import ROUND
    from worker.shared.questions import TaskError, preset

    fill_defaults(args, OWN_DEFAULTS)
    try:
        tasks = preset(args.tasks).to_json()
    except (KeyError, TaskError) as error:
        return fail(f"--tasks: {error}")
    values = {**given(args, SETTINGS), "tiers": [args.tier], "tasks": tasks}
    named = bool(args.arms or args.preset)
    if named:  # the arms set I and J: the defaults need only fit B
        b = values.get("questions_per_round", ROUND.questions_per_round)
        values["num_local"] = min(values.get("num_local", ROUND.num_local), b)
    if problems := CampaignConfig.check(values):
        for problem in problems:
            print(f"{PROG}: {problem.path}: {problem.message}", file=sys.stderr)
        return 2
    campaign = CampaignConfig.from_json(values)
    b = campaign.questions_per_round
    self_window = pool_share_window(campaign.pool_window, args.agents)
    if args.arms:  # the study's arms by name (the lab's, lab/swarm_lab/study.py), <arm>@B<n> too
        from worker.cli import LAB_INSTALL, lab_arms

        resolve_arm = lab_arms()
        if resolve_arm is None:
            return fail(f"--arms needs the lab's study arms: {LAB_INSTALL}")
        try:
            arms = [resolve_arm(name, self_window) for name in args.arms.split(",")]
        except ValueError as error:
            return fail(str(error))
    elif args.preset == "sapo-table":
        arms = sapo_table_arms(b, self_window=self_window)
    elif campaign.batch_rule == "fixed":  # I/J, named I/J whatever B (the correction is the agents')
        i, j = campaign.num_local, campaign.num_external
        arms = [Arm(f"{i}/{j}", i, j, campaign.local_strategy, campaign.external_strategy)]
    else:  # backfill or decay, as a campaign names its swarm arm
        arms = [campaign.swarm_arm()]
        if args.controls or args.control_kinds:
            kinds = (args.control_kinds or "isolated,filtered").split(",")
            try:
                arms += controls_for(arms[0], kinds, self_window=self_window)
            except ValueError as error:
                return fail(str(error))
    agent = campaign.agent_config(args.tier, campaign.seed)
    for arm in arms:  # each arm must run at this B (I <= B, ...)
        try:
            arm.apply(agent)
        except ValueError as error:
            return fail(f"arm {arm.name}: {error}")
    config = SimulationConfig(
        agents=args.agents,
        rounds=campaign.rounds,
        tier=args.tier,
        seed=campaign.seed,
        mix=campaign.mix,
        agent=agent,
        checkpoint_every=args.checkpoint_every,
        backend=args.backend,
        device=args.device,
        pool_window=campaign.pool_window,
    )
    try:
        results = simulate(
            config, arms, args.out, checkpoint_dir=args.checkpoint_dir, show_progress=not args.quiet
        )
    except BackendUnavailable as error:
        return fail(str(error))
    for name, arm in results["arms"].items():
        per_agent = [sum(m["reward"] for m in rounds) for rounds in arm["agents"].values()]
        print(f"{name:>16}: cumulative reward per agent {sum(per_agent) / len(per_agent):.2f}")
    print(f"results: {args.out}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    add_declared_command(
        sub,
        "simulate",
        "run N agents over an in-process pool (--help: every flag)",
        build_parser,
        cmd_simulate,
    )
