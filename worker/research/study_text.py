"""The study report's wording of numbers: intervals, p-values, comparisons, the seed advice of
the exact test, and the caveats of a run that cannot answer in full. Shared by both designs'
answers (worker/research/study_report.py, worker/research/study_old_design.py)."""

from __future__ import annotations

import math
from typing import Any

from worker.research.study import seed_key
from worker.research.study_analysis import Analysis, Comparison
from worker.shared import stats


def format_interval(interval: tuple[float, float] | None, digits: int = 2, scale: float = 1.0) -> str:
    if interval is None:
        return "n/a"
    return f"[{interval[0] * scale:.{digits}f}, {interval[1] * scale:.{digits}f}]"


def format_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def format_p(value: float) -> str:
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def describe(c: Comparison, unit: str = "") -> str:
    return (
        f"{c.a} - {c.b} = {c.mean:+.2f}{unit} (95% interval {format_interval(c.interval)}; "
        f"{format_pct(c.gain)} relative; {c.a} higher in {c.wins} of {len(c.seeds)} seeds; "
        f"sign-flip p = {format_p(c.p_value)})"
    )


def seed_advice(c: Comparison, family_size: int, alpha: float = 0.05) -> str:
    """How many seeds the exact sign-flip test needs, from its minimum p and a simulated power
    (never a normal approximation, which ignores that p >= 2 / 2^n)."""
    n = len(c.seeds)
    m = max(family_size, 1) if c.preregistered else 1
    level = alpha / m  # Holm's level for the family's smallest p
    least = stats.sign_flip_min_seeds(alpha, m)
    head = (
        f"- **More seeds.** With n seeds the exact sign-flip test cannot go below p = 2/2^n "
        f"({format_p(c.min_p_value)} at n = {n})"
        + (f", and Holm over the family of {m} multiplies the smallest p by {m}" if m > 1 else "")
        + f": no {c.a} - {c.b} result can be significant at {alpha:g} with fewer than {least} seeds."
    )
    sd = c.sd
    if n < 2 or math.isnan(sd):
        return head + f" With {n} seed pair(s) the spread cannot be estimated."
    if sd == 0 or c.mean == 0:
        return head + f" The {n} differences are all {c.mean:+.2f} (no spread to plan with)."
    needed = stats.seeds_for_power(abs(c.mean), sd, level)
    mde = stats.minimum_detectable_effect(sd, n, level)
    mde_text = (
        f"at n = {n} the smallest difference it detects with 80% power is about {mde:.2f}"
        if mde is not None
        else f"at n = {n} no difference can be detected"
    )
    needed_text = (
        f"about {needed} seeds would detect the observed {c.mean:+.2f} with 80% power"
        if needed is not None
        else f"even 40 seeds would not detect the observed {c.mean:+.2f} with 80% power"
    )
    return (
        f"{head} The differences have a standard deviation of {sd:.2f} over {n} seeds; if they "
        f"were normal with that spread, {needed_text}, and {mde_text} (level {level:.3g}; power "
        "simulated with the exact test itself, 400 draws, seeded)."
    )


def significant(c: Comparison | None, alpha: float = 0.05) -> str | None:
    """``higher``/``lower`` when the family-adjusted (or, outside it, the plain) p <= alpha and
    the interval excludes zero; else None."""
    if c is None or c.interval is None or len(c.seeds) < 2:
        return None
    p = c.holm_p if c.preregistered else c.p_value
    if p > alpha:
        return None
    if c.interval[0] > 0:
        return "higher"
    if c.interval[1] < 0:
        return "lower"
    return None


def caveats(config: dict[str, Any]) -> list[str]:
    """The lines an answer opens with when its run cannot answer in full (quick, incomplete)."""
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
    return lines


def late_slope(results: dict[str, Any], analysis: Analysis) -> float | None:
    """Least-squares slope (reward per round) of the mean curve over all arms, last third."""
    curves = [results["curves"][n][seed_key(s)] for n, a in analysis.arms.items() for s in a.seeds]
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


def trend_words(slope: float) -> str:
    """A late slope (reward per round) in words: rising, falling, or flat within 0.001."""
    return (
        "still rising"
        if slope > 0.001
        else "falling"
        if slope < -0.001
        else "about flat (within 0.001 per round)"
    )


def cell_means(results: dict[str, Any], arm: str, key: str) -> list[float]:
    """Each cell's (seed's) mean over rounds of the per-round mechanism metric ``key`` of ``arm``."""
    values = []
    for curves in ((results.get("mechanism") or {}).get(arm) or {}).values():
        series = [v for v in curves.get(key, []) if v is not None]
        if series:
            values.append(sum(series) / len(series))
    return values
