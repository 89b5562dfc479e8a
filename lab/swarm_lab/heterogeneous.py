"""A heterogeneous swarm (issue #29 item 6): two model sizes in one pool, against each size in a
pool of its own and against each agent alone.

This is the setting of the paper's open demo and of the platform's dashboard (swarm against
isolated reward per model size). Rollouts are text, so they cross sizes: an agent re-tokenises
another agent's completions with its own tokenizer (worker/engine/agent.py).

**Arms.** Both sharing arms use the same swarm rule, ``swarm_arm`` (default 4/4 at B = 8: the
platform's default campaign; lab/swarm_lab/study.py names the arms):

* ``mixed``: 4 tiny-1m + 4 tiny-5m agents sharing one pool (window ``pool_window`` = 256
  rollouts over the 8 agents);
* ``by-size``: the same 8 agents, each size sharing only with its own 4, in a pool of its own
  whose window is the same share of ``pool_window`` as of the agents (128 each), so its rollouts
  are as old in rounds (worker/research/simulate.py, ``pool_windows``);
* ``8/0``: every agent alone (trains on its own 8 questions' groups).

Agent i has the same size, question stream and generation seeds in every arm, so the arms of
one seed pair agent for agent.

**Measure**, per size s: the cumulative reward of a cell (arm, seed) is the sum over rounds of
the mean reward over that size's agents (the SAPO study's measure, lab/swarm_lab/study.py,
restricted to one size).

**Pre-registered** (here, before any of its data): per size, the primary comparison is
``mixed - by-size`` (do the other size's rollouts help beyond the same size's?), with Holm's
adjustment over the two sizes' primaries. Exploratory, unadjusted: ``mixed - 8/0`` and
``by-size - 8/0`` per size (what the dashboard shows: swarm against isolated), and every
comparison's windows (thirds of the horizon).

Results (``docs/experiments/heterogeneous-cpu.json``)::

    {"config": {settings, "design": "heterogeneous", "seeds": [...], "arms": [...], ...},
     "arms":   {"mixed": {"tiny-1m": [cumulative reward of seed s for s in seeds], ...}, ...},
     "curves": {"mixed": {"<seed>": {"tiny-1m": [per-round mean over the size's agents]}}}}

``swarm-worker heterogeneous`` runs it (resumable: cells are written as they finish);
``swarm-worker study-report docs/experiments/heterogeneous-cpu.json`` writes its report
(lab/swarm_lab/heterogeneous_report.py).
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarm_lab.study import CUMULATIVE_DEFINITION, StudyError, resolve_arm, seed_key
from swarm_lab.study_runner import CellExecutor, model_build, resume, run_cells, versions
from worker.shared.config import CPU_STUDY_MAX_NEW_TOKENS, CPU_STUDY_ROUNDS, DEFAULT_POOL_WINDOW, ROUND
from worker.shared.files import write_json_atomic

DESIGN = "heterogeneous"
ARMS = ["mixed", "by-size", "8/0"]
PRIMARY = ("mixed", "by-size")  # per size; Holm over the sizes' primaries
EXPLORATORY = [("mixed", "8/0"), ("by-size", "8/0")]
COMPARISONS = [PRIMARY, *EXPLORATORY]
WINDOWS = 3
OUT = Path("docs/experiments/heterogeneous-cpu.json")
QUICK_OUT = Path(tempfile.gettempdir()) / "swarm-heterogeneous-quick" / "heterogeneous-cpu.json"
# The v3 study's horizon (45 rounds), so the two can be read side by side. 10 seeds: the exact
# sign-flip test's smallest p is 2/2^n and Holm over the 2 sizes doubles it, so 6 seeds (the
# issue's minimum) could never reach 0.05 (2/64 x 2 = 0.0625); 10 tolerate one contrary seed.
# Cost measured beside the v3 study (load 4 on 2 cores): 1.46 s per agent-round over both sizes,
# about 0.9 s quiet: 30 cells x 8 agents x 45 rounds = 10,800 agent-rounds, about 160
# process-minutes, 80 minutes of wall clock with 2 processes.
DEFAULT_SEEDS = 10
# Two sizes in one pool: the CPU tiers (a heterogeneous swarm needs two at least).
DEFAULT_TIERS = ("tiny-1m", "tiny-5m")


@dataclass
class HeterogeneousConfig:
    """The settings of the heterogeneous study; all but ``seeds`` must match to resume a file."""

    tiers: list[str] | None = None  # None: DEFAULT_TIERS
    agents_per_tier: int = 4
    rounds: int | None = None  # None: the CPU study's (config.CPU_STUDY_ROUNDS, 45)
    seeds: list[int] = field(default_factory=lambda: list(range(DEFAULT_SEEDS)))
    swarm_arm: str = "4/4"  # the rule of both sharing arms (a study arm's name)
    questions_per_round: int = ROUND.questions_per_round
    group_size: int = ROUND.group_size
    max_new_tokens: int | None = None  # None: the CPU study's (config.CPU_STUDY_MAX_NEW_TOKENS, 16)
    tasks: str = "cpu"
    num_iterations: int = 1
    temperature: float = 1.0
    beta: float = 0.0
    pool_window: int = DEFAULT_POOL_WINDOW  # of the mixed pool; a per-size pool gets its share of the agents
    learning_rate: float | None = None  # None: the tiers' (they must agree)
    quick: bool = False

    @classmethod
    def quick_config(cls) -> HeterogeneousConfig:
        """A smoke test: 1 agent per size, 2 rounds, 2 seeds, G = 2, 4 tokens."""
        return cls(agents_per_tier=1, rounds=2, seeds=[0, 1], group_size=2, max_new_tokens=4, quick=True)

    def __post_init__(self) -> None:
        from worker.shared.tiers import tier

        self.tiers = list(DEFAULT_TIERS) if self.tiers is None else self.tiers
        self.rounds = CPU_STUDY_ROUNDS if self.rounds is None else self.rounds
        self.max_new_tokens = CPU_STUDY_MAX_NEW_TOKENS if self.max_new_tokens is None else self.max_new_tokens
        if len(set(self.tiers)) < 2:
            raise StudyError(f"a heterogeneous swarm needs at least two different tiers, got {self.tiers}")
        if self.agents_per_tier < 1 or self.rounds < 1:
            raise StudyError("agents_per_tier and rounds must be at least 1")
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise StudyError(f"seeds must be distinct and at least one, got {self.seeds}")
        try:
            rates = {tier(name).learning_rate for name in self.tiers}
        except ValueError as error:
            raise StudyError(str(error)) from None
        if self.learning_rate is None:
            # the simulator trains every agent at one learning rate
            if len(rates) > 1:
                raise StudyError(f"the tiers' learning rates differ ({sorted(rates)}): give one")
            self.learning_rate = rates.pop()
        swarm = resolve_arm(self.swarm_arm)
        if not swarm.shares:
            raise StudyError(f"swarm_arm {self.swarm_arm} does not share rollouts")

    def agent_tiers(self) -> list[str]:
        """Agent i's tier: the sizes in blocks (4 tiny-1m, then 4 tiny-5m)."""
        return [name for name in self.tiers for _ in range(self.agents_per_tier)]

    def settings(self) -> dict[str, Any]:
        data = asdict(self)
        del data["seeds"]
        return data

    def cell_settings(self, arm: str) -> tuple[dict[str, Any], str]:
        """What :func:`swarm_lab.study_runner.run_cell` runs for ``arm``, and the study arm
        it runs under that name."""
        tiers = self.agent_tiers()
        settings = {
            **self.settings(),
            "agents": len(tiers),
            "tier": tiers[0],
            "tiers": tiers,
            "pool_per_tier": arm == "by-size",
        }
        return settings, "8/0" if arm == "8/0" else self.swarm_arm


