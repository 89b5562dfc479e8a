"""Issue #29 items 4 and 7: the time course of paired differences (windows = thirds of the
horizon, per-seed slopes, "crosses over" by a stated rule) and wording no stronger than the
numbers ("possibly lower" only where the t-interval agrees), on constructed results. The v2 and
v3 answers' wording went with their report generators (issue #51)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from swarm_lab.study import FAMILY, V3_FAMILY, StudyConfig
from swarm_lab.study_analysis import (
    CROSSES,
    ONE_SIGN,
    SIGN_CHANGE_NOT_SHOWN,
    Comparison,
    time_course,
    window_bounds,
)
from swarm_lab.study_text import time_course_line, verdict_words
from worker.shared import stats

ROUNDS = 45


def results_from(curves: dict[str, dict[int, list[float]]], design: str = "v2", rounds: int = ROUNDS) -> dict:
    """A results file in the study's shape from per-arm, per-seed curves (missing seeds: cells not run)."""
    seeds = sorted({s for per_seed in curves.values() for s in per_seed})
    names = list(curves)
    config = {
        **StudyConfig(rounds=rounds, seeds=seeds, design=design).settings(),
        "seeds": seeds,
        "arms": names,
        "cumulative_reward": "sum over rounds",
        "complete": True,
        "cells_done": sum(len(c) for c in curves.values()),
        "cells_total": len(seeds) * len(names),
        "cells": {},
    }
    family = V3_FAMILY if design == "v3" else FAMILY
    config["preregistered"] = {"primary": list(family[0]), "family": [list(p) for p in family], "windows": 3}
    arms = {n: [round(sum(curves[n][s]), 6) if s in curves[n] else None for s in seeds] for n in names}
    return {
        "config": config,
        "arms": arms,
        "curves": {n: {str(s): [round(v, 6) for v in c] for s, c in curves[n].items()} for n in names},
    }


def base_curve(seed: int, rng: np.random.Generator) -> np.ndarray:
    return 0.2 + 0.004 * np.arange(ROUNDS) + rng.normal(0, 0.002, ROUNDS) + 0.01 * seed


def v2_results(difference: Callable[[np.ndarray], np.ndarray], seeds: int = 10, noise: float = 0.002) -> dict:
    """v2's arms; 4/4 = 8/0 + difference(round index) + noise, every other arm = 8/0 + noise."""
    rng = np.random.default_rng(3)
    curves: dict[str, dict[int, list[float]]] = {n: {} for n in ("8/0", "4/4", "4/4-self", "8/0-dyn")}
    for s in range(seeds):
        base = base_curve(s, rng)
        curves["8/0"][s] = list(base)
        curves["4/4"][s] = list(base + difference(np.arange(ROUNDS)) + rng.normal(0, noise, ROUNDS))
        curves["4/4-self"][s] = list(base + rng.normal(0, noise, ROUNDS))
        curves["8/0-dyn"][s] = list(base + rng.normal(0, noise, ROUNDS))
    return results_from(curves)


def test_windows_are_the_thirds_of_the_horizon():
    assert window_bounds(45) == [(0, 15), (15, 30), (30, 45)]  # rounds 1-15, 16-30, 31-45
    assert window_bounds(10) == [(0, 3), (3, 6), (6, 10)]
    assert window_bounds(2) == [(0, 1), (1, 2)]  # an empty third is left out
    assert window_bounds(0) == []


def test_t_quantiles_and_t_interval_against_tables():
    for df, table in ((1, 12.7062), (2, 4.3027), (9, 2.2622), (29, 2.0452), (1000, 1.9623)):
        assert stats.t_quantile(0.975, df) == pytest.approx(table, abs=1e-4)
    assert stats.t_quantile(0.025, 9) == pytest.approx(-2.2622, abs=1e-4)
    low, high = stats.t_interval([1.0, 2.0, 3.0, 4.0])  # 2.5 -+ 3.1824 * 1.2910 / 2
    assert (low, high) == pytest.approx((2.5 - 2.0542, 2.5 + 2.0542), abs=1e-4)
    assert stats.t_interval([1.0]) is None and stats.t_interval([2.0, 2.0]) == (2.0, 2.0)
    assert stats.least_squares_slope([1, 2, 3], [1.0, 3.0, 5.0]) == pytest.approx(2.0)
    assert stats.least_squares_slope([1], [1.0]) is None


