"""The study reports' wording of numbers: intervals, p-values, comparisons, their verdicts and
the time course of a paired difference (lab/swarm_lab/heterogeneous_report.py)."""

from __future__ import annotations

from swarm_lab.study_analysis import (
    CROSSES,
    SIGN_CHANGE_NOT_SHOWN,
    Comparison,
    Estimate,
    TimeCourse,
)


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


def format_estimate(e: Estimate, digits: int = 3, scale: float = 1.0) -> str:
    """A mean over seeds with both its intervals and n: '+0.034 (95% bootstrap [0.020, 0.048],
    t [0.018, 0.050]; n = 10)'."""
    if e.n < 2:
        return f"{e.mean * scale:+.{digits}f} (n = {e.n}: no interval)"
    return (
        f"{e.mean * scale:+.{digits}f} (95% bootstrap {format_interval(e.interval, digits, scale)}, "
        f"t {format_interval(e.t_interval, digits, scale)}; n = {e.n})"
    )


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
