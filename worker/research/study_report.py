"""The SAPO table study's report: markdown with PNG plots, generated from its results file.

``swarm-worker study-report`` writes it; the answer is generated from the numbers, with what
would change it, so the report is regenerated rather than edited.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from worker.research.study import ARM_ORDER, BASELINE, PAPER_CUMULATIVE, PRIMARY, seed_key
from worker.research.study_analysis import Analysis, Comparison, analyse
from worker.shared import stats


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
            curves = np.array([results["curves"][name][seed_key(s)] for s in analysis.arms[name].seeds])
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