def _open(out: Path, config: HeterogeneousConfig) -> dict[str, Any]:
    settings = config.settings()
    results = resume(out, settings, config.seeds)
    if results is not None:
        return results
    from worker.research.simulate import pool_windows

    tiers = config.agent_tiers()
    swarm = resolve_arm(config.swarm_arm).semantics(config.questions_per_round)
    return {
        "config": {
            **settings,
            "design": DESIGN,
            "seeds": list(config.seeds),
            "arms": list(ARMS),
            "agent_tiers": tiers,
            "pool_windows": {
                "mixed": pool_windows(tiers, config.pool_window, False),
                "by-size": pool_windows(tiers, config.pool_window, True),
            },
            "arm_semantics": {
                "mixed": f"{swarm} (one pool of every size's agents)",
                "by-size": f"{swarm} (one pool per size: each size shares only with itself)",
                "8/0": f"{resolve_arm('8/0').semantics(config.questions_per_round)} (every agent alone)",
            },
            # pre-registered before any data (this module's docstring)
            "preregistered": {
                "primary": list(PRIMARY),
                "per": "tier",
                "holm_over": "the tiers' primaries",
                "exploratory": [list(pair) for pair in EXPLORATORY],
                "windows": WINDOWS,
            },
            "cumulative_reward": CUMULATIVE_DEFINITION.replace("over the agents", "over the size's agents"),
            "torch_threads_per_process": 1,
            "elapsed_seconds": 0.0,
            "cells": {},
        },
        "arms": {},
        "curves": {arm: {} for arm in ARMS},
    }


