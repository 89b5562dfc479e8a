"""The study report's wording of numbers: intervals, p-values, comparisons, the seed advice of
the exact test, and the caveats of a run that cannot answer in full. Shared by both designs'
answers (lab/swarm_lab/study_report.py, lab/swarm_lab/study_old_design.py)."""

from __future__ import annotations

import math
from typing import Any

from swarm_lab.study_analysis import (
    CROSSES,
    SIGN_CHANGE_NOT_SHOWN,
    Analysis,
    Comparison,
    Estimate,
    TimeCourse,
    time_courses,
)
from worker.shared import stats
from worker.shared.arms import pool_share_window


def format_interval(interval: tuple[float, float] | None, digits: int = 2, scale: float = 1.0) -> str:
    if interval is None:
        return "n/a"
    return f"[{interval[0] * scale:.{digits}f}, {interval[1] * scale:.{digits}f}]"


def format_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def format_p(value: float) -> str:
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def describe(c: Comparison, unit: str = "") -> str:
    if len(c.seeds) < 2:
        return f"{c.a} - {c.b} = {c.mean:+.2f}{unit} on {len(c.seeds)} paired seed (no interval, no test)"
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


def format_estimate(e: Estimate, digits: int = 3, scale: float = 1.0) -> str:
    """A mean over seeds with both its intervals and n: '+0.034 (95% bootstrap [0.020, 0.048],
    t [0.018, 0.050]; n = 10)'."""
    if e.n < 2:
        return f"{e.mean * scale:+.{digits}f} (n = {e.n}: no interval)"
    return (
        f"{e.mean * scale:+.{digits}f} (95% bootstrap {format_interval(e.interval, digits, scale)}, "
        f"t {format_interval(e.t_interval, digits, scale)}; n = {e.n})"
    )


def trend_words(late: tuple[int, int, Estimate]) -> str:
    """The late slope (reward per round over the last window's rounds) in words: 'still rising' or
    'falling' only when both its intervals (bootstrap and t over seeds) exclude 0, else flat."""
    first, last, slope = late
    words = {1: "still rising", -1: "falling"}.get(
        slope.side, "about flat (its intervals include 0)" if slope.n >= 2 else "not measurable (one seed)"
    )
    return f"{words}: {format_estimate(slope, 4)} per round, rounds {first}-{last}"


def verdict_words(c: Comparison, test: str = "sign-flip test") -> str:
    """A comparison's verdict in words: 'possibly higher/lower' only when the t-interval agrees
    with the bootstrap interval (a percentile bootstrap over few seeds is too narrow); no verdict
    with fewer than 2 paired seeds."""
    n = len(c.seeds)
    if n < 2:
        return f"no verdict ({n} paired seed; at least 2 are needed)"
    verdict = c.verdict()
    if verdict in ("higher", "lower"):
        return verdict
    if verdict == "inconclusive":
        return "not distinguishable (interval contains zero)"
    above = verdict.endswith("higher")
    t = c.t_interval
    agrees = t is not None and (t[0] > 0 if above else t[1] < 0)
    side = "above" if above else "below"
    if agrees:
        return f"possibly {'higher' if above else 'lower'} (bootstrap and t-intervals {side} zero, {test} not significant)"
    return (
        f"not distinguishable (the bootstrap interval lies {side} zero, but the t-interval "
        f"{format_interval(t)} contains it; {test} not significant)"
    )


CROSSOVER_RULE = (
    "Windows are the thirds of the horizon (pre-registered, exploratory); a window's difference is "
    "the per-seed mean over its rounds of the arm's reward minus the other's, averaged over seeds. "
    "A comparison *crosses over* when one window's difference lies above 0 and another's below 0, "
    "each with both its 95% intervals (percentile bootstrap and t, over seeds) excluding 0; "
    "window means of different signs without that are a sign change not shown."
)


def _window_text(tc: TimeCourse) -> str:
    parts = []
    for w in tc.windows:
        d = w.difference
        parts.append(
            f"rounds {w.label} {format_estimate(d)} {format_pct(w.gain)}, positive in {d.positive} of {d.n} seeds"
        )
    return "; ".join(parts)


def slope_text(tc: TimeCourse) -> str:
    if tc.slope is None or tc.slope.n == 0:
        return "no slope (fewer than 2 rounds)"
    return (
        f"slope of the difference over rounds {format_estimate(tc.slope, 4)} per round, "
        f"negative in {tc.slope.negative} of {tc.slope.n} seeds"
    )


def shape_words(tc: TimeCourse) -> str:
    """The time course of one comparison in words, with "crosses over" by :data:`CROSSOVER_RULE`."""
    name = f"{tc.a} - {tc.b}"
    if len(tc.seeds) < 2:
        return f"{name}: no verdict on the time course ({len(tc.seeds)} paired seed; at least 2 are needed)"
    if tc.shape == CROSSES:
        above = [w.label for w in tc.windows if w.difference.side == 1]
        below = [w.label for w in tc.windows if w.difference.side == -1]
        first = next(w for w in tc.windows if w.difference.side != 0)
        direction = "from above to below 0" if first.difference.side == 1 else "from below to above 0"
        return (
            f"{name} **crosses over** ({direction}): above 0 in rounds {', '.join(above)} and below 0 "
            f"in rounds {', '.join(below)}"
        )
    if tc.shape == SIGN_CHANGE_NOT_SHOWN:
        return (
            f"{name} changes sign between windows, but not with both signs established: not shown "
            "to cross over"
        )
    established = [w.label for w in tc.windows if w.difference.side != 0]
    means = [w.difference.mean for w in tc.windows if w.difference.mean != 0]
    if not means:
        return f"{name} is 0 in every window"
    sign = "above" if means[0] > 0 else "below"
    if not established:
        return f"{name}: the window means are {sign} 0 (or 0), none established: no sign shown"
    return f"{name} stays {sign} 0 in every window (established in rounds {', '.join(established)})"


