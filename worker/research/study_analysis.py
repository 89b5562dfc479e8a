"""The SAPO table study's statistics: per-arm means and paired comparisons from its results.

Intervals are percentile bootstrap intervals over seeds; comparisons pair arms by seed and
test them with the exact sign-flip test (worker/shared/stats.py). Holm's adjustment runs over
the pre-registered family (:data:`~worker.research.study.FAMILY`) only; the exploratory
comparisons keep their unadjusted p (``holm_p`` is NaN for them).

A results file of the old design (issue #8: no 4/4-self, no ``preregistered`` in its config)
is still read: its primary was 4/4 - 8/0-filtered and its Holm family every comparison it
holds, as its report said; ``Analysis.old_design`` tells the report to say so. A file of
design v3 (issue #29, ``config.design``) is read with v3's family (4/4@B4 - 8/0 primary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from worker.research.study import (
    COMPARISONS,
    FAMILY,
    OLD_COMPARISONS,
    OLD_PRIMARY,
    PRIMARY,
    V3_COMPARISONS,
    V3_FAMILY,
    V3_PRIMARY,
    design_of,
    seed_key,
)
from worker.shared import stats


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
    preregistered: bool = False  # in the Holm family

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
    old_design: bool = False  # a results file of issue #8's design
    primary: tuple[str, str] = PRIMARY
    design: str = "v2"  # v1 (issue #8), v2 (issue #18) or v3 (issue #29)
    family_size: int = 0  # comparisons in the Holm family (those the file can make)

    @property
    def family(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.preregistered]


def is_old_design(results: dict[str, Any]) -> bool:
    """True for a results file written before issue #18 (no pre-registered family in its config)."""
    return "preregistered" not in results["config"]


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
        curves = [results["curves"][name][seed_key(s)] for s in values]
        arms[name] = ArmSummary(
            name,
            list(values),
            list(values.values()),
            sum(values.values()) / len(values),
            stats.bootstrap_interval(list(values.values()), resamples),
            sum(sum(c[:tenth]) / tenth for c in curves) / len(curves),
            sum(sum(c[-tenth:]) / tenth for c in curves) / len(curves),
        )
    design = design_of(results)
    old = design == "v1"
    pairs, family_pairs, primary = {
        "v1": (OLD_COMPARISONS, OLD_COMPARISONS, OLD_PRIMARY),
        "v2": (COMPARISONS, FAMILY, PRIMARY),
        "v3": (V3_COMPARISONS, V3_FAMILY, V3_PRIMARY),
    }[design]
    family = set(family_pairs)
    comparisons: list[Comparison] = []
    for a, b in pairs:
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
                preregistered=(a, b) in family,
            )
        )
    members = [c for c in comparisons if c.preregistered]
    for comparison, adjusted in zip(members, stats.holm([c.p_value for c in members]), strict=True):
        comparison.holm_p = adjusted
    return Analysis(
        config,
        arms,
        comparisons,
        resamples,
        old_design=old,
        primary=primary,
        family_size=len(members),
        design=design,
    )
