"""``swarm-worker study``, ``study-report`` and ``study-batches``: the SAPO table study
(lab/swarm_lab/study.py), its report and what each arm trained on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from swarm_lab.cli import executors
from swarm_lab.study import (
    ARM_ORDER,
    DEFAULT_DESIGN,
    DEFAULT_OUT,
    DESIGN_OUT,
    DESIGNS,
    QUICK_OUT,
    REQUIRED_ARMS,
    V3_REQUIRED_ARMS,
    StudyConfig,
    StudyError,
)
from swarm_lab.study_runner import DEFAULT_JOBS, run_study
from worker.cli.declared import add_declared_command, add_setting_flag
from worker.cli.defaults import fill_defaults, formatter

REPORT_DEFAULTS = {"resamples": "worker.shared.stats:BOOTSTRAP_RESAMPLES"}


def cmd_study(args: argparse.Namespace) -> int:
    """Run (or resume) the SAPO table study; results after every cell."""
    design = args.design or DEFAULT_DESIGN
    base = StudyConfig.quick_config(design) if args.quick else StudyConfig(design=design)
    # A quick run stays in one process: spawning a second costs more than its few cells.
    jobs = args.jobs or (1 if args.quick else DEFAULT_JOBS)
    out = args.out or (QUICK_OUT if args.quick else DESIGN_OUT[design])
    documented = [path for path in DESIGN_OUT.values() if out.resolve() == path.resolve()]
    if args.quick and documented:
        # The documented results must come from a full run, never from a smoke test.
        print(f"swarm-worker study: a --quick run does not write {documented[0]}", file=sys.stderr)
        return 2
    # The same seeds for every arm: that is what makes the arms' differences pair.
    seeds = list(range(args.first_seed, args.first_seed + (args.seeds or len(base.seeds))))
    if problems := setting_problems(args):
        for problem in problems:
            print(f"swarm-worker study: {problem}", file=sys.stderr)
        return 2
    learning_rate, questions = getattr(args, "grpo.learning_rate"), args.questions_per_round
    overrides = {
        "agents": args.agents,
        "rounds": args.rounds,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "tier": args.tier,
        "tasks": args.tasks,
        "learning_rate": learning_rate,
        "num_iterations": getattr(args, "grpo.num_iterations"),
        "self_window": args.self_window,
        "questions_per_round": questions,
        "decay_rounds": args.decay_rounds,
    }
    try:
        values = {**base.__dict__, **{k: v for k, v in overrides.items() if v is not None}, "seeds": seeds}
        if questions is not None:
            values["max_questions"] = None  # 8/0-dyn's cap follows B: 2 max(B, 8)
        if args.rounds is not None:
            values["held_out_points"] = None  # the design's points, scaled to the horizon
        if args.arms:
            values["arms"] = args.arms.split(",")
        if args.other_seeds is not None:
            values["other_seeds"] = args.other_seeds or None
        if learning_rate is None and args.tier and args.tier != base.tier:
            values["learning_rate"] = None  # the chosen tier's default, not tiny-1m's
        config = StudyConfig(**values)
        print(
            f"study (design {config.design}): {len(config.arms)} arms ({', '.join(config.arms)}), "
            f"{len(config.seeds)} seeds (arms outside {', '.join(config.required_arms)}: "
            f"{len(config.seeds_of('6/2'))}), B = {config.questions_per_round}, {config.agents} "
            f"agents x {config.rounds} rounds = {config.agent_rounds()} agent-rounds, G = {config.group_size}, "
            f"{config.max_new_tokens} tokens, {config.tier}, "
            f"{f'{jobs} process(es)' if args.executor == 'local' else 'the study queue'} -> {out}",
            flush=True,
        )
        log = lambda m: print(m, flush=True)  # noqa: E731
        run_study(
            config,
            out,
            jobs=jobs,
            verbose=args.verbose,
            log=log,
            allow_dirty=args.allow_dirty or args.quick,
            executor=executors.cell_executor(args, out, log),
        )
    except StudyError as error:
        print(f"swarm-worker study: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"swarm-worker study: interrupted; finished cells are in {out}, rerun to resume", file=sys.stderr
        )
        return 130
    print(f"results: {out}\nreport:  swarm-worker study-report {out}")
    return 0


def cmd_study_report(args: argparse.Namespace) -> int:
    """Write the study's markdown report and PNG plots from its results JSON (v4's and the
    heterogeneous swarm's; a retired design's report is its committed file, which it names)."""
    from swarm_lab.study_report import RetiredDesign, write_report

    fill_defaults(args, REPORT_DEFAULTS)
    if not args.results.exists():
        print(f"swarm-worker study-report: no results at {args.results}", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "swarm-worker study-report: needs matplotlib (pip install 'swarm-sapo-lab[study]')",
            file=sys.stderr,
        )
        return 2
    try:
        report = write_report(args.results, args.out, args.resamples)
    except RetiredDesign as error:
        print(f"swarm-worker study-report: {error}", file=sys.stderr)
        return 2
    print(f"report: {report}")
    return 0


def cmd_study_batches(args: argparse.Namespace) -> int:
    """Print, per arm and round, what the study's agents generated and trained on."""
    from swarm_lab.study_batches import batches_text

    if not args.results.exists():
        print(f"swarm-worker study-batches: no results at {args.results}", file=sys.stderr)
        return 2
    print("\n".join(batches_text(args.results)))
    return 0