def test_a_difference_that_falls_from_plus_to_minus_crosses_over():
    """v2's 4/4 - 8/0, constructed: +0.01 a round early, -0.016 late, the slope negative in
    every seed."""
    results = v2_results(lambda r: 0.01 - 0.026 * r / (ROUNDS - 1))
    course = time_course(results, "4/4", "8/0", resamples=2000)
    assert course is not None and [(w.first, w.last) for w in course.windows] == [(1, 15), (16, 30), (31, 45)]
    first, _, last = course.windows
    assert first.difference.side == 1 and last.difference.side == -1
    assert first.difference.positive == 10 and last.difference.positive == 0 and first.difference.n == 10
    # per seed: the mean over the window's rounds of 4/4 - 8/0
    d0 = [a - b for a, b in zip(results["curves"]["4/4"]["0"], results["curves"]["8/0"]["0"], strict=True)]
    assert first.difference.values[0] == pytest.approx(sum(d0[:15]) / 15)
    assert course.slope.mean == pytest.approx(-0.026 / 44, rel=0.1) and course.slope.negative == 10
    assert course.shape == CROSSES
    text = time_course_line(course)
    assert "4/4 - 8/0 **crosses over** (from above to below 0): above 0 in rounds 1-15" in text
    assert "negative in 10 of 10 seeds" in text


def test_a_sign_change_without_both_signs_established_is_not_called_a_crossover():
    """Above 0 early (established), a little below 0 late within the noise: the means change
    sign but the last window's intervals include 0."""
    results = v2_results(lambda r: np.where(r < 15, 0.01, -0.0012), noise=0.01)
    course = time_course(results, "4/4", "8/0", resamples=2000)
    assert course.windows[0].difference.side == 1 and course.windows[-1].difference.side == 0
    assert course.windows[-1].difference.mean < 0
    assert course.shape == SIGN_CHANGE_NOT_SHOWN
    text = time_course_line(course)
    assert "crosses over**" not in text and "4/4 - 8/0 changes sign between windows" in text
    # and a difference of one sign throughout is neither
    steady = v2_results(lambda r: 0.01 + 0 * r)
    course = time_course(steady, "4/4", "8/0", resamples=2000)
    assert course.shape == ONE_SIGN
    text = time_course_line(course)
    assert "4/4 - 8/0 stays above 0 in every window (established in rounds 1-15, 16-30, 31-45)" in text
    # one sign only by its means, within the noise: no sign claimed
    faint = v2_results(lambda r: 0.0002 + 0 * r, noise=0.01)
    course = time_course(faint, "4/4", "8/0", resamples=2000)
    assert course.shape == ONE_SIGN and {w.difference.side for w in course.windows} == {0}
    text = time_course_line(course)
    assert "- 4/4 - 8/0: the window means are above 0 (or 0), none established: no sign shown" in text
    assert "4/4 - 8/0 stays above" not in text


def test_the_crossover_rule_needs_both_intervals():
    """A window whose bootstrap interval excludes 0 but whose t-interval does not is not
    established: 3 seeds, a clearly negative last window only by the percentile bootstrap."""
    curves = {"8/0": {}, "4/4": {}}
    for s, late in enumerate((-0.001, -0.02, -0.03)):
        base = [0.3] * 6
        curves["8/0"][s] = base
        curves["4/4"][s] = [0.35, 0.35, 0.3, 0.3, 0.3 + late, 0.3 + late]
    results = results_from(curves, rounds=6)
    last = time_course(results, "4/4", "8/0", resamples=2000).windows[-1].difference
    assert last.interval[1] < 0 and last.t_interval[1] > 0 and last.side == 0
    assert time_course(results, "4/4", "8/0", resamples=2000).shape == SIGN_CHANGE_NOT_SHOWN
    mirror = time_course(results, "8/0", "4/4", resamples=2000).windows[-1].difference
    assert mirror.interval[0] > 0 and mirror.t_interval[0] < 0 and mirror.side == 0


def comparison(differences: list[float]) -> Comparison:
    test = stats.sign_flip_test(differences, [0.0] * len(differences))
    mean = sum(differences) / len(differences)
    return Comparison(
        "4/4",
        "8/0",
        list(range(len(differences))),
        differences,
        mean,
        stats.paired_bootstrap_interval(differences, [0.0] * len(differences), 2000),
        None,
        None,
        sum(d > 0 for d in differences),
        test.p_value,
        test.exact,
        test.min_p_value,
        t_interval=stats.t_interval(differences),
    )


def test_possibly_lower_only_where_the_t_interval_agrees():
    # v2's 4/4 - 8/0 (docs/experiments/sapo-table-cpu.json): bootstrap below 0, t [-0.30, +0.02]
    v2 = json.loads((Path(__file__).parents[3] / "docs/experiments/sapo-table-cpu.json").read_text())
    weak = comparison([a - b for a, b in zip(v2["arms"]["4/4"], v2["arms"]["8/0"], strict=True)])
    assert weak.verdict() == "suggestive-lower" and weak.t_interval[1] > 0
    assert "[-0.30, 0.02] contains it" in verdict_words(weak)
    assert verdict_words(weak).startswith("not distinguishable (the bootstrap interval lies below zero")
    assert "possibly" not in verdict_words(weak)
    # 5 seeds, all below: p = 2/32 > 0.05, both intervals below 0
    firm = comparison([-0.3, -0.32, -0.28, -0.31, -0.29])
    assert firm.verdict() == "suggestive-lower"
    assert verdict_words(firm).startswith("possibly lower (bootstrap and t-intervals below zero")
    assert verdict_words(comparison([0.4])).startswith("no verdict (1 paired seed")
