"""The SAPO table study's plots (PNG, matplotlib), for its report (study_report.py): curves,
cumulative reward, paired differences, the time course and, for v3, reward against compute."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from swarm_lab.study import (
    ARM_ORDER,
    order_arms,
    seed_key,
)
from swarm_lab.study_analysis import (
    Analysis,
    TimeCourse,
)
from worker.shared import stats


def plots(
    results: dict[str, Any],
    analysis: Analysis,
    stem: Path,
    resamples: int,
    courses: list[TimeCourse] | None = None,
) -> list[Path]:
    """Curves with bands, cumulative reward per seed, paired differences, and (``courses``) the
    paired differences over rounds, as PNGs."""
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
        "4/4-self": "#8c564b",
        "8/0-dyn": "#17becf",
        "4/4@B4": "#e377c2",
        "backfill": "#bcbd22",
        "4/4-decay": "#7f7f7f",
        "4/4-is": "#aec7e8",
    }
    spare = iter(["#ff9896", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"] * 4)
    for name in order_arms(list(analysis.arms)):  # arms at another B (<arm>@B<n>)
        colors.setdefault(name, next(spare))
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
        ("filter controls (issue #8)", ["8/0", "8/0-filtered", "4/4", "4/4-unfiltered"]),
    ]
    if analysis.design == "v3":
        extra = [n for n in order_arms(list(analysis.arms)) if n not in ARM_ORDER]
        panels = [
            ("the pre-registered arms (issue #29)", ["8/0", "4/4@B4", "backfill", "8/0-dyn", *extra]),
            ("v2's arms and the exploratory ones", ["8/0", "4/4", "4/4-self", "4/4-decay", "4/4-is"]),
        ]
    elif "4/4-self" in analysis.arms or "8/0-dyn" in analysis.arms:
        panels.append(("curation and reuse controls (issue #18)", ["8/0", "4/4", "4/4-self", "8/0-dyn"]))
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), sharey=True)
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
    names = order_arms(list(analysis.arms))
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

    # 4. v3: cumulative reward against cumulative generated tokens (per agent), mean over seeds.
    mechanism = results.get("mechanism") or {}
    costed = [
        n for n in names if any("generation/tokens" in cell for cell in (mechanism.get(n) or {}).values())
    ]
    if analysis.design == "v3" and costed:
        figure, axis = plt.subplots(figsize=(7, 4.5))
        for name in costed:
            xs, ys = [], []
            for seed in analysis.arms[name].seeds:
                cell = mechanism[name].get(seed_key(seed)) or {}
                tokens = [v or 0.0 for v in cell.get("generation/tokens", [])]
                if tokens:
                    xs.append(np.cumsum(tokens))
                    ys.append(np.cumsum(results["curves"][name][seed_key(seed)]))
            if xs:
                axis.plot(np.mean(xs, axis=0), np.mean(ys, axis=0), color=colors[name], label=name)
        axis.set_xlabel("cumulative completion tokens generated per agent")
        axis.set_ylabel("cumulative reward")
        axis.set_title("Reward against generation: mean over seeds")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        save(figure, "compute")

    # 5. The time course: paired difference per round, mean over seeds with a pointwise band.
    if courses:
        columns = min(3, len(courses))
        rows = math.ceil(len(courses) / columns)
        figure, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.2 * rows), squeeze=False)
        for axis, course in zip(axes.flat, courses, strict=False):
            d = np.array(course.differences)
            rounds = np.arange(1, d.shape[1] + 1)
            axis.plot(rounds, d.mean(axis=0), color="#d62728", lw=1.2)
            if d.shape[0] >= 2:
                band = [stats.bootstrap_interval(d[:, r], resamples, seed=r) for r in range(d.shape[1])]
                axis.fill_between(
                    rounds, [b[0] for b in band], [b[1] for b in band], color="#d62728", alpha=0.2
                )
            for window in course.windows[1:]:
                axis.axvline(window.first - 0.5, color="#999999", lw=0.8, ls=":")
            for window in course.windows:
                axis.hlines(
                    window.difference.mean, window.first - 0.5, window.last + 0.5, color="black", lw=1.5
                )
            axis.axhline(0, color="black", lw=0.6)
            axis.set_title(f"{course.a} - {course.b} ({d.shape[0]} seeds)", fontsize=9)
            axis.grid(alpha=0.3)
        for axis in axes.flat[len(courses) :]:
            axis.set_visible(False)
        for axis in axes.flat[: len(courses)]:
            axis.set_xlabel("round", fontsize=8)
        for axis in axes[:, 0]:
            axis.set_ylabel("reward difference")
        figure.suptitle(
            "Paired difference per round (arm minus the other, same seed): red = mean over seeds, band = "
            "95% bootstrap; black = window means (thirds)",
            fontsize=10,
        )
        save(figure, "timecourse")
    return paths