def time_course_line(tc: TimeCourse) -> str:
    """One bullet: the shape, the windows and the slope of a comparison's paired difference."""
    if len(tc.seeds) < 2:
        return f"- {shape_words(tc)}."
    return f"- {shape_words(tc)}. Per window: {_window_text(tc)}. The {slope_text(tc)}."


def time_course_rows(courses: list[TimeCourse]) -> list[str]:
    """The report's windows table: per comparison, each window's paired difference (mean over
    seeds of the per-seed mean over the window's rounds, reward per round) with both intervals,
    the relative difference and the seeds above 0; the slope over rounds; the shape."""
    if not courses:
        return []
    labels = [f"rounds {w.label}" for w in courses[0].windows]
    lines = [
        "| comparison | " + " | ".join(labels) + " | slope per round (negative seeds) | shape |",
        "|---|" + "---|" * (len(labels) + 2),
    ]
    for tc in courses:
        cells = []
        for w in tc.windows:
            d = w.difference
            cells.append(
                f"{d.mean:+.3f} {format_interval(d.interval, 3)} t {format_interval(d.t_interval, 3)} "
                f"{format_pct(w.gain)}, {d.positive} of {d.n} above 0"
            )
        slope = (
            f"{tc.slope.mean:+.4f} {format_interval(tc.slope.interval, 4)} t "
            f"{format_interval(tc.slope.t_interval, 4)} ({tc.slope.negative} of {tc.slope.n})"
            if tc.slope is not None and tc.slope.n
            else "-"
        )
        shape = (
            "no verdict (< 2 seeds)"
            if len(tc.seeds) < 2
            else {CROSSES: "**crosses over**", SIGN_CHANGE_NOT_SHOWN: "sign change not shown"}.get(
                tc.shape, "one sign"
            )
        )
        lines.append(f"| {tc.a} - {tc.b} | " + " | ".join(cells) + f" | {slope} | {shape} |")
    return lines


def time_course_answer(
    results: dict[str, Any], analysis: Analysis, focus: list[tuple[str, str]]
) -> list[str]:
    """The answer's time-course bullets: the ``focus`` comparisons, then any other that crosses
    over, with the rule that says so."""
    courses = {(c.a, c.b): c for c in time_courses(results, analysis, analysis.resamples)}
    chosen = [courses[pair] for pair in focus if pair in courses]
    chosen += [
        c for pair, c in courses.items() if pair not in focus and c.shape == CROSSES and len(c.seeds) >= 2
    ]
    if not chosen:
        return []
    return [
        "",
        "**Time course** (exploratory, unadjusted; windows = thirds of the horizon, differences in "
        "reward per round, slope = least squares per seed, then the mean over seeds). The rule: a "
        "comparison *crosses over* when one window's difference lies above 0 and another's below 0, "
        "each with both its 95% intervals (bootstrap and t) excluding 0.",
        "",
        *[time_course_line(c) for c in chosen],
    ]


def cell_means(results: dict[str, Any], arm: str, key: str) -> list[float]:
    """Each cell's (seed's) mean over rounds of the per-round mechanism metric ``key`` of ``arm``."""
    values = []
    for curves in ((results.get("mechanism") or {}).get(arm) or {}).values():
        series = [v for v in curves.get(key, []) if v is not None]
        if series:
            values.append(sum(series) / len(series))
    return values


def versions_words(config: dict[str, Any]) -> str:
    """The results file's versions record in words (one record per file before v4: the run that
    wrote it last; v4 records every cell's commit), saying when that run's tree had uncommitted
    changes."""
    text = ", ".join(f"{k} {v}" for k, v in config.get("versions", {}).items())
    commit = (config.get("versions") or {}).get("git_commit") or ""
    if commit.endswith("+modified"):
        text += " (run from a tree with uncommitted changes)"
    return text


def self_window_words(config: dict[str, Any]) -> str:
    """4/4-self's window in words, without calling it the pool's equal: as many groups per agent as
    the pool holds (the design's default) or the size a run chose, but only the agent's own: the
    pool also offers 4/4 the other agents' groups, and the window holds groups the agent already
    trained on as its own picks (worker/engine/agent.py: its last groups, this round's picks
    excluded)."""
    window, per_agent = config.get("self_window"), pool_share_window(config["pool_window"], config["agents"])
    window = per_agent if window is None else window
    others = config["pool_window"] - per_agent
    definition = (config.get("arm_definitions") or {}).get("4/4-self") or {}
    own, batch = definition.get("num_local", 4), config.get("questions_per_round", 8)
    size = (
        f"as many as the pool holds per agent, {config['pool_window']} over {config['agents']} agents"
        if window == per_agent
        else f"the pool holds {per_agent} per agent"
    )
    return (
        f"its own last {window} groups ({size}; the pool also offers 4/4 the other agents' {others}, "
        f"and up to {own} of each round's {batch} own groups in the window were already trained on as "
        "its own picks)"
    )
