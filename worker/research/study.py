"""The SAPO table at CPU scale (issue #8): six arms x several seeds, resumable, with a report.

Does sharing rollouts beat training alone once the lone agent may also drop zero-advantage
samples? The study runs the SAPO paper's arms (8/0, 6/2, 4/4, 2/6; I local / J external
rollouts trained on per round, zero-advantage groups dropped as in the paper's SAPO arms) and
the two controls the paper lacked (8/0-filtered: isolated with the same filter; 4/4-unfiltered:
sharing without it), each with N agents and 8 questions per agent per round, in the
in-process simulator (worker/research/simulate.py).

A **cell** is one (arm, seed): one :func:`worker.research.simulate.run_arm`. The seed fixes every agent's
question stream and generation seeds, and is the same across arms, so the arms of one seed
see the same questions and differences between arms pair by seed. Cells run seed by seed (all
arms of seed 0, then seed 1, ...), so an interrupted study leaves complete pairs behind; the
results file is rewritten atomically after every cell and a rerun skips the cells it holds.

Results (``docs/experiments/sapo-table-cpu.json`` by default)::

    {"config": {settings, "seeds": [...], "rounds": R, "elapsed_seconds": ..., "versions": ...},
     "arms":   {"8/0": [cumulative reward of seed s for s in config.seeds], ...},
     "curves": {"8/0": {"<seed>": [per-round mean reward over the agents, R values]}, ...}}

``arms[a][i]`` belongs to ``config["seeds"][i]`` and is null while that cell has not run.

**Cumulative reward** of a cell = sum over rounds r of the per-round mean reward
m_r = (1/N) sum_n reward_{n,r}, where reward_{n,r} is agent n's mean verified reward over its
own B x G completions of round r. This is the paper's measure (its 561.79 for 8/0 over 2000
rounds is 0.28 per round: a mean over agents, not a sum).

``swarm-worker study`` runs it; ``swarm-worker study-report`` writes the markdown report and
its PNG plots (matplotlib, the ``study`` extra) from the results file.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from worker.shared import stats
from worker.shared.arms import Arm, sapo_table_arms

# The paper's Table (8 agents, Qwen2.5-0.5B, 2000 rounds, G = 8, one run).
PAPER_CUMULATIVE = {"8/0": 561.79, "6/2": 854.43, "4/4": 1093.31, "2/6": 945.87}
QUESTIONS_PER_ROUND = 8  # the (and paper's) B; the arms are named for I + J = 8
ARM_NAMES = [arm.name for arm in sapo_table_arms(QUESTIONS_PER_ROUND)]
ARM_ORDER = ["8/0", "6/2", "4/4", "2/6", "8/0-filtered", "4/4-unfiltered"]
BASELINE = "8/0"
PRIMARY = ("4/4", "8/0-filtered")  # the question of the issue, fixed before the data
# Paired comparisons of the report, (a, b) meaning a - b; the family of the Holm adjustment.
COMPARISONS = [
    PRIMARY,
    ("4/4", "4/4-unfiltered"),
    ("6/2", "8/0-filtered"),
    ("2/6", "8/0-filtered"),
    ("4/4", "8/0"),
    ("6/2", "8/0"),
    ("2/6", "8/0"),
    ("8/0-filtered", "8/0"),
    ("4/4-unfiltered", "8/0"),
]
DEFAULT_OUT = Path("docs/experiments/sapo-table-cpu.json")
QUICK_OUT = Path(tempfile.gettempdir()) / "swarm-study-quick" / "sapo-table-cpu.json"
CUMULATIVE_DEFINITION = (
    "sum over rounds of the per-round mean reward over the agents (each agent's reward: mean verified "
    "reward of its own B x G completions of the round); the SAPO paper's measure"
)
CURVE_DEFINITION = "per-round mean reward over the agents of one cell (arm, seed), rounds 1..R"

# Chosen from a measurement on the 2-core development machine (docs/experiments/README.md):
# 6 arms x 6 seeds x 8 agents x 25 rounds = 7,200 agent-rounds at about 1.5 CPU-s each,
# in 2 processes: about 1.5-2 hours. 6 seeds, not 5: with n seeds the exact sign-flip test
# cannot go below p = 2 / 2^n, and 2 / 32 = 0.0625 could never reject at 5%.
DEFAULT_ROUNDS = 25
DEFAULT_SEEDS = 6
DEFAULT_JOBS = min(2, os.cpu_count() or 1)


class StudyError(RuntimeError):
    """A study that cannot run or resume as asked (e.g. a results file of other settings)."""


@dataclass
class StudyConfig:
    """The settings of a study; all but ``seeds``/``arms`` must match to resume a results file."""

    agents: int = 8
    rounds: int = DEFAULT_ROUNDS
    seeds: list[int] = field(default_factory=lambda: list(range(DEFAULT_SEEDS)))
    group_size: int = 8  # G
    max_new_tokens: int = 16
    tier: str = "tiny-1m"
    tasks: str = "cpu"  # task preset (worker/shared/questions.py)
    learning_rate: float | None = None  # None: the tier's
    num_iterations: int = 1
    temperature: float = 1.0
    beta: float = 0.0
    pool_window: int = 256
    arms: list[str] = field(default_factory=lambda: list(ARM_ORDER))
    quick: bool = False
    questions_per_round: int = QUESTIONS_PER_ROUND

    @classmethod
    def quick_config(cls) -> StudyConfig:
        """A smoke test: 2 agents, 2 rounds, 2 seeds, G = 2, 4 tokens (about 10-20 s)."""
        return cls(agents=2, rounds=2, seeds=[0, 1], group_size=2, max_new_tokens=4, quick=True)

    def __post_init__(self) -> None:
        unknown = [name for name in self.arms if name not in ARM_NAMES]
        if unknown:
            raise StudyError(f"unknown arms {unknown}; arms: {', '.join(ARM_NAMES)}")
        if self.questions_per_round != QUESTIONS_PER_ROUND:
            raise StudyError("the study's arms are defined for 8 questions per agent per round")
        if self.learning_rate is None:
            from worker.shared.tiers import tier

            self.learning_rate = tier(self.tier).learning_rate
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise StudyError(f"seeds must be distinct and at least one, got {self.seeds}")

    def settings(self) -> dict[str, Any]:
        """What defines the experiment: a results file resumes only with equal settings."""
        data = asdict(self)
        del data["seeds"], data["arms"]
        return data

    def agent_rounds(self) -> int:
        return len(self.arms) * len(self.seeds) * self.agents * self.rounds


def arm_by_name() -> dict[str, Arm]:
    return {arm.name: arm for arm in sapo_table_arms(QUESTIONS_PER_ROUND)}


def campaign_overrides(arm_name: str) -> dict[str, Any]:
    """The ``sapo-table`` campaign preset's overrides that run a study arm on the platform.

    A campaign runs one swarm arm (I/J, strategies) plus, per tier and seed, its isolated
    controls with batch I + J: ``isolated`` (8/0) and ``filtered`` (8/0-filtered). So the 4/4
    campaign with its controls gives 4/4, 8/0 and 8/0-filtered; 6/2, 2/6 and 4/4-unfiltered are
    one campaign each (controls off, since the 4/4 campaign already ran them).
    """
    arm = arm_by_name()[arm_name]
    if not arm.shares:
        return {"num_local": 4, "num_external": 4, "controls": {"isolated": True, "filtered": True}}
    overrides: dict[str, Any] = {
        "num_local": arm.num_local,
        "num_external": arm.num_external,
        "local_strategy": arm.local_strategy,
        "external_strategy": arm.external_strategy,
    }
    if arm.name != "4/4":
        overrides["controls"] = {"isolated": False, "filtered": False}
    return overrides


# --- running ---------------------------------------------------------------------------------


def _set_one_thread() -> None:
    """One torch thread per process: on 2 cores, processes with several threads each contend
    and run up to 8x slower (measured in tests/conftest.py's note)."""
    import torch

    torch.set_num_threads(1)


def run_cell(settings: dict[str, Any], arm_name: str, seed: int, verbose: bool = False) -> dict[str, Any]:
    """Run one (arm, seed) and return its curve, cumulative reward and cost.

    A module-level function of plain data so a process pool can run it.
    """
    _set_one_thread()
    from worker.research.simulate import SimulationConfig, run_arm
    from worker.shared.config import AgentConfig, GRPOConfig
    from worker.shared.questions import preset
    from worker.shared.tiers import model_cache_dir

    grpo = GRPOConfig(
        learning_rate=settings["learning_rate"],
        num_iterations=settings["num_iterations"],
        temperature=settings["temperature"],
        beta=settings["beta"],
    )
    agent = AgentConfig(
        questions_per_round=settings["questions_per_round"],
        group_size=settings["group_size"],
        max_new_tokens=settings["max_new_tokens"],
        seed=seed,
        grpo=grpo,
    )
    config = SimulationConfig(
        agents=settings["agents"],
        rounds=settings["rounds"],
        tier=settings["tier"],
        seed=seed,
        mix=preset(settings["tasks"]),
        agent=agent,
        pool_window=settings["pool_window"],
        backend="transformers",  # the CPU study; vLLM agents would not be one thread each
    )

    def log(message: str) -> None:
        if verbose:
            print(f"  [{arm_name} seed {seed}] {message}", flush=True)

    def on_round(arm: Arm, done: int, metrics: list[dict[str, float]]) -> None:
        if verbose:
            mean = sum(m["reward"] for m in metrics) / len(metrics)
            print(f"  [{arm_name} seed {seed}] round {done}: mean reward {mean:.3f}", flush=True)

    if not verbose:  # one "Loading weights" bar per agent and cell buries the progress lines
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    started = time.perf_counter()
    result = run_arm(config, arm_by_name()[arm_name], model_cache_dir(), None, on_round, log=log)
    seconds = time.perf_counter() - started
    histories = list(result["agents"].values())
    rounds = settings["rounds"]
    # Rounded so the file diffs cleanly; the cumulative reward is the sum of the stored curve.
    curve = [round(sum(h[r]["reward"] for h in histories) / len(histories), 6) for r in range(rounds)]

    def mean_of(key: str) -> float:
        values = [m.get(key, 0.0) for h in histories for m in h]
        return round(sum(values) / len(values), 6)

    return {
        "curve": curve,
        "seconds": round(seconds, 2),
        "frac_reward_zero_std": mean_of("frac_reward_zero_std"),
        "local_used": mean_of("batch/local_used"),
        "external_used": mean_of("batch/external_used"),
    }


def versions() -> dict[str, Any]:
    from importlib import metadata

    import worker

    data: dict[str, Any] = {"swarm": worker.__version__, "python": platform.python_version()}
    for package in ("torch", "transformers", "reasoning-gym", "numpy"):
        try:  # installed distributions: a module's own __version__ can lag its release
            data[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            data[package] = None
    try:  # read-only: which code produced the numbers
        root = Path(__file__).resolve().parent.parent
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        data["git_commit"] = commit + ("+modified" if dirty else "") if commit else None
    except (OSError, subprocess.SubprocessError):
        data["git_commit"] = None
    return data


def model_build(tier_name: str) -> dict[str, Any] | None:
    """The tiny tier's build record (recipe version, steps, tokenizer hash), if it has one."""
    from worker.shared.tiers import model_cache_dir

    path = model_cache_dir() / tier_name / "swarm_build.json"
    if not path.exists():
        return None
    build = json.loads(path.read_text())
    keep = ("seed", "steps", "params", "tokenizer_sha256", "final_loss", "swarm_version")
    return {
        "recipe_version": (build.get("recipe") or {}).get("recipe_version"),
        **{key: build[key] for key in keep if key in build},
    }


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary file in the same folder, then rename: a reader (or a crash) never
    sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        json.dump(data, tmp, indent=1)
        tmp.write("\n")
    os.chmod(tmp.name, 0o644)  # a temporary file is private (0600); results are for everyone to read
    os.replace(tmp.name, path)


def _key(seed: int) -> str:
    return str(seed)


def _rebuild_arms(results: dict[str, Any]) -> None:
    """``arms`` from ``curves``: the cumulative reward per seed, in ``config.seeds`` order."""
    seeds = results["config"]["seeds"]
    results["arms"] = {
        name: [
            round(sum(curve), 6) if (curve := results["curves"][name].get(_key(s))) is not None else None
            for s in seeds
        ]
        for name in results["config"]["arms"]
    }


def _open_results(out: Path, config: StudyConfig) -> dict[str, Any]:
    """The results so far: the file at ``out`` if its settings match, else a new skeleton."""
    settings = config.settings()
    if out.exists():
        results = json.loads(out.read_text())
        old = {key: results["config"].get(key) for key in settings}
        if old != settings:
            differ = sorted(key for key in settings if old[key] != settings[key])
            raise StudyError(
                f"{out} holds a study with other settings ({', '.join(differ)}); "
                "use another --out or remove it to start over"
            )
        cfg = results["config"]
        # Seeds and arms only grow: a rerun with more seeds extends the study, never drops cells.
        cfg["seeds"] = cfg["seeds"] + [s for s in config.seeds if s not in cfg["seeds"]]
        cfg["arms"] = [a for a in ARM_ORDER if a in cfg["arms"] or a in config.arms]
        for name in cfg["arms"]:
            results["curves"].setdefault(name, {})
        return results
    return {
        "config": {
            **settings,
            "seeds": list(config.seeds),
            "arms": [a for a in ARM_ORDER if a in config.arms],
            "arm_definitions": {a: arm_by_name()[a].to_json() for a in ARM_ORDER},
            "cumulative_reward": CUMULATIVE_DEFINITION,
            "curves": CURVE_DEFINITION,
            "torch_threads_per_process": 1,
            "elapsed_seconds": 0.0,
            "cells": {},
        },
        "arms": {},
        "curves": {a: {} for a in ARM_ORDER if a in config.arms},
    }


def pending_cells(results: dict[str, Any], config: StudyConfig) -> list[tuple[str, int]]:
    """Cells still to run, seed by seed (all arms of a seed before the next seed)."""
    return [
        (name, seed)
        for seed in config.seeds
        for name in ARM_ORDER
        if name in config.arms and _key(seed) not in results["curves"][name]
    ]


def run_study(
    config: StudyConfig,
    out: Path,
    jobs: int = 1,
    verbose: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every missing cell of ``config`` into ``out`` (resuming it) and return the results.

    ``jobs`` > 1 runs cells in that many processes of one torch thread each (spawned, so no
    process inherits another's torch state); results are written by this process only.
    """
    _set_one_thread()
    results = _open_results(out, config)
    todo = pending_cells(results, config)
    cfg = results["config"]
    done_before = sum(len(c) for c in results["curves"].values())
    if done_before:
        log(f"resuming {out}: {done_before} cells done, {len(todo)} to run")
    cfg.update(
        versions=versions(),
        model_build=model_build(config.tier),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        jobs=jobs,
    )
    _rebuild_arms(results)
    if not todo:
        _finish(results, config)
        write_json_atomic(out, results)
        return results
    cfg.setdefault("started", datetime.now(UTC).isoformat(timespec="seconds"))
    settings = config.settings()
    cell_rounds = config.agents * config.rounds
    started = time.perf_counter()
    wall_before = cfg.get("wall_seconds", 0.0)
    finished = 0

    def record(name: str, seed: int, cell: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        results["curves"][name][_key(seed)] = cell.pop("curve")
        cfg["cells"][f"{name}|{seed}"] = cell
        # elapsed: the cells' own seconds summed (process-seconds); wall: the runs' clock time.
        cfg["elapsed_seconds"] = round(cfg["elapsed_seconds"] + cell["seconds"], 2)
        cfg["wall_seconds"] = round(wall_before + time.perf_counter() - started, 2)
        _rebuild_arms(results)
        _finish(results, config)
        write_json_atomic(out, results)
        wall = time.perf_counter() - started
        eta = wall / finished * (len(todo) - finished)
        curve = results["curves"][name][_key(seed)]
        log(
            f"[{done_before + finished}/{done_before + len(todo)}] {name:>14} seed {seed}: "
            f"cumulative {sum(curve):.3f} (reward {curve[0]:.3f} -> {curve[-1]:.3f}), "
            f"{cell['seconds']:.0f} s = {cell['seconds'] / cell_rounds:.2f} s/agent-round; "
            f"about {eta / 60:.0f} min left"
        )

    if jobs <= 1:
        for name, seed in todo:
            record(name, seed, run_cell(settings, name, seed, verbose))
        return results

    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # Children read these before torch starts its pools; set_num_threads(1) in run_cell too.
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(run_cell, settings, name, seed, verbose): (name, seed) for name, seed in todo}
        remaining = set(futures)
        while remaining:
            done, remaining = wait(remaining, return_when=FIRST_COMPLETED)
            for future in done:
                record(*futures[future], future.result())
    return results


def _finish(results: dict[str, Any], config: StudyConfig) -> None:
    """Bookkeeping fields of ``config``: completeness and the measured cost."""
    cfg = results["config"]
    total = len(cfg["arms"]) * len(cfg["seeds"])
    done = sum(len(results["curves"][a]) for a in cfg["arms"])
    cfg["cells_done"], cfg["cells_total"] = done, total
    cfg["complete"] = done == total
    if done:
        cfg["seconds_per_agent_round"] = round(
            cfg["elapsed_seconds"] / (done * config.agents * config.rounds), 3
        )
    cfg["updated"] = datetime.now(UTC).isoformat(timespec="seconds")


# --- analysis --------------------------------------------------------------------------------


@dataclass
class ArmSummary:
    name: str
    seeds: list[int]
    values: list[float]  # cumulative reward per seed
    mean: float
    interval: tuple[float, float] | None
    first_reward: float  # mean reward over seeds in the first and last tenth of the rounds
    last_reward: float


@dataclass
class Comparison:
    a: str
    b: str
    seeds: list[int]  # seeds where both arms ran (the pairs)
    differences: list[float]
    mean: float
    interval: tuple[float, float] | None
    gain: float | None  # mean(a) / mean(b) - 1 over the pairs
    gain_interval: tuple[float, float] | None
    wins: int  # pairs with a > b
    p_value: float
    exact: bool
    min_p_value: float
    holm_p: float = math.nan

    @property
    def sd(self) -> float:
        n = len(self.differences)
        if n < 2:
            return math.nan
        return math.sqrt(sum((d - self.mean) ** 2 for d in self.differences) / (n - 1))

    def verdict(self, alpha: float = 0.05) -> str:
        """``higher``/``lower`` (interval excludes 0 and p <= alpha), ``suggestive-higher`` /
        ``suggestive-lower`` (interval excludes 0, p > alpha) or ``inconclusive``."""
        if len(self.seeds) < 2 or self.interval is None:
            return "inconclusive"
        low, high = self.interval
        direction = "higher" if low > 0 else "lower" if high < 0 else None
        if direction is None:
            return "inconclusive"
        return direction if self.p_value <= alpha else f"suggestive-{direction}"


@dataclass
class Analysis:
    config: dict[str, Any]
    arms: dict[str, ArmSummary]
    comparisons: list[Comparison]
    resamples: int


def _seed_values(results: dict[str, Any], name: str) -> dict[int, float]:
    seeds = results["config"]["seeds"]
    return {s: v for s, v in zip(seeds, results["arms"].get(name, []), strict=False) if v is not None}


def analyse(results: dict[str, Any], resamples: int = stats.BOOTSTRAP_RESAMPLES) -> Analysis:
    """Per-arm means with bootstrap intervals over seeds and the paired comparisons."""
    config = results["config"]
    rounds = config["rounds"]
    tenth = max(1, rounds // 10)
    arms: dict[str, ArmSummary] = {}
    for name in config["arms"]:
        values = _seed_values(results, name)
        if not values:
            continue
        curves = [results["curves"][name][_key(s)] for s in values]
        arms[name] = ArmSummary(
            name,
            list(values),
            list(values.values()),
            sum(values.values()) / len(values),
            stats.bootstrap_interval(list(values.values()), resamples),
            sum(sum(c[:tenth]) / tenth for c in curves) / len(curves),
            sum(sum(c[-tenth:]) / tenth for c in curves) / len(curves),
        )
    comparisons: list[Comparison] = []
    for a, b in COMPARISONS:
        if a not in arms or b not in arms:
            continue
        va, vb = _seed_values(results, a), _seed_values(results, b)
        seeds = [s for s in config["seeds"] if s in va and s in vb]
        if not seeds:
            continue
        xa, xb = [va[s] for s in seeds], [vb[s] for s in seeds]
        diffs = [x - y for x, y in zip(xa, xb, strict=True)]
        test = stats.sign_flip_test(xa, xb)
        comparisons.append(
            Comparison(
                a,
                b,
                seeds,
                diffs,
                sum(diffs) / len(diffs),
                stats.paired_bootstrap_interval(xa, xb, resamples),
                sum(xa) / sum(xb) - 1 if sum(xb) else None,
                stats.paired_ratio_interval(xa, xb, resamples),
                sum(d > 0 for d in diffs),
                test.p_value,
                test.exact,
                test.min_p_value,
            )
        )
    for comparison, adjusted in zip(comparisons, stats.holm([c.p_value for c in comparisons]), strict=True):
        comparison.holm_p = adjusted
    return Analysis(config, arms, comparisons, resamples)


# --- report ----------------------------------------------------------------------------------


def _interval(interval: tuple[float, float] | None, digits: int = 2, scale: float = 1.0) -> str:
    if interval is None:
        return "n/a"
    return f"[{interval[0] * scale:.{digits}f}, {interval[1] * scale:.{digits}f}]"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def _p(value: float) -> str:
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def _describe(c: Comparison, unit: str = "") -> str:
    return (
        f"{c.a} - {c.b} = {c.mean:+.2f}{unit} (95% interval {_interval(c.interval)}; "
        f"{_pct(c.gain)} relative; {c.a} higher in {c.wins} of {len(c.seeds)} seeds; "
        f"sign-flip p = {_p(c.p_value)})"
    )


def _plot(results: dict[str, Any], analysis: Analysis, stem: Path, resamples: int) -> list[Path]:
    """Curves with bands, cumulative reward per seed, and paired differences, as PNGs."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a server or in CI
    import matplotlib.pyplot as plt
    import numpy as np

    colors = {
        "8/0": "#444444",
        "6/2": "#1f77b4",
        "4/4": "#d62728",
        "2/6": "#9467bd",
        "8/0-filtered": "#2ca02c",
        "4/4-unfiltered": "#ff7f0e",
    }
    config = results["config"]
    paths: list[Path] = []

    def save(figure: Any, name: str) -> None:
        figure.tight_layout()
        paths.append(stem.with_name(f"{stem.name}-{name}.png"))
        figure.savefig(paths[-1], dpi=110)
        plt.close(figure)

    # 1. Per-round mean reward, mean over seeds, band = pointwise 95% bootstrap interval.
    panels = [
        ("the paper's arms", ["8/0", "6/2", "4/4", "2/6"]),
        ("the controls", ["8/0", "8/0-filtered", "4/4", "4/4-unfiltered"]),
    ]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, (title, names) in zip(axes, panels, strict=True):
        for name in names:
            if name not in analysis.arms:
                continue
            curves = np.array([results["curves"][name][_key(s)] for s in analysis.arms[name].seeds])
            rounds = np.arange(1, curves.shape[1] + 1)
            mean = curves.mean(axis=0)
            band = [stats.bootstrap_interval(curves[:, r], resamples, seed=r) for r in range(curves.shape[1])]
            axis.plot(rounds, mean, color=colors[name], label=f"{name} ({curves.shape[0]} seeds)")
            axis.fill_between(
                rounds, [b[0] for b in band], [b[1] for b in band], color=colors[name], alpha=0.15
            )
        axis.set_title(title)
        axis.set_xlabel("round")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0].set_ylabel("mean reward over the agents")
    figure.suptitle("Reward per round: mean over seeds, band = 95% bootstrap interval of that mean")
    save(figure, "curves")

    # 2. Cumulative reward per seed (one line per seed joins its arms), mean and interval.
    names = [n for n in ARM_ORDER if n in analysis.arms]
    figure, axis = plt.subplots(figsize=(9, 4.5))
    seeds = config["seeds"]
    for seed in seeds:
        points = [(i, results["arms"][n][seeds.index(seed)]) for i, n in enumerate(names)]
        points = [(i, v) for i, v in points if v is not None]
        axis.plot([i for i, _ in points], [v for _, v in points], color="#999999", alpha=0.5, lw=0.8)
        axis.scatter([i for i, _ in points], [v for _, v in points], color="#999999", s=12, zorder=2)
    for i, name in enumerate(names):
        summary = analysis.arms[name]
        low, high = summary.interval or (summary.mean, summary.mean)
        axis.errorbar(
            i + 0.12,
            summary.mean,
            yerr=[[summary.mean - low], [high - summary.mean]],
            fmt="o",
            color=colors[name],
            capsize=4,
            zorder=3,
        )
    axis.set_xticks(range(len(names)), names)
    axis.set_ylabel(f"cumulative reward ({config['rounds']} rounds)")
    axis.set_title("Cumulative reward: grey = one seed (lines join its arms); colour = mean, 95% bootstrap")
    axis.grid(alpha=0.3, axis="y")
    save(figure, "cumulative")

    # 3. Paired differences with their intervals.
    comparisons = analysis.comparisons
    figure, axis = plt.subplots(figsize=(9, 0.45 * max(len(comparisons), 1) + 1.5))
    for row, c in enumerate(comparisons):
        low, high = c.interval or (c.mean, c.mean)
        axis.errorbar(
            c.mean, row, xerr=[[c.mean - low], [high - c.mean]], fmt="o", color="#d62728", capsize=4
        )
        axis.scatter(c.differences, [row] * len(c.differences), color="#999999", s=10, zorder=1)
    axis.axvline(0, color="black", lw=0.8)
    axis.set_yticks(range(len(comparisons)), [f"{c.a} - {c.b}" for c in comparisons])
    axis.invert_yaxis()
    axis.set_xlabel("difference in cumulative reward (paired by seed)")
    axis.set_title("Paired differences: red = mean, 95% bootstrap interval; grey = one seed")
    axis.grid(alpha=0.3, axis="x")
    save(figure, "differences")
    return paths


def _late_slope(results: dict[str, Any], analysis: Analysis) -> float | None:
    """Least-squares slope (reward per round) of the mean curve over all arms, last third."""
    curves = [results["curves"][n][_key(s)] for n, a in analysis.arms.items() for s in a.seeds]
    if not curves:
        return None
    rounds = len(curves[0])
    start = rounds - max(3, rounds // 3)
    if start < 0 or rounds < 3:
        return None
    mean = [sum(c[r] for c in curves) / len(curves) for r in range(start, rounds)]
    xs = list(range(start, rounds))
    mx, my = sum(xs) / len(xs), sum(mean) / len(mean)
    return sum((x - mx) * (y - my) for x, y in zip(xs, mean, strict=True)) / sum((x - mx) ** 2 for x in xs)


def answer(results: dict[str, Any], analysis: Analysis) -> list[str]:
    """The plain answer, generated from the numbers, and what would change it."""
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    config = results["config"]
    lines: list[str] = []
    if config.get("quick"):
        lines.append(
            "**This is a quick smoke-test run: its settings are far too small to answer anything; "
            "the text below only shows how the answer is generated.**\n"
        )
    if not config.get("complete"):
        lines.append(
            f"**The study is incomplete ({config.get('cells_done')} of {config.get('cells_total')} "
            "cells); the answer covers the seeds run so far.**\n"
        )
    primary = by_pair.get(PRIMARY)
    question = (
        "**Does sharing rollouts beat training alone once the lone agent may also drop "
        "zero-advantage samples?**"
    )
    scale = (
        f"{config['tier']}, {config['agents']} agents, {config['rounds']} rounds, G = {config['group_size']}"
    )
    if primary is None:
        lines.append(f"{question} Not answerable from this file: 4/4 and 8/0-filtered have no common seed.")
        return lines
    verdict = primary.verdict()
    n = len(primary.seeds)
    if verdict == "higher":
        text = f"Yes, at this scale ({scale}): 4/4 beat 8/0-filtered. {_describe(primary)}."
    elif verdict == "lower":
        text = f"No, at this scale ({scale}): 4/4 did worse than 8/0-filtered. {_describe(primary)}."
    elif verdict.startswith("suggestive"):
        word = "above" if verdict.endswith("higher") else "below"
        text = (
            f"Not established. The bootstrap interval of 4/4 - 8/0-filtered lies {word} zero, but the "
            f"exact permutation test does not reject exchangeability (p = {_p(primary.p_value)}; "
            f"the smallest p possible with {n} seeds is {_p(primary.min_p_value)}), and a percentile "
            f"bootstrap over {n} seeds is too narrow. {_describe(primary)}."
        )
    elif all(d == 0 for d in primary.differences):
        text = (
            f"No difference at this scale ({scale}): 4/4 and 8/0-filtered gave identical cumulative "
            f"rewards on all {n} seeds, so nothing here shows that sharing helps or hurts."
        )
    else:
        text = (
            f"Inconclusive at this scale ({scale}): the 95% interval of 4/4 - 8/0-filtered contains "
            f"zero, so these seeds do not show that sharing helps or hurts once the lone agent "
            f"filters too. {_describe(primary)}. The interval runs from {primary.interval[0]:+.2f} to "
            f"{primary.interval[1]:+.2f} in cumulative reward"
            + (
                f" ({_pct(primary.gain_interval[0])} to {_pct(primary.gain_interval[1])} relative)"
                if primary.gain_interval
                else ""
            )
            + "; effects outside it are unlikely, effects inside it are not ruled out."
            if primary.interval
            else f"Inconclusive: only {n} seed pair(s)."
        )
    lines.append(f"{question} {text}")

    def line(pair: tuple[str, str], what: str) -> None:
        c = by_pair.get(pair)
        if c is None:
            return
        v = c.verdict()
        word = {
            "higher": "higher",
            "lower": "lower",
            "suggestive-higher": "possibly higher (interval above zero, permutation test not significant)",
            "suggestive-lower": "possibly lower (interval below zero, permutation test not significant)",
            "inconclusive": "not distinguishable (interval contains zero)",
        }[v]
        lines.append(f"- {what}: {c.a} vs {c.b} {word}; {_describe(c)}.")

    lines.append("")
    line(("4/4", "8/0"), "The paper's comparison (paper: +94.6%)")
    line(("8/0-filtered", "8/0"), "Filtering alone, without sharing")
    line(("4/4", "4/4-unfiltered"), "Filtering within sharing")
    line(("6/2", "8/0-filtered"), "Less sharing against the fair control")
    line(("2/6", "8/0-filtered"), "More sharing against the fair control")
    if primary.verdict() != "inconclusive" and primary.holm_p > 0.05:
        lines.append(
            f"- Across the {len(analysis.comparisons)} comparisons of the table, Holm's adjustment "
            f"gives the main comparison p = {_p(primary.holm_p)}; it was fixed before the data, so "
            "its unadjusted p is the one to read, the others are exploratory."
        )

    lines += ["", "### What would change this answer", ""]
    sd = primary.sd
    if n >= 2 and sd == sd and sd > 0 and primary.mean != 0:
        needed = math.ceil((2.8 * sd / abs(primary.mean)) ** 2)
        lines.append(
            f"- **More seeds.** The 4/4 - 8/0-filtered differences have a standard deviation of "
            f"{sd:.2f} over {n} seeds. If the true difference were the observed {primary.mean:+.2f}, "
            f"about {needed} seeds would detect it with 80% power at the 5% level (normal "
            f"approximation n = (2.8 sd / difference)^2); with {n} seeds the exact sign-flip test "
            f"cannot go below p = {_p(primary.min_p_value)}."
        )
    else:
        lines.append(f"- **More seeds.** With {n} seed pair(s) the spread cannot be estimated.")
    slope = _late_slope(results, analysis)
    if slope is not None:
        trend = (
            "still rising"
            if slope > 0.001
            else "falling"
            if slope < -0.001
            else "about flat (within 0.001 per round)"
        )
        lines.append(
            f"- **More rounds.** Over the last third of the {config['rounds']} rounds the mean reward "
            f"(all arms) was {trend}: {slope:+.4f} per round. The paper ran 2000 rounds; sharing "
            "may matter more (or less) once the isolated agents plateau, which short runs cannot show."
        )
    zero = [
        cell.get("frac_reward_zero_std")
        for key, cell in config.get("cells", {}).items()
        if key.split("|")[0] in ("8/0", "8/0-filtered")
    ]
    zero = [z for z in zero if z is not None]
    zero_text = (
        f" Here {sum(zero) / len(zero) * 100:.0f}% of the isolated agents' groups had zero advantage "
        "(all G rewards equal), which is what the filter removes."
        if zero
        else ""
    )
    lines.append(
        f"- **A bigger tier and other tasks.** {config['tier']} on the `{config['tasks']}` tasks is a "
        "~1M-parameter model on easy arithmetic and spelling; the paper's effect was measured on "
        "Qwen2.5-0.5B with nine reasoning-gym tasks and 256-token completions. How much filtering "
        f"and sharing help depends on how often whole groups score alike.{zero_text} The "
        "`sapo-table` campaign preset runs the same arms on volunteers' GPUs."
    )
    return lines


def write_report(
    results_path: Path, out: Path | None = None, resamples: int = stats.BOOTSTRAP_RESAMPLES
) -> Path:
    """Write the markdown report (and its PNGs next to it); returns the report's path."""
    results = json.loads(Path(results_path).read_text())
    out = out or Path(results_path).with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    analysis = analyse(results, resamples)
    config = results["config"]
    images = _plot(results, analysis, out.with_suffix(""), min(resamples, 2000)) if analysis.arms else []
    arms = analysis.arms
    base = arms.get(BASELINE)
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    paper_base = PAPER_CUMULATIVE[BASELINE]

    lines = [
        f"# The SAPO table at CPU scale ({config['tier']})",
        "",
        f"Generated by `swarm-worker study-report {results_path}` from the study's results; "
        "regenerate it rather than editing it. Issue #8: does sharing rollouts beat training alone "
        "once the lone agent may also drop zero-advantage samples?",
        "",
    ]
    if config.get("quick"):
        lines += ["> **Quick smoke-test run**: the numbers below mean nothing.", ""]
    if not config.get("complete"):
        lines += [f"> **Incomplete**: {config.get('cells_done')} of {config.get('cells_total')} cells.", ""]
    versions_text = ", ".join(f"{k} {v}" for k, v in config.get("versions", {}).items())
    build = config.get("model_build") or {}
    recipe = build.get("recipe_version")
    lines += [
        "## Setup",
        "",
        f"- Arms: {', '.join(config['arms'])}. I/J = own/external rollouts trained on per round; the "
        "paper's sharing arms and 8/0-filtered drop zero-advantage groups (`nonzero_advantage`), "
        "8/0 and 4/4-unfiltered do not (`uniform`).",
        f"- Each cell (arm, seed): {config['agents']} agents from the same weights, "
        f"{config['questions_per_round']} questions per agent per round, G = {config['group_size']} "
        f"completions of at most {config['max_new_tokens']} tokens, {config['rounds']} rounds, "
        f"tier {config['tier']}" + (f" (build recipe {recipe})" if recipe else "") + f", tasks "
        f"`{config['tasks']}`, learning rate {config['learning_rate']:g}, {config['num_iterations']} "
        f"GRPO iteration(s), beta {config['beta']:g}, pool window {config['pool_window']}.",
        f"- Seeds {config['seeds']}, the same for every arm: a seed fixes every agent's question stream "
        "and sampling seeds, so arms pair by seed.",
        f"- Cumulative reward: {config['cumulative_reward']}.",
        f"- Compute: {config.get('elapsed_seconds', 0) / 60:.1f} process-minutes over "
        f"{config.get('cells_done')} cells ({config.get('wall_seconds', 0) / 60:.1f} minutes of wall "
        f"clock), {config.get('seconds_per_agent_round', float('nan')):.2f} s per agent-round and "
        f"process, one torch thread per process, {config.get('jobs', 1)} process(es); "
        f"{config.get('machine', '')}.",
        f"- Versions: {versions_text}.",
        "",
        "## The table beside the paper's",
        "",
        "Absolute cumulative rewards depend on rounds, tasks and model, so compare the gains over "
        "8/0. Intervals are 95% percentile bootstrap intervals over seeds "
        f"({analysis.resamples} resamples, seeded); with few seeds they are too narrow rather than "
        "too wide. Gain intervals resample seeds as pairs.",
        "",
        "| arm | cumulative reward, mean [95% interval] | per round, first -> last tenth "
        "| gain over 8/0 [95% interval] | paper cumulative | paper gain |",
        "|---|---|---|---|---|---|",
    ]
    for name in ARM_ORDER:
        if name not in arms:
            continue
        s = arms[name]
        if name == BASELINE:
            gain = "(baseline)"
        elif base is not None and (c := by_pair.get((name, BASELINE))) is not None:
            gain = f"{_pct(c.gain)} {_interval(c.gain_interval, 1, 100)}%"
        else:
            gain = "n/a"
        paper = PAPER_CUMULATIVE.get(name)
        paper_cell = f"{paper:.2f}" if paper else "not run"
        paper_gain = (
            "(baseline)" if name == BASELINE else _pct(paper / paper_base - 1) if paper else "not run"
        )
        lines.append(
            f"| {name} | {s.mean:.2f} {_interval(s.interval)} ({len(s.seeds)} seeds) | "
            f"{s.first_reward:.3f} -> {s.last_reward:.3f} | {gain} | {paper_cell} | {paper_gain} |"
        )
    lines += [
        "",
        "The paper's numbers: 8 agents, Qwen2.5-0.5B, 2000 rounds, one run; its 8/0 could not drop "
        "zero-advantage samples while its sharing arms did.",
        "",
        "## Paired differences",
        "",
        "Difference = cumulative reward of the first arm minus the second, seed by seed. Interval: "
        "95% percentile bootstrap of the mean difference (seeds resampled as pairs). p: two-sided "
        "paired sign-flip permutation test of H0 'the two arms are exchangeable within a seed', "
        "statistic T = |mean(d)|, p = #{s in {-1,+1}^n : T(s d) >= T(d)} / 2^n (exact for up to 16 "
        "seeds, so with n seeds p >= 2/2^n). Holm: adjusted over the rows of this table; the first "
        "row was fixed as the main question before the data, the others are exploratory.",
        "",
        "| comparison | mean difference [95% interval] | relative | first arm higher | p | Holm p |",
        "|---|---|---|---|---|---|",
    ]
    for c in analysis.comparisons:
        lines.append(
            f"| {c.a} - {c.b} | {c.mean:+.2f} {_interval(c.interval)} | {_pct(c.gain)} | "
            f"{c.wins} of {len(c.seeds)} | {_p(c.p_value)}{'' if c.exact else ' (Monte-Carlo)'} | "
            f"{_p(c.holm_p)} |"
        )
    lines += ["", "## Reward curves", ""]
    if images:
        lines += [
            "Mean over seeds of the per-round mean reward over the agents; the band is the pointwise "
            "95% percentile bootstrap interval of that mean over seeds (uncertainty of the mean, "
            "not the spread of agents).",
            "",
            f"![reward curves]({images[0].name})",
            "",
            "Cumulative reward of every seed (grey, lines join one seed's arms) and the mean with its "
            "interval:",
            "",
            f"![cumulative reward per seed]({images[1].name})",
            "",
            "Paired differences seed by seed, with the mean and its interval:",
            "",
            f"![paired differences]({images[2].name})",
            "",
        ]
    lines += ["## Answer", "", *answer(results, analysis), ""]
    out.write_text("\n".join(lines))
    return out
