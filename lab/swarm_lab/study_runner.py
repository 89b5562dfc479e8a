"""Running the SAPO table study (lab/swarm_lab/study.py): its cells, resumably.

A cell is one :func:`worker.research.simulate.run_arm`. Cells run seed by seed (all arms of
seed 0, then seed 1, ...; v4: its new arms' cells first, then its reruns of v3's), so an
interrupted study leaves complete pairs behind; the results file is rewritten atomically after
every cell and a rerun skips the cells it holds.

**Provenance** (issue #49). Every cell records, in ``config.cells["<arm>|<seed>"].provenance``,
the commit it ran from, the SHA-256 of the uncommitted diff of tracked files (None: a clean
tree; the results file itself does not count), the SHA-256 of the model's weights file, and its
start and end (UTC). A full run refuses a tree with uncommitted changes unless told
(``allow_dirty``). Each invocation appends its versions, machine and jobs to ``config.runs``;
``config.versions`` keeps the first run's. Nothing a resume writes changes an earlier cell's
record (tests/worker/research/test_study_provenance.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarm_lab.study import (
    ARM_ORDER,
    BATCH,
    CUMULATIVE_DEFINITION,
    CURVE_DEFINITION,
    FAMILY,
    MECHANISM_METRICS,
    PRIMARY,
    REQUIRED_ARMS,
    V3_EXPLORATORY,
    V3_FAMILY,
    V3_PRIMARY,
    V4_EXPLORATORY,
    V4_FAMILY,
    V4_HELD_OUT_FAMILY,
    V4_NEW_ARMS,
    V4_PRIMARY,
    V4_SEEN_SEEDS,
    WINDOWS,
    StudyConfig,
    StudyError,
    arm_parameters,
    order_arms,
    resolve_arm,
    seed_key,
)
from worker.shared.arms import Arm
from worker.shared.files import write_json_atomic

DEFAULT_JOBS = min(2, os.cpu_count() or 1)

# What runs cells: run_cells, or a callable like it (lab/study_queue/submit.py: --executor celery).
Cell = tuple[Any, dict[str, Any], str, int]
CellExecutor = Callable[[list[Cell], int, bool, Callable[[Any, dict[str, Any]], None]], None]


def _set_one_thread() -> None:
    """One torch thread per process: on 2 cores, processes with several threads each contend
    and run up to 8x slower (measured in tests/conftest.py's note)."""
    import torch

    torch.set_num_threads(1)


def run_cell(
    settings: dict[str, Any], arm_name: str, seed: int, verbose: bool = False, device: str = "cpu"
) -> dict[str, Any]:
    """Run one (arm, seed) and return its curve, cumulative reward and cost.

    A module-level function of plain data so a process pool can run it. ``device``: where its
    agents train and generate (a study queue worker's ``SWARM_STUDY_DEVICE``; local runs: cpu).
    """
    _set_one_thread()
    from swarm_lab.held_out import HeldOut
    from worker.research.simulate import SimulationConfig, run_arm
    from worker.shared.config import AgentConfig, GRPOConfig
    from worker.shared.questions import preset
    from worker.shared.tiers import model_cache_dir

    began = datetime.now(UTC).isoformat(timespec="seconds")
    grpo = GRPOConfig(
        learning_rate=settings["learning_rate"],
        num_iterations=settings["num_iterations"],
        temperature=settings["temperature"],
        beta=settings["beta"],
    )
    agent = AgentConfig(
        questions_per_round=settings["questions_per_round"],
        num_local=min(BATCH, settings["questions_per_round"]),  # the arm sets I and J
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
        device=device,
        # a heterogeneous swarm (lab/swarm_lab/heterogeneous.py): agent i's tier, pools per tier
        tiers=settings.get("tiers"),
        pool_per_tier=settings.get("pool_per_tier", False),
    )

    def log(message: str) -> None:
        if verbose:
            print(f"  [{arm_name} seed {seed}] {message}", flush=True)

    def on_round(arm: Arm, done: int, metrics: list[dict[str, float]]) -> None:
        if verbose:  # what the round trained on: the batch each arm's rule assembled

            def mean(key: str) -> float:
                return sum(m.get(key, 0.0) for m in metrics) / len(metrics)

            print(
                f"  [{arm_name} seed {seed}] round {done - 1}: mean reward {mean('reward'):.3f}; "
                f"generated {mean('generation/questions'):.2f} questions, trained on "
                f"{mean('batch/local_used'):.2f} own + {mean('batch/external_used'):.2f} external "
                f"groups (asked {mean('batch/local_requested'):.2f} + "
                f"{mean('batch/external_requested'):.2f}), {mean('train/tokens'):.0f} tokens",
                flush=True,
            )

    if not verbose:  # one "Loading weights" bar per agent and cell buries the progress lines
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    started = time.perf_counter()
    arm = resolve_arm(arm_name, **arm_parameters(settings))
    held_out = (
        HeldOut(config.mix, seed, settings["held_out_per_task"], points, settings["max_new_tokens"])
        if (points := settings.get("held_out_points"))
        else None
    )
    result = run_arm(config, arm, model_cache_dir(), None, on_round, log=log, observe=held_out)
    seconds = time.perf_counter() - started
    histories = list(result["agents"].values())
    rounds = settings["rounds"]
    # Rounded so the file diffs cleanly; the cumulative reward is the sum of the stored curve.
    curve = [round(sum(h[r]["reward"] for h in histories) / len(histories), 6) for r in range(rounds)]

    def mean_of(key: str) -> float:
        values = [m.get(key, 0.0) for h in histories for m in h]
        return round(sum(values) / len(values), 6)

    def round_means(key: str) -> list[float | None]:
        """Per round, the mean over the agents that report ``key`` (None where none does)."""
        out: list[float | None] = []
        for r in range(rounds):
            values = [h[r][key] for h in histories if key in h[r]]
            out.append(round(sum(values) / len(values), 6) if values else None)
        return out

    cell: dict[str, Any] = {}
    if config.tiers is not None:  # per size: the per-round mean reward over that size's agents
        by_tier: dict[str, list[list[dict[str, float]]]] = {}
        for tier_name, history in zip(config.tiers, histories, strict=True):
            by_tier.setdefault(tier_name, []).append(history)
        cell["curves_by_tier"] = {
            name: [round(sum(h[r]["reward"] for h in group) / len(group), 6) for r in range(rounds)]
            for name, group in by_tier.items()
        }
        # what each size trained on: external groups, and those generated by the other size
        cell["batches_by_tier"] = {
            name: {
                key: round(sum(m.get(key, 0.0) for h in group for m in h) / (len(group) * rounds), 4)
                for key in ("batch/local_used", "batch/external_used", "batch/external_other_tier")
            }
            for name, group in by_tier.items()
        }
    if held_out is not None:
        cell["held_out"] = held_out.record(config.agents)
    return {
        **cell,
        "curve": curve,
        "mechanism": {key: round_means(key) for key in MECHANISM_METRICS},
        "provenance": {
            "model_sha256": model_sha256(settings["tier"]),
            "started": began,
            "ended": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "seconds": round(seconds, 2),
        "frac_reward_zero_std": mean_of("frac_reward_zero_std"),
        "local_used": mean_of("batch/local_used"),
        "external_used": mean_of("batch/external_used"),
        "informative_groups": mean_of("batch/informative_groups"),
        "external_from_others": mean_of("batch/external_from_others"),
        "questions_generated": mean_of("generation/questions"),
        # compute per agent-round (issue #29)
        "generated_completions": mean_of("generation/completions"),
        "generated_tokens": mean_of("generation/tokens"),
        "trained_completions": mean_of("train/completions"),
        "trained_tokens": mean_of("train/tokens"),
        "grad_norm": mean_of("grad_norm"),
        "grad_norm_clipped": mean_of("grad_norm_clipped"),
    }


CHECKOUT = Path(__file__).resolve().parent.parent.parent


def _git(*args: str, root: Path = CHECKOUT) -> str | None:
    """``git args`` in ``root`` (read-only); None where git or the repository is missing."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def tree_state(out: Path | None = None, root: Path = CHECKOUT) -> dict[str, Any]:
    """The commit of the checkout ``root`` (this code's) and the SHA-256 of its uncommitted diff
    of tracked files (None: clean), the results file ``out`` left out (a run rewrites it)."""
    commit = (_git("rev-parse", "HEAD", root=root) or "").strip() or None
    exclude = []
    top = (_git("rev-parse", "--show-toplevel", root=root) or "").strip()
    if out is not None and top:
        try:
            exclude = [f":(exclude){out.resolve().relative_to(Path(top).resolve())}"]
        except ValueError:  # the results file lies outside the checkout
            exclude = []
    diff = _git("diff", "HEAD", "--binary", "--", ".", *exclude, root=Path(top or root)) if commit else None
    digest = hashlib.sha256(diff.encode()).hexdigest() if diff else None
    return {"commit": commit, "diff_sha256": digest}


def model_sha256(tier_name: str) -> str | None:
    """SHA-256 of the weights file the cells of tier ``tier_name`` start from (None: not built)."""
    from worker.engine.policy import resolve
    from worker.shared.tiers import model_cache_dir, tier

    spec = tier(tier_name)
    if not spec.source.startswith("builtin:"):
        return None
    weights = Path(resolve(spec, model_cache_dir(), log=lambda _: None)) / "model.safetensors"
    if not weights.exists():
        return None
    digest = hashlib.sha256()
    with weights.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    """The tiny tier's build record (recipe version, steps, tokenizer hash), if it has one: of
    the build the cells load (the shipped one, else the cache's)."""
    from worker.engine.policy import resolve
    from worker.shared.tiers import model_cache_dir, tier

    spec = tier(tier_name)
    if not spec.source.startswith("builtin:"):
        return None
    path = Path(resolve(spec, model_cache_dir(), log=lambda _: None)) / "swarm_build.json"
    if not path.exists():
        return None
    build = json.loads(path.read_text())
    keep = ("seed", "steps", "params", "tokenizer_sha256", "final_loss", "swarm_version")
    return {
        "recipe_version": (build.get("recipe") or {}).get("recipe_version"),
        **{key: build[key] for key in keep if key in build},
    }


def _write(out: Path, results: dict[str, Any]) -> None:
    """The results file, whole (indented by 1, as the committed docs/experiments/ files are)."""
    write_json_atomic(out, results, indent=1)


def _rebuild_arms(results: dict[str, Any]) -> None:
    """``arms`` from ``curves``: the cumulative reward per seed, in ``config.seeds`` order."""
    seeds = results["config"]["seeds"]
    results["arms"] = {
        name: [
            round(sum(curve), 6) if (curve := results["curves"][name].get(seed_key(s))) is not None else None
            for s in seeds
        ]
        for name in results["config"]["arms"]
    }


def resume(out: Path, settings: dict[str, Any], seeds: list[int]) -> dict[str, Any] | None:
    """The results file at ``out`` to go on with (None: there is none), its seeds extended by
    ``seeds``; raises :class:`StudyError` when it holds a study of other ``settings``. Seeds
    (and a study's arms) only grow: a rerun with more extends the study, never drops cells."""
    if not out.exists():
        return None
    results = json.loads(out.read_text())
    old = {key: results["config"].get(key) for key in settings}
    if old != settings:
        differ = sorted(key for key in settings if old[key] != settings[key])
        raise StudyError(
            f"{out} holds a study with other settings ({', '.join(differ)}); "
            "use another --out or remove it to start over"
        )
    cfg = results["config"]
    cfg["seeds"] = cfg["seeds"] + [s for s in seeds if s not in cfg["seeds"]]
    return results


def _open_results(out: Path, config: StudyConfig) -> dict[str, Any]:
    """The results so far: the file at ``out`` if its settings match, else a new skeleton."""
    settings = config.settings()
    results = resume(out, settings, config.seeds)
    if results is not None:
        cfg = results["config"]
        cfg["arms"] = order_arms([*cfg["arms"], *config.arms])
        for name in cfg["arms"]:
            results["curves"].setdefault(name, {})
            results.setdefault("mechanism", {}).setdefault(name, {})
            if config.design == "v4":
                results.setdefault("held_out", {}).setdefault(name, {})
        if config.design in ("v3", "v4"):
            _describe_arms(cfg, config)
        return results
    arms = order_arms(list(config.arms))
    if config.design == "v2":
        definitions = {a: config.arm(a).to_json() for a in ARM_ORDER[:8]}
        preregistered: dict[str, Any] = {"primary": list(PRIMARY), "family": [list(pair) for pair in FAMILY]}
    elif config.design == "v3":
        definitions = {}
        preregistered = {
            "primary": list(V3_PRIMARY),
            "family": [list(pair) for pair in V3_FAMILY],
            "exploratory": [list(pair) for pair in V3_EXPLORATORY],
            "windows": WINDOWS,
            "holm_over": "family",
        }
    else:
        definitions = {}
        preregistered = {
            "primary": list(V4_PRIMARY),
            "family": [list(pair) for pair in V4_FAMILY],
            "held_out_family": [list(pair) for pair in V4_HELD_OUT_FAMILY],
            "exploratory": [list(pair) for pair in V4_EXPLORATORY],
            "windows": WINDOWS,
            "holm_over": "family; held_out_family separately",
            # v3 ran these arms on their first N seeds: data seen before this design
            "seen_seeds": dict(V4_SEEN_SEEDS),
            "reruns_of": "docs/experiments/sapo-table-cpu-v3.json",
        }
    results = {
        "config": {
            **settings,
            "seeds": list(config.seeds),
            "arms": arms,
            "arm_definitions": definitions,
            "required_arms": list(config.required_arms),
            # pre-registered before any data (lab/swarm_lab/study.py)
            "preregistered": preregistered,
            "cumulative_reward": CUMULATIVE_DEFINITION,
            "curves": CURVE_DEFINITION,
            "torch_threads_per_process": 1,
            "elapsed_seconds": 0.0,
            "cells": {},
        },
        "arms": {},
        "curves": {a: {} for a in arms},
        "mechanism": {a: {} for a in arms},
    }
    if config.design == "v4":
        results["held_out"] = {a: {} for a in arms}
    if config.design in ("v3", "v4"):
        _describe_arms(results["config"], config)
    return results


def _describe_arms(cfg: dict[str, Any], config: StudyConfig) -> None:
    """A v3 file's record of every arm it holds: its definition with B resolved
    (``arm_definitions``), B alone (``arm_questions``) and what it generates and trains on, in
    words (``arm_semantics``)."""
    for name in cfg["arms"]:
        arm = config.arm(name)
        questions = arm.questions(config.questions_per_round)
        cfg["arm_definitions"][name] = {**arm.to_json(), "questions_per_round": questions}
        cfg.setdefault("arm_questions", {})[name] = questions
        cfg.setdefault("arm_semantics", {})[name] = arm.semantics(config.questions_per_round)


def pending_cells(results: dict[str, Any], config: StudyConfig) -> list[tuple[str, int]]:
    """Cells still to run, seed by seed (all arms of a seed before the next seed); an arm outside
    the required ones runs only on its first ``other_seeds`` seeds. v4 runs its cells that v3 has
    not first (its new arms, and 4/4-is beyond v3's seeds), then its reruns of v3's cells."""
    cells = [
        (name, seed)
        for seed in config.seeds
        for name in order_arms(list(config.arms))
        if seed in config.seeds_of(name) and seed_key(seed) not in results["curves"][name]
    ]
    if config.design != "v4":
        return cells

    def rerun(cell: tuple[str, int]) -> bool:
        name, seed = cell
        if name in V4_NEW_ARMS:
            return False
        seen = V4_SEEN_SEEDS.get(name)
        return seen is None or seed in config.seeds[:seen]

    return sorted(cells, key=rerun)  # stable: seed by seed within each phase


def run_study(
    config: StudyConfig,
    out: Path,
    jobs: int = 1,
    verbose: bool = False,
    log: Callable[[str], None] = print,
    allow_dirty: bool = False,
    executor: CellExecutor | None = None,
) -> dict[str, Any]:
    """Run every missing cell of ``config`` into ``out`` (resuming it) and return the results.

    ``jobs`` > 1 runs cells in that many processes of one torch thread each (spawned, so no
    process inherits another's torch state); results are written by this process only. A tree
    with uncommitted changes to tracked files is refused unless ``allow_dirty`` (the module
    docstring: provenance). ``executor`` runs the cells instead of :func:`run_cells`; a cell's own
    ``provenance`` (commit, diff, model, times: a remote machine's) overrides this tree's.
    """
    _set_one_thread()
    results = _open_results(out, config)
    todo = pending_cells(results, config)
    tree = tree_state(out)
    if todo and tree["diff_sha256"] is not None and not allow_dirty:
        raise StudyError(
            "the tree has uncommitted changes to tracked files; commit them (every cell records its "
            "commit) or pass --allow-dirty (every cell then records a hash of the diff)"
        )
    cfg = results["config"]
    done_before = sum(len(c) for c in results["curves"].values())
    if done_before:
        log(f"resuming {out}: {done_before} cells done, {len(todo)} to run")
    run_record = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": versions(),
        **tree,
        "model_build": model_build(config.tier),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "jobs": jobs,
        "cells_before": done_before,
    }
    cfg.setdefault("versions", run_record["versions"])
    cfg.setdefault("model_build", run_record["model_build"])
    cfg.setdefault("machine", run_record["machine"])
    cfg.setdefault("jobs", jobs)
    if todo:
        cfg.setdefault("runs", []).append(run_record)
    _rebuild_arms(results)
    if not todo:
        _finish(results, config)
        _write(out, results)
        return results
    cfg.setdefault("started", datetime.now(UTC).isoformat(timespec="seconds"))
    settings = config.settings()
    cell_rounds = config.agents * config.rounds
    others = config.other_seeds or len(config.seeds)
    log(
        f"{len(todo)} cells, {config.agent_rounds()} agent-rounds in all; required arms "
        f"{', '.join(a for a in config.required_arms if a in config.arms)} on {len(config.seeds)} seeds, "
        f"others on {min(others, len(config.seeds))}"
    )
    started = time.perf_counter()
    wall_before = cfg.get("wall_seconds", 0.0)
    finished = 0

    def record(name: str, seed: int, cell: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        results["curves"][name][seed_key(seed)] = cell.pop("curve")
        results.setdefault("mechanism", {}).setdefault(name, {})[seed_key(seed)] = cell.pop("mechanism")
        if "held_out" in cell:
            results.setdefault("held_out", {}).setdefault(name, {})[seed_key(seed)] = cell.pop("held_out")
        cell["provenance"] = {**tree, **cell["provenance"]}
        cfg["cells"][f"{name}|{seed}"] = cell
        # elapsed: the cells' own seconds summed (process-seconds); wall: the runs' clock time.
        cfg["elapsed_seconds"] = round(cfg["elapsed_seconds"] + cell["seconds"], 2)
        cfg["wall_seconds"] = round(wall_before + time.perf_counter() - started, 2)
        _rebuild_arms(results)
        _finish(results, config)
        _write(out, results)
        wall = time.perf_counter() - started
        eta = wall / finished * (len(todo) - finished)
        curve = results["curves"][name][seed_key(seed)]
        log(
            f"[{done_before + finished}/{done_before + len(todo)}] {name:>14} seed {seed}: "
            f"cumulative {sum(curve):.3f} (reward {curve[0]:.3f} -> {curve[-1]:.3f}), "
            f"{cell['seconds']:.0f} s = {cell['seconds'] / cell_rounds:.2f} s/agent-round; "
            f"about {eta / 60:.0f} min left"
        )

    (executor or run_cells)(
        [((name, seed), settings, name, seed) for name, seed in todo],
        jobs,
        verbose,
        lambda key, cell: record(*key, cell),
    )
    return results


def run_cells(
    cells: list[Cell], jobs: int, verbose: bool, record: Callable[[Any, dict[str, Any]], None]
) -> None:
    """:func:`run_cell` each (key, settings, arm, seed) in order, in ``jobs`` processes of one
    torch thread each (spawned, so no process inherits another's torch state) when ``jobs`` > 1;
    ``record(key, cell)`` runs in this process as each cell finishes."""
    if jobs <= 1:
        for key, settings, name, seed in cells:
            record(key, run_cell(settings, name, seed, verbose))
        return

    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # Children read these before torch starts its pools; set_num_threads(1) in run_cell too.
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {
            pool.submit(run_cell, settings, name, seed, verbose): key for key, settings, name, seed in cells
        }
        remaining = set(futures)
        while remaining:
            done, remaining = wait(remaining, return_when=FIRST_COMPLETED)
            for future in done:
                record(futures[future], future.result())


def _finish(results: dict[str, Any], config: StudyConfig) -> None:
    """Bookkeeping fields of ``config``: completeness and the measured cost."""
    cfg = results["config"]
    other = cfg.get("other_seeds")
    required = cfg.get("required_arms", REQUIRED_ARMS)
    total = sum(
        len(cfg["seeds"]) if a in required or other is None else min(other, len(cfg["seeds"]))
        for a in cfg["arms"]
    )
    done = sum(len(results["curves"][a]) for a in cfg["arms"])
    cfg["cells_done"], cfg["cells_total"] = done, total
    cfg["complete"] = done == total
    if done:
        cfg["seconds_per_agent_round"] = round(
            cfg["elapsed_seconds"] / (done * config.agents * config.rounds), 3
        )
    cfg["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
