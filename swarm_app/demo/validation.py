"""The validation campaign (issue #50 item 2): a platform campaign on study v3's settings, and the
comparison of its swarm - control gain with the simulator's for the same arms.

Plain functions, no database: the campaign's settings from v3's results file
(:func:`campaign_settings`, :func:`arm_problems`), the platform's units and gain from per-agent,
per-round rows (:func:`platform_units`, :func:`gain`), the simulator's from v3's curves
(:func:`simulator_gain`; per-draw ages from reruns, :func:`simulate_command`,
:func:`simulator_rerun`), pool ages on both sides (:func:`age_summary`), and all of it together
(:func:`analyse`). ``validation_report.py`` writes the report, ``validation_data.py`` reads the
rows from the coordinator's database; ``manage.py validation_campaign`` runs the campaign.

Units of independence, as the campaign page counts them (swarm_app/web/estimates.py): a **swarm**
(the mean over its nodes: they share a pool) for the swarm arm, a **control seed** (one node) for
the control; in the simulator a **cell** (one seed: 8 agents, the mean over them). A unit's
cumulative reward is H x its agents' mean reward per round over rounds 0..H-1 (the sum over rounds
of the per-round mean when every agent reported every round).

The settings come from the results file, not from the lab (lab/swarm_lab; the coordinator imports only
worker/shared: pyproject's import contracts); tests/worker/research/test_validation_settings.py
holds them equal to StudyConfig's v3.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from worker.shared import stats
from worker.shared.campaign import CampaignConfig
from worker.shared.questions import PRESETS

SWARM_ARM = "4/4"  # the v3 arm a campaign of B = 8, I = 4, J = 4 runs (v2's semantics)
CONTROL_ARM = "8/0"  # its isolated control (CampaignConfig.control_arm("isolated"))
CONTROL_KIND = "isolated"
CONFIDENCE = 0.95
# the arm fields that must agree between a campaign's arm and v3's arm_definitions
ARM_FIELDS = (
    "num_local",
    "num_external",
    "local_strategy",
    "external_strategy",
    "batch_rule",
    "external_is",
    "replay",
)
AGE_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


class Row(NamedTuple):
    """One agent's report of one round on the platform: ``arm`` "swarm" or the control kind,
    ``unit`` its independent unit ("swarm:<r>" or "seed:<s>"), the coordinator's verified
    ``reward``, and the J side's age in rounds (mean and max over the groups drawn; None when
    nothing was drawn)."""

    arm: str
    unit: str
    agent: str
    round: int
    reward: float
    age: float | None = None
    age_max: float | None = None


# --- the campaign's settings ------------------------------------------------------------------


def campaign_settings(
    v3_config: dict[str, Any],
    swarms: int,
    control_seeds: int,
    rounds: int | None = None,
    tokens: int | None = None,
    seed: int = 0,
) -> CampaignConfig:
    """The validation campaign: v3's settings (``config`` of sapo-table-cpu-v3.json: tier, tasks,
    G, B, tokens, learning rate, GRPO iterations, temperature, beta, pool window, rounds) with
    the 4/4 swarm arm in ``swarms`` independent swarms (replicates) and ``control_seeds`` seeds
    of the isolated 8/0 control only; no held-out evaluation (v3 had none). ``rounds`` and
    ``tokens`` shrink it for a smoke run (:func:`deviations` names what differs)."""
    arm = v3_config["arm_definitions"][SWARM_ARM]
    config = CampaignConfig(
        tasks=PRESETS[v3_config["tasks"]].to_json(),
        tiers=[v3_config["tier"]],
        group_size=v3_config["group_size"],
        questions_per_round=v3_config["questions_per_round"],
        num_local=arm["num_local"],
        num_external=arm["num_external"],
        local_strategy=arm["local_strategy"],
        external_strategy=arm["external_strategy"],
        rounds=rounds or v3_config["rounds"],
        max_new_tokens=tokens or v3_config["max_new_tokens"],
        seed=seed,
        grpo={
            "learning_rate": v3_config["learning_rate"],
            "num_iterations": v3_config["num_iterations"],
            "temperature": v3_config["temperature"],
            "beta": v3_config["beta"],
        },
        controls={
            "isolated": True,
            "filtered": False,
            "self_replay": False,
            "over_generation": False,
            "seeds": control_seeds,
            "reference": CONTROL_KIND,
        },
        pool_window=v3_config["pool_window"],
        pool_within_tier=True,
        replicates=swarms,
        eval_every=0,
        # 45 training processes' worth of nodes share 2 cores, 4 nodes taking turns in a worker
        # process: a node may hold its next round's lease (protocol 2 hands it over with the
        # metrics' answer) for several of its process's turns. A long lease keeps a slow round
        # from being reissued; it changes nothing a node trains on.
        lease_seconds=600.0,
    )
    return config.validate()


def arm_problems(config: CampaignConfig, v3_config: dict[str, Any]) -> list[str]:
    """Where the campaign's swarm arm and isolated control differ from v3's 4/4 and 8/0
    (``arm_definitions``: I, J, strategies, batch rule, replay; B of each), or a learner
    setting from v3's; [] when the campaign runs the study's arms."""
    problems = []
    definitions = v3_config["arm_definitions"]
    b = v3_config["questions_per_round"]
    for label, arm, wanted in (
        ("swarm", config.swarm_arm(), definitions[SWARM_ARM]),
        ("control", config.control_arm(CONTROL_KIND), definitions[CONTROL_ARM]),
    ):
        for field in ARM_FIELDS:
            if getattr(arm, field) != wanted[field]:
                problems.append(f"{label} {field}: {getattr(arm, field)!r}, v3 {wanted[field]!r}")
        questions = arm.questions_per_round or config.questions_per_round
        if questions != (wanted["questions_per_round"] or b):
            problems.append(f"{label} B: {questions}, v3 {wanted['questions_per_round'] or b}")
    grpo = config.grpo_config(config.tiers[0])
    for name in ("learning_rate", "num_iterations", "temperature", "beta"):
        if getattr(grpo, name) != v3_config[name]:
            problems.append(f"grpo.{name}: {getattr(grpo, name)!r}, v3 {v3_config[name]!r}")
    for name, value in (
        ("group_size", config.group_size),
        ("questions_per_round", config.questions_per_round),
        ("pool_window", config.pool_window),
    ):
        if value != v3_config[name]:
            problems.append(f"{name}: {value!r}, v3 {v3_config[name]!r}")
    if config.tasks != PRESETS[v3_config["tasks"]].to_json():
        problems.append(f"tasks: not v3's preset {v3_config['tasks']!r}")
    if config.tiers != [v3_config["tier"]]:
        problems.append(f"tiers: {config.tiers}, v3 [{v3_config['tier']!r}]")
    return problems


def deviations(config: CampaignConfig, nodes: int, v3_config: dict[str, Any]) -> dict[str, list[Any]]:
    """{setting: [this run's, v3's]} for the sizes a smoke run shrinks (rounds, tokens, nodes per
    swarm): any entry makes the run a smoke test, not a validation."""
    pairs = {
        "rounds": (config.rounds, v3_config["rounds"]),
        "max_new_tokens": (config.max_new_tokens, v3_config["max_new_tokens"]),
        "nodes_per_swarm": (nodes, v3_config["agents"]),
    }
    return {name: [ours, theirs] for name, (ours, theirs) in pairs.items() if ours != theirs}


# --- the platform's units and gain ------------------------------------------------------------


def platform_units(rows: Iterable[Row], horizon: int) -> dict[str, dict[str, float]]:
    """{arm: {unit: cumulative reward per agent over rounds 0..horizon-1}}: each agent's mean
    reward per round over those rounds (the rounds it reported), then the mean over the unit's
    agents, times ``horizon`` (the campaign page's computation, estimates.agent_means)."""
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for row in rows:
        if row.round < horizon:
            entry = sums[(row.arm, row.unit, row.agent)]
            entry[0] += row.reward
            entry[1] += 1
    agents: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (arm, unit, _agent), (total, count) in sorted(sums.items()):
        agents[(arm, unit)].append(total / count)
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (arm, unit), means in agents.items():
        out[arm][unit] = horizon * sum(means) / len(means)
    return dict(out)


def horizon_of(rows: Sequence[Row]) -> int:
    """H: the rounds every agent reached (the smallest of the agents' last round + 1)."""
    last: dict[str, int] = {}
    for row in rows:
        last[row.agent] = max(last.get(row.agent, -1), row.round)
    return min(last.values()) + 1 if last else 0


def gain(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """mean(a) - mean(b) of two independent samples (swarms or 4/4 cells against control seeds
    or 8/0 cells) in cumulative reward, with Welch's 95 % t interval (df rounded down,
    stats.welch_interval), the standard error and df behind it, the gain in %, both n, and the
    exact permutation test's two-sided p; None fields where a side has fewer than 2 units."""
    n_a, n_b = len(a), len(b)
    if not n_a or not n_b:
        return {"difference": None, "low": None, "high": None, "n": [n_a, n_b]}
    mean_a, mean_b = sum(a) / n_a, sum(b) / n_b
    var_a = statistics.variance(a) if n_a > 1 else 0.0
    var_b = statistics.variance(b) if n_b > 1 else 0.0
    interval = stats.welch_interval(mean_a, var_a, n_a, mean_b, var_b, n_b, CONFIDENCE)
    se = math.sqrt(var_a / n_a + var_b / n_b)
    df = (
        math.floor(stats.welch_df(var_a / n_a, n_a, var_b / n_b, n_b) + 1e-9)
        if n_a > 1 and n_b > 1 and se > 0
        else None
    )
    test = stats.permutation_test(a, b)
    return {
        "difference": mean_a - mean_b,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
        "se": se if n_a > 1 and n_b > 1 else None,
        "df": df,
        "percent": 100 * (mean_a - mean_b) / abs(mean_b) if mean_b else None,
        "swarm_mean": mean_a,
        "control_mean": mean_b,
        "n": [n_a, n_b],
        "p": test.p_value,
        "min_p": test.min_p_value,
    }


# --- the simulator's ----------------------------------------------------------------------------


def simulator_cells(results: dict[str, Any], arm: str, horizon: int) -> dict[str, float]:
    """{seed: cumulative reward of ``arm``'s cell over rounds 0..horizon-1} from a study results
    file's per-round curves (each round's value: the mean over the cell's agents)."""
    curves = results["curves"].get(arm, {})
    return {seed: sum(curve[:horizon]) for seed, curve in curves.items() if curve and len(curve) >= horizon}


def simulator_gain(results: dict[str, Any], horizon: int) -> dict[str, Any]:
    """The simulator's 4/4 - 8/0 over ``horizon`` rounds: unpaired over every cell of each arm
    (:func:`gain`: the platform's design, independent units on each side), and paired by seed over
    the seeds both ran (the study's design: mean difference with its t interval, n)."""
    swarm, control = (
        simulator_cells(results, SWARM_ARM, horizon),
        simulator_cells(results, CONTROL_ARM, horizon),
    )
    unpaired = gain(list(swarm.values()), list(control.values()))
    common = sorted(set(swarm) & set(control), key=int)
    differences = [swarm[s] - control[s] for s in common]
    interval = stats.t_interval(differences, CONFIDENCE)
    paired = {
        "difference": sum(differences) / len(differences) if differences else None,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
        "n": len(differences),
        "seeds": [int(s) for s in common],
        "above_zero": sum(d > 0 for d in differences),
    }
    return {
        "unpaired": unpaired,
        "paired": paired,
        "cells": {SWARM_ARM: swarm, CONTROL_ARM: control},
    }


def simulator_ages(results: dict[str, Any], horizon: int) -> list[float]:
    """The simulator's 4/4 J-side age per round and cell over rounds 0..horizon-1 (the results
    file keeps ``batch/external_age`` per round as the mean over the cell's agents: one value per
    round and swarm, not per draw)."""
    values = []
    for cell in results.get("mechanism", {}).get(SWARM_ARM, {}).values():
        values += [v for v in cell.get("batch/external_age", [])[:horizon] if v is not None]
    return values


def simulate_command(
    python: str, v3_config: dict[str, Any], config: CampaignConfig, agents: int, seed: int, out: str
) -> list[str]:
    """``swarm-worker simulate`` of the 4/4 arm with the campaign's settings (v3's, or a smoke
    run's smaller ones), ``agents`` agents, cell seed ``seed``: the simulator's per-agent,
    per-round metrics, ``batch/external_age`` among them (v3's file keeps only their mean over a
    cell's agents). Run as a process: the coordinator does not import the simulator."""
    grpo = config.grpo_config(config.tiers[0])
    return [
        python, "-m", "worker.cli", "simulate",
        "--arms", SWARM_ARM,
        "--agents", str(agents),
        "--rounds", str(config.rounds),
        "--tier", config.tiers[0],
        "--seed", str(seed),
        "--tasks", v3_config["tasks"],
        "--questions", str(config.questions_per_round),
        "--group-size", str(config.group_size),
        "--max-new-tokens", str(config.max_new_tokens),
        "--lr", repr(grpo.learning_rate),
        "--num-iterations", str(grpo.num_iterations),
        "--temperature", repr(grpo.temperature),
        "--beta", repr(grpo.beta),
        "--pool-window", str(config.pool_window),
        "--backend", "transformers",
        "--quiet",
        "--out", out,
    ]  # fmt: skip


def simulator_rerun(
    simulated: dict[str, Any], seed: int, results: dict[str, Any], horizon: int
) -> dict[str, Any]:
    """One simulator cell of 4/4 rerun with per-agent metrics (``swarm-worker simulate``'s file):
    its J-side age per draw (one value per agent-round that drew) over rounds 0..horizon-1, its
    cumulative reward, and v3's cell of the same seed beside it (the largest per-round
    difference of the two curves: 0 when the rerun repeats v3's cell)."""
    agents = simulated["arms"][SWARM_ARM]["agents"]
    per_draw = [
        m["batch/external_age"]
        for history in agents.values()
        for m in history[:horizon]
        if "batch/external_age" in m
    ]
    rounds = min(len(history) for history in agents.values())
    curve = [sum(history[r]["reward"] for history in agents.values()) / len(agents) for r in range(rounds)]
    v3_curve = results["curves"].get(SWARM_ARM, {}).get(str(seed))
    comparable = v3_curve is not None and len(v3_curve) >= horizon and rounds >= horizon
    comparable = comparable and len(agents) == results["config"].get("agents")
    return {
        "seed": seed,
        "agents": len(agents),
        "per_draw": per_draw,
        "cumulative": sum(curve[:horizon]),
        "v3_cumulative": sum(v3_curve[:horizon]) if comparable else None,
        "largest_round_difference": (
            max(abs(a - b) for a, b in zip(curve[:horizon], v3_curve, strict=False)) if comparable else None
        ),
    }


# --- pool ages ------------------------------------------------------------------------------


def age_summary(values: Sequence[float]) -> dict[str, Any]:
    """A distribution of ages in rounds: n, mean, standard deviation, min, quantiles (10, 25, 50,
    75, 90 %), max, the share below 0 (on the platform a faster node's rollout can carry a later
    round number than the drawing node's), and counts per whole round (age rounded down)."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    histogram: dict[str, int] = defaultdict(int)
    for value in ordered:
        histogram[str(math.floor(value))] += 1
    return {
        "n": len(ordered),
        "mean": sum(ordered) / len(ordered),
        "sd": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        "min": ordered[0],
        "quantiles": {f"{int(q * 100)}": _quantile(ordered, q) for q in AGE_QUANTILES},
        "max": ordered[-1],
        "below_zero": sum(v < 0 for v in ordered) / len(ordered),
        "histogram": dict(sorted(histogram.items(), key=lambda item: int(item[0]))),
    }


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def platform_ages(rows: Iterable[Row], horizon: int) -> dict[str, list[float]]:
    """The platform swarm's J-side ages over rounds 0..horizon-1: ``per_draw`` (one value per
    agent-round with a draw: the mean age of its groups), ``per_round_swarm`` (the mean over a
    swarm's agents per round: the simulator's unit) and ``max_per_draw``."""
    per_draw, maxima = [], []
    by_swarm_round: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        if row.arm != "swarm" or row.round >= horizon or row.age is None:
            continue
        per_draw.append(row.age)
        by_swarm_round[(row.unit, row.round)].append(row.age)
        if row.age_max is not None:
            maxima.append(row.age_max)
    per_round = [sum(v) / len(v) for _key, v in sorted(by_swarm_round.items())]
    return {"per_draw": per_draw, "per_round_swarm": per_round, "max_per_draw": maxima}


# --- the comparison and the report --------------------------------------------------------------


def compare(platform: dict[str, Any], simulator: dict[str, Any]) -> dict[str, Any]:
    """Platform gain - simulator gain (both unpaired, independent samples) with a 95 % t interval
    from the two standard errors, sqrt(se_p^2 + se_s^2), on the smaller of the two gains' df,
    and the verdict: "consistent" when that interval holds 0, "differs" when it does not, None
    when either side has no interval."""
    if platform.get("se") is None or simulator.get("se") is None:
        return {"difference": None, "low": None, "high": None, "verdict": None}
    difference = platform["difference"] - simulator["difference"]
    v_p, v_s = platform["se"] ** 2, simulator["se"] ** 2
    if v_p + v_s <= 0:
        return {"difference": difference, "low": difference, "high": difference, "verdict": None}
    # the smaller of the two gains' df: conservative (Satterthwaite's combination can exceed the
    # platform's own df of 1-2 at small n, giving an interval narrower than the platform's)
    df = max(1, min(platform["df"] or 1, simulator["df"] or 1))
    half = stats.t_quantile((1 + CONFIDENCE) / 2, df) * math.sqrt(v_p + v_s)
    low, high = difference - half, difference + half
    return {
        "difference": difference,
        "low": low,
        "high": high,
        "df": df,
        "verdict": "consistent" if low <= 0 <= high else "differs",
    }


def analyse(
    rows: Sequence[Row],
    v3_results: dict[str, Any],
    run: dict[str, Any],
    reruns: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The validation's results: the platform's units and gain over its horizon H, the
    simulator's over the same H (unpaired and paired), their difference and verdict, pool ages
    on both sides (per draw on the simulator's side from ``reruns``: {"seed", "results": a
    ``swarm-worker simulate`` file}, :func:`simulator_rerun`), and ``run`` (how it ran: command,
    settings, budget, machine) as given."""
    horizon = horizon_of(rows)
    checked = [simulator_rerun(rerun["results"], rerun["seed"], v3_results, horizon) for rerun in reruns]
    units = platform_units(rows, horizon)
    swarms = units.get("swarm", {})
    controls = units.get(CONTROL_KIND, {})
    platform = gain(list(swarms.values()), list(controls.values()))
    simulator = simulator_gain(v3_results, horizon)
    ages = platform_ages(rows, horizon)
    return {
        "horizon": horizon,
        "platform": {"gain": platform, "units": {"swarm": swarms, "control": controls}},
        "simulator": simulator,
        "comparison": compare(platform, simulator["unpaired"]),
        "pool_age": {
            "platform_per_draw": age_summary(ages["per_draw"]),
            "platform_per_round_swarm": age_summary(ages["per_round_swarm"]),
            "platform_max_per_draw": age_summary(ages["max_per_draw"]),
            "simulator_per_round_cell": age_summary(simulator_ages(v3_results, horizon)),
            "simulator_per_draw": age_summary([age for rerun in checked for age in rerun["per_draw"]]),
        },
        "simulator_reruns": [{k: v for k, v in rerun.items() if k != "per_draw"} for rerun in checked],
        "run": run,
    }