def _rebuild(results: dict[str, Any]) -> None:
    """``arms`` from ``curves`` and the bookkeeping (cells done, complete, cost per agent-round)."""
    cfg = results["config"]
    results["arms"] = {
        arm: {
            name: [
                round(sum(c[name]), 6) if (c := results["curves"][arm].get(seed_key(s))) is not None else None
                for s in cfg["seeds"]
            ]
            for name in cfg["tiers"]
        }
        for arm in cfg["arms"]
    }
    done = sum(len(results["curves"][arm]) for arm in cfg["arms"])
    cfg["cells_done"], cfg["cells_total"] = done, len(cfg["arms"]) * len(cfg["seeds"])
    cfg["complete"] = done == cfg["cells_total"]
    if done:
        agent_rounds = done * len(cfg["agent_tiers"]) * cfg["rounds"]
        cfg["seconds_per_agent_round"] = round(cfg["elapsed_seconds"] / agent_rounds, 3)
    cfg["updated"] = datetime.now(UTC).isoformat(timespec="seconds")


def run_heterogeneous(
    config: HeterogeneousConfig,
    out: Path,
    jobs: int = 1,
    verbose: bool = False,
    log: Callable[[str], None] = print,
    executor: CellExecutor | None = None,
) -> dict[str, Any]:
    """Run every missing cell (seed by seed, all arms of a seed first) into ``out``, resuming it;
    ``executor`` runs the cells instead of :func:`swarm_lab.study_runner.run_cells`."""
    results = _open(out, config)
    cfg = results["config"]
    todo = [
        (arm, seed) for seed in config.seeds for arm in ARMS if seed_key(seed) not in results["curves"][arm]
    ]
    done_before = sum(len(c) for c in results["curves"].values())
    if done_before:
        log(f"resuming {out}: {done_before} cells done, {len(todo)} to run")
    cfg.update(
        versions=versions(),
        model_build={name: model_build(name) for name in config.tiers},
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        jobs=jobs,
    )
    _rebuild(results)
    write_json_atomic(out, results, indent=1)
    if not todo:
        return results
    cfg.setdefault("started", datetime.now(UTC).isoformat(timespec="seconds"))
    started, wall_before, finished = time.perf_counter(), cfg.get("wall_seconds", 0.0), 0

    def record(key: tuple[str, int], cell: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        arm, seed = key
        cell.pop("curve"), cell.pop("mechanism")
        curves = cell.pop("curves_by_tier")
        results["curves"][arm][seed_key(seed)] = curves
        cfg["cells"][f"{arm}|{seed}"] = cell
        cfg["elapsed_seconds"] = round(cfg["elapsed_seconds"] + cell["seconds"], 2)
        cfg["wall_seconds"] = round(wall_before + time.perf_counter() - started, 2)
        _rebuild(results)
        write_json_atomic(out, results, indent=1)
        eta = (time.perf_counter() - started) / finished * (len(todo) - finished)
        sizes = ", ".join(f"{name} {sum(curve):.3f}" for name, curve in curves.items())
        log(
            f"[{done_before + finished}/{done_before + len(todo)}] {arm:>8} seed {seed}: cumulative "
            f"{sizes}; {cell['seconds']:.0f} s; about {eta / 60:.0f} min left"
        )

    cells = []
    for arm, seed in todo:
        settings, study_arm = config.cell_settings(arm)
        cells.append(((arm, seed), settings, study_arm, seed))
    (executor or run_cells)(cells, jobs, verbose, record)
    return results