# The campaign settings a study takes (their flags built from the campaign's declarations), with
# the command's older flag names.
SETTING_ALIASES: dict[str, tuple[str, ...]] = {
    "rounds": (),
    "group_size": (),
    "max_new_tokens": (),
    "questions_per_round": ("--questions",),
    "decay_rounds": (),
    "grpo.learning_rate": ("--lr",),
    "grpo.num_iterations": ("--num-iterations",),
}


def setting_problems(args: argparse.Namespace) -> list[str]:
    """``path: problem`` for each setting given on the command line that its declaration refuses."""
    from worker.shared.campaign import SETTINGS

    return [
        f"{path}: {problem}"
        for path in SETTING_ALIASES
        if (value := getattr(args, path)) is not None and (problem := SETTINGS[path].problem(value))
    ]


def build_study_parser() -> argparse.ArgumentParser:
    """``swarm-worker study``'s parser (built when the command runs: the declarations load
    reasoning-gym). The study's defaults are StudyConfig's (full, and quick_config's with --quick)."""
    from worker.shared.campaign import SETTINGS

    full, quick = StudyConfig(), StudyConfig.quick_config()

    def either(name: str) -> str:
        return f"default {getattr(full, name)}; --quick {getattr(quick, name)}"

    study = argparse.ArgumentParser(
        prog="swarm-worker study",
        description="Run the SAPO table study (arms x seeds); resumable, results after every cell.",
    )
    study.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke test: {quick.agents} agents, {quick.rounds} rounds, {len(quick.seeds)} seeds, "
        f"G {quick.group_size}",
    )
    study.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results JSON (default: {DEFAULT_OUT}, v2: {DESIGN_OUT['v2']}; --quick: a temp dir)",
    )
    study.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"number of seeds (default {len(full.seeds)}; --quick {len(quick.seeds)})",
    )
    study.add_argument("--first-seed", type=int, default=0)
    study.add_argument("--agents", type=int, default=None, help=f"agents per cell ({either('agents')})")
    study.add_argument("--tier", default=None, help=f"default {full.tier}")
    study.add_argument("--tasks", default=None, help=f"task preset (default {full.tasks})")
    study.add_argument(
        "--design",
        choices=DESIGNS,
        default=None,
        help=f"the study's design: v4 (issue #49: one control per question, held-out accuracy; "
        f"{DESIGN_OUT['v4']}), v3 (issue #29: 4/4@B4, backfill; pre-registered 4/4@B4 vs 8/0; "
        f"{DESIGN_OUT['v3']}) or v2 (issue #18: 4/4 vs 4/4-self; {DESIGN_OUT['v2']}); default "
        f"{DEFAULT_DESIGN}",
    )
    study.add_argument(
        "--arms",
        default=None,
        help=f"comma-separated arms, of {', '.join(ARM_ORDER)}, or any of them at another B as "
        f"<arm>@B<n> (default {','.join(full.arms)}; v2: {','.join(StudyConfig(design='v2').arms or [])})",
    )
    study.add_argument(
        "--other-seeds",
        type=int,
        default=None,
        help=f"seeds of the arms outside the required ones ({', '.join(V3_REQUIRED_ARMS)}; v2: "
        f"{', '.join(REQUIRED_ARMS)}) (the first N; default {full.other_seeds}; 0: all)",
    )
    study.add_argument(
        "--self-window",
        type=int,
        default=None,
        help="4/4-self's replay window in groups (default: the pool's window over the agents, "
        f"{full.self_window} here); a window whose groups' mean age matches the pool's removes the "
        "primary comparison's staleness difference",
    )
    study.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"processes, one torch thread each (default: min(2, CPUs), {DEFAULT_JOBS} here; --quick 1)",
    )
    executors.add_arguments(study)
    study.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run from a tree with uncommitted changes to tracked files (each cell then records a "
        "SHA-256 of the diff); without it a full run refuses, so every cell's commit is its code",
    )
    study.add_argument("-v", "--verbose", action="store_true", help="a line per round")
    settings = study.add_argument_group(
        "campaign settings (default: the study's; B is that of the arms that do not fix their own, "
        "@B<n>; I and J stay the arm's; decay rounds is 4/4-decay's T)"
    )
    for path, aliases in SETTING_ALIASES.items():
        name = {"grpo.learning_rate": "learning_rate", "grpo.num_iterations": "num_iterations"}.get(
            path, path
        )
        words = "default: the tier's" if path == "grpo.learning_rate" else either(name)
        add_setting_flag(settings, SETTINGS[path], aliases, default_words=words)
    return study


def add_parsers(sub: Any) -> None:
    add_declared_command(
        sub,
        "study",
        "run the SAPO table study (arms x seeds); resumable, results after every cell",
        build_study_parser,
        cmd_study,
    )

    report = sub.add_parser(
        "study-report",
        help="write the SAPO table study's report and plots",
        formatter_class=formatter(REPORT_DEFAULTS),
    )
    report.add_argument("results", type=Path, nargs="?", default=DEFAULT_OUT)
    report.add_argument("--out", type=Path, default=None, help="markdown path (default: the JSON's, .md)")
    report.add_argument("--resamples", type=int, default=None, help="bootstrap resamples")
    report.set_defaults(func=cmd_study_report)

    batches = sub.add_parser(
        "study-batches",
        help="print what each arm of a study generated and trained on, round by round (markdown)",
    )
    batches.add_argument("results", type=Path, nargs="?", default=DEFAULT_OUT)
    batches.set_defaults(func=cmd_study_batches)
