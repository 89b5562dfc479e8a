"""``swarm-worker heterogeneous``: run (or resume) the heterogeneous swarm study
(lab/swarm_lab/heterogeneous.py); its report comes from ``swarm-worker study-report``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from swarm_lab.cli import executors
from swarm_lab.heterogeneous import OUT, QUICK_OUT, HeterogeneousConfig, run_heterogeneous
from swarm_lab.study import StudyError
from swarm_lab.study_runner import DEFAULT_JOBS
from worker.cli.declared import add_declared_command, add_setting_flag


def cmd_heterogeneous(args: argparse.Namespace) -> int:
    from worker.shared.campaign import SETTINGS

    if args.rounds is not None and (problem := SETTINGS["rounds"].problem(args.rounds)):
        print(f"swarm-worker heterogeneous: rounds: {problem}", file=sys.stderr)
        return 2
    base = HeterogeneousConfig.quick_config() if args.quick else HeterogeneousConfig()
    overrides: dict[str, Any] = {}
    if args.seeds is not None:
        overrides["seeds"] = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.rounds is not None:
        overrides["rounds"] = args.rounds
    if args.tiers is not None:
        overrides["tiers"] = args.tiers.split(",")
    if args.agents_per_tier is not None:
        overrides["agents_per_tier"] = args.agents_per_tier
    if args.swarm_arm is not None:
        overrides["swarm_arm"] = args.swarm_arm
    try:
        config = HeterogeneousConfig(**{**base.__dict__, **overrides})
    except StudyError as error:
        print(f"swarm-worker heterogeneous: {error}", file=sys.stderr)
        return 2
    out = args.out or (QUICK_OUT if args.quick else OUT)
    if args.quick and out.resolve() == OUT.resolve():
        print(f"swarm-worker heterogeneous: a --quick run does not write {OUT}", file=sys.stderr)
        return 2
    sizes = " + ".join(f"{config.agents_per_tier} {t}" for t in config.tiers)
    print(
        f"heterogeneous swarm: {sizes} agents, arms mixed / by-size / 8/0 ({config.swarm_arm}), "
        f"{len(config.seeds)} seeds x {config.rounds} rounds, "
        f"{f'{args.jobs} process(es)' if args.executor == 'local' else 'the study queue'} -> {out}",
        flush=True,
    )
    log = lambda m: print(m, flush=True)  # noqa: E731
    try:
        run_heterogeneous(
            config,
            out,
            jobs=args.jobs,
            verbose=args.verbose,
            log=log,
            executor=executors.cell_executor(args, out, log),
        )
    except StudyError as error:
        print(f"swarm-worker heterogeneous: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"swarm-worker heterogeneous: interrupted; finished cells are in {out}, rerun to resume",
            file=sys.stderr,
        )
        return 130
    print(f"results: {out}\nreport:  swarm-worker study-report {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command's parser, built when it runs (the settings' declarations load reasoning-gym)."""
    from worker.shared.campaign import SETTINGS

    full, quick = HeterogeneousConfig(), HeterogeneousConfig.quick_config()
    parser = argparse.ArgumentParser(
        prog="swarm-worker heterogeneous",
        description="Run the heterogeneous swarm study (two sizes in one pool vs a pool per size vs "
        "alone); resumable.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke test: {quick.agents_per_tier} agent per size, {quick.rounds} rounds, {len(quick.seeds)} seeds",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help=f"results JSON (default {OUT}; --quick: a temp dir)"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help=f"number of seeds (default {len(full.seeds)})"
    )
    parser.add_argument("--first-seed", type=int, default=0)
    add_setting_flag(
        parser, SETTINGS["rounds"], default_words=f"default {full.rounds}; --quick {quick.rounds}"
    )
    parser.add_argument(
        "--tiers", default=None, help=f"comma-separated sizes (default {','.join(full.tiers)})"
    )
    parser.add_argument(
        "--agents-per-tier",
        type=int,
        default=None,
        help=f"agents of each size (default {full.agents_per_tier})",
    )
    parser.add_argument(
        "--swarm-arm", default=None, help=f"the sharing arms' rule, a study arm (default {full.swarm_arm})"
    )
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="processes (one torch thread each)")
    executors.add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def add_parser(sub: Any) -> None:
    add_declared_command(
        sub,
        "heterogeneous",
        "run the heterogeneous swarm study (two sizes in one pool vs a pool per size vs alone); resumable",
        build_parser,
        cmd_heterogeneous,
    )
