"""The studies' statistics from a results file: paired comparisons of arms, estimates over
seeds, and the time course of a paired difference (the heterogeneous swarm's report; v4's uses
:func:`established_side`).

Intervals are percentile bootstrap intervals over seeds; comparisons pair arms by seed and
test them with the exact sign-flip test (worker/shared/stats.py). Holm's adjustment runs over
the pre-registered family a caller names only; the exploratory comparisons keep their
unadjusted p (``holm_p`` is NaN for them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from swarm_lab.study import seed_key
from worker.shared import stats


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
    t_interval: tuple[float, float] | None = None  # 95% t-interval of the mean difference

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


def _seed_values(results: dict[str, Any], name: str) -> dict[int, float]:
    seeds = results["config"]["seeds"]
    return {s: v for s, v in zip(seeds, results["arms"].get(name, []), strict=False) if v is not None}


def compare(
    results: dict[str, Any],
    pairs: list[tuple[str, str]],
    family: list[tuple[str, str]],
    resamples: int = stats.BOOTSTRAP_RESAMPLES,
    known: set[str] | None = None,
) -> list[Comparison]:
    """Each pair (a, b) of ``pairs`` as a - b over the seeds where both arms ran (``known``: the
    arms to consider, default every arm of the file), tested with the exact sign-flip test; the
    pairs in ``family`` are pre-registered and get Holm's adjustment over them (only)."""
    config = results["config"]
    known = set(config["arms"]) if known is None else known
    comparisons: list[Comparison] = []
    for a, b in pairs:
        if a not in known or b not in known:
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
                t_interval=stats.t_interval(diffs),
            )
        )
    members = [c for c in comparisons if c.preregistered]
    for comparison, adjusted in zip(members, stats.holm([c.p_value for c in members]), strict=True):
        comparison.holm_p = adjusted
    return comparisons


# --- the time course (issue #29 item 4): windows of rounds and slopes of paired differences ----


@dataclass
class Estimate:
    """The mean over seeds of a per-seed quantity, with its 95% percentile bootstrap interval
    and its 95% t-interval (both None with fewer than 2 seeds)."""

    values: list[float]
    mean: float
    interval: tuple[float, float] | None
    t_interval: tuple[float, float] | None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def positive(self) -> int:
        return sum(v > 0 for v in self.values)

    @property
    def negative(self) -> int:
        return sum(v < 0 for v in self.values)

    @property
    def side(self) -> int:
        """:func:`established_side` of the two intervals (0 with n < 2)."""
        return established_side(self.interval, self.t_interval) if self.n >= 2 else 0


def established_side(interval: tuple[float, float] | None, t_interval: tuple[float, float] | None) -> int:
    """+1 when both 95% intervals (percentile bootstrap and t) lie above 0, -1 when both lie
    below, 0 otherwise: the rule for a sign the study reports call established."""
    if interval is None or t_interval is None:
        return 0
    if interval[0] > 0 and t_interval[0] > 0:
        return 1
    if interval[1] < 0 and t_interval[1] < 0:
        return -1
    return 0


def estimate(values: list[float], resamples: int = stats.BOOTSTRAP_RESAMPLES) -> Estimate:
    return Estimate(
        list(values),
        sum(values) / len(values) if values else math.nan,
        stats.bootstrap_interval(values, resamples) if len(values) >= 2 else None,
        stats.t_interval(values),
    )


@dataclass
class Window:
    first: int  # rounds, 1-based, inclusive
    last: int
    difference: Estimate  # per seed: mean over the window's rounds of reward(a) - reward(b)
    gain: float | None  # sum of a's rewards over the window and the seeds / b's - 1

    @property
    def label(self) -> str:
        return f"{self.first}-{self.last}" if self.last > self.first else f"{self.first}"


CROSSES = "crosses over"
SIGN_CHANGE_NOT_SHOWN = "sign change not shown"
ONE_SIGN = "one sign"


@dataclass
class TimeCourse:
    """One comparison a - b over rounds: the paired difference per window (thirds of the
    horizon, pre-registered as exploratory) and the per-seed least-squares slope of the paired
    difference d_r = reward_r(a) - reward_r(b) over all rounds."""

    a: str
    b: str
    seeds: list[int]
    differences: list[list[float]]  # per seed (as ``seeds``), per round: a - b
    windows: list[Window]
    slope: Estimate | None  # per round; None with fewer than 2 rounds

    @property
    def shape(self) -> str:
        """:data:`CROSSES` when one window's paired difference is established above 0 and
        another's below 0 (established: its 95% bootstrap and t-intervals both exclude 0, on the
        same side; at least 2 seeds); :data:`SIGN_CHANGE_NOT_SHOWN` when the windows' means
        differ in sign without that; else :data:`ONE_SIGN`."""
        sides = {w.difference.side for w in self.windows}
        if {1, -1} <= sides:
            return CROSSES
        signs = {math.copysign(1, w.difference.mean) for w in self.windows if w.difference.mean != 0}
        return SIGN_CHANGE_NOT_SHOWN if len(signs) > 1 else ONE_SIGN


def window_bounds(rounds: int, windows: int = 3) -> list[tuple[int, int]]:
    """The horizon cut into ``windows`` consecutive windows of rounds as (start, stop) indexes,
    0-based, stop excluded: window k holds rounds floor(kR/W) .. floor((k+1)R/W) - 1 (45 rounds:
    1-15, 16-30, 31-45 counted from 1); empty windows (R < W) are left out."""
    edges = [k * rounds // windows for k in range(windows + 1)]
    return [(edges[k], edges[k + 1]) for k in range(windows) if edges[k + 1] > edges[k]]


def _curve(results: dict[str, Any], name: str, seed: int) -> list[float] | None:
    curve = (results.get("curves", {}).get(name) or {}).get(seed_key(seed))
    if not curve or any(v is None for v in curve):
        return None
    return [float(v) for v in curve]


def time_course(
    results: dict[str, Any],
    a: str,
    b: str,
    windows: int = 3,
    resamples: int = stats.BOOTSTRAP_RESAMPLES,
) -> TimeCourse | None:
    """The time course of a - b over the seeds where both arms have a full curve (None when none)."""
    pairs = []
    for seed in results["config"]["seeds"]:
        ca, cb = _curve(results, a, seed), _curve(results, b, seed)
        if ca is not None and cb is not None and len(ca) == len(cb):
            pairs.append((seed, ca, cb))
    if not pairs:
        return None
    rounds = min(len(ca) for _, ca, _ in pairs)
    diffs = [[x - y for x, y in zip(ca[:rounds], cb[:rounds], strict=True)] for _, ca, cb in pairs]
    out = []
    for start, stop in window_bounds(rounds, windows):
        per_seed = [sum(d[start:stop]) / (stop - start) for d in diffs]
        total_b = sum(sum(cb[start:stop]) for _, _, cb in pairs)
        total_a = sum(sum(ca[start:stop]) for _, ca, _ in pairs)
        out.append(
            Window(start + 1, stop, estimate(per_seed, resamples), total_a / total_b - 1 if total_b else None)
        )
    slopes = [stats.least_squares_slope(range(1, rounds + 1), d) for d in diffs]
    slope = estimate([s for s in slopes if s is not None], resamples) if rounds >= 2 else None
    return TimeCourse(a, b, [s for s, _, _ in pairs], diffs, out, slope)
