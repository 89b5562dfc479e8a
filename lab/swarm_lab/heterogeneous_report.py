"""The heterogeneous swarm's report (lab/swarm_lab/heterogeneous.py): markdown and a PNG,
generated from its results file; ``swarm-worker study-report`` writes it for a file of that design.

Per size, the file is read as a study of its own (:func:`tier_view`: that size's curves and
cumulative rewards), so the SAPO study's statistics apply unchanged: bootstrap intervals over
seeds, the exact sign-flip test of paired differences, Holm over the pre-registered family (here
the sizes' primaries), and the windows (thirds) of the time course.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swarm_lab.heterogeneous import ARMS, COMPARISONS, PRIMARY, WINDOWS
from swarm_lab.study import seed_key
from swarm_lab.study_analysis import Comparison, TimeCourse, compare, estimate, time_course
from swarm_lab.study_text import (
    describe,
    format_interval,
    format_p,
    format_pct,
    time_course_line,
    time_course_rows,
    verdict_words,
)
from worker.shared import stats


def tier_view(results: dict[str, Any], tier: str) -> dict[str, Any]:
    """The results of one size, shaped as a SAPO study's file: ``arms`` (cumulative per seed)
    and ``curves`` (per seed) of that size's agents."""
    cfg = results["config"]
    return {
        "config": {"seeds": cfg["seeds"], "rounds": cfg["rounds"], "arms": list(cfg["arms"])},
        "arms": {arm: results["arms"][arm][tier] for arm in cfg["arms"]},
        "curves": {
            arm: {key: curves[tier] for key, curves in results["curves"][arm].items()} for arm in cfg["arms"]
        },
    }


def analyse_tiers(
    results: dict[str, Any], resamples: int = stats.BOOTSTRAP_RESAMPLES
) -> dict[str, tuple[list[Comparison], list[TimeCourse]]]:
    """Per size: its comparisons (Holm over the sizes' primaries) and their time courses."""
    out: dict[str, tuple[list[Comparison], list[TimeCourse]]] = {}
    for tier in results["config"]["tiers"]:
        view = tier_view(results, tier)
        comparisons = compare(view, COMPARISONS, [PRIMARY], resamples)
        courses = [time_course(view, c.a, c.b, WINDOWS, resamples) for c in comparisons]
        out[tier] = (comparisons, [c for c in courses if c is not None])
    primaries = [c for comparisons, _ in out.values() for c in comparisons if c.preregistered]
    for comparison, adjusted in zip(primaries, stats.holm([c.p_value for c in primaries]), strict=True):
        comparison.holm_p = adjusted
    return out


def _arm_rows(results: dict[str, Any], tier: str, resamples: int) -> list[str]:
    view = tier_view(results, tier)
    lines = [
        "| arm | what it trains on | cumulative reward (95% interval over seeds) | n seeds |",
        "|---|---|---|---|",
    ]
    for arm in results["config"]["arms"]:
        values = [v for v in view["arms"][arm] if v is not None]
        if not values:
            continue
        e = estimate(values, resamples)
        interval = format_interval(e.interval) if e.n >= 2 else "n = 1: no interval"
        semantics = results["config"]["arm_semantics"][arm]
        lines.append(f"| {arm} | {semantics} | {e.mean:.2f} {interval} | {e.n} |")
    return lines


def _batch_rows(results: dict[str, Any], tier: str) -> list[str]:
    """What the size's agents trained on per round, per arm: the mean over its agents, rounds and
    seeds of own and external groups, and of external groups the other size generated (the check
    that the arms differ as designed: by-size and 8/0 must show 0 from the other size)."""
    cfg = results["config"]
    keys = ("batch/local_used", "batch/external_used", "batch/external_other_tier")
    lines = [
        "| arm | own groups | external groups | of which from the other size | n seeds |",
        "|---|---|---|---|---|",
    ]
    for arm in cfg["arms"]:
        cells = [c["batches_by_tier"][tier] for k, c in cfg["cells"].items() if k.split("|")[0] == arm]
        if cells:
            means = [sum(c[key] for c in cells) / len(cells) for key in keys]
            lines.append(f"| {arm} | " + " | ".join(f"{m:.2f}" for m in means) + f" | {len(cells)} |")
    return lines


def _comparison_rows(comparisons: list[Comparison]) -> list[str]:
    lines = [
        "| comparison | difference (95% interval) | relative (95% interval, %) | a higher in | sign-flip p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        holm = format_p(c.holm_p) if c.preregistered else "exploratory"
        lines.append(
            f"| {c.a} - {c.b} | {c.mean:+.2f} {format_interval(c.interval)} | {format_pct(c.gain)} "
            f"{format_interval(c.gain_interval, 1, 100)} | {c.wins} of {len(c.seeds)} | "
            f"{format_p(c.p_value)} | {holm} | {verdict_words(c)} |"
        )
    return lines


def answer(analysis: dict[str, tuple[list[Comparison], list[TimeCourse]]]) -> list[str]:
    """The plain answer per size, generated from the numbers: the primary with its Holm p, what
    the dashboard's swarm-vs-isolated gain is here, and the time course of the primary."""
    lines = ["## Answer", ""]
    for tier, (comparisons, courses) in analysis.items():
        by_pair = {(c.a, c.b): c for c in comparisons}
        primary = by_pair.get(PRIMARY)
        if primary is None:
            lines.append(f"- **{tier}**: no paired seeds yet.")
            continue
        holm = f"Holm p over the {len(analysis)} sizes' primaries = {format_p(primary.holm_p)}"
        null = ""
        if primary.holm_p > 0.05 and len(primary.seeds) >= 2:
            detectable = stats.minimum_detectable_effect(primary.sd, len(primary.seeds))
            null = " Not distinguishable is not equal: " + (
                f"a difference of about {detectable:.2f} would have been detected with 80% power "
                "(exact sign-flip test at 0.05, the observed spread); smaller ones could be there."
                if detectable is not None
                else "these seeds cannot detect any difference."
            )
        lines.append(
            f"- **{tier}**: sharing with the other size against sharing with its own size only: "
            f"{describe(primary)}; {holm}: {verdict_words(primary)}.{null}"
        )
        for pair in (("mixed", "8/0"), ("by-size", "8/0")):
            if pair in by_pair:
                c = by_pair[pair]
                lines.append(f"  - exploratory: {describe(c)}: {verdict_words(c)}.")
        course = next((tc for tc in courses if (tc.a, tc.b) == PRIMARY), None)
        if course is not None:
            lines.append(f"  {time_course_line(course)}")
    return lines


def _plot(results: dict[str, Any], stem: Path, resamples: int) -> Path:
    """Per size, each arm's per-round mean reward over seeds with its 95% bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    colors = {"mixed": "#d62728", "by-size": "#1f77b4", "8/0": "#444444"}
    figure, axes = plt.subplots(1, len(cfg["tiers"]), figsize=(6 * len(cfg["tiers"]), 4), sharey=True)
    for ax, tier in zip(axes, cfg["tiers"], strict=True):
        for arm in cfg["arms"]:
            curves = [c[tier] for c in results["curves"][arm].values()]
            if not curves:
                continue
            rounds = range(1, len(curves[0]) + 1)
            per_round = [[c[r - 1] for c in curves] for r in rounds]
            mean = [sum(v) / len(v) for v in per_round]
            ax.plot(rounds, mean, color=colors[arm], label=f"{arm} (n = {len(curves)} seeds)")
            if len(curves) >= 2:
                bands = [stats.bootstrap_interval(v, resamples) for v in per_round]
                ax.fill_between(
                    rounds, [b[0] for b in bands], [b[1] for b in bands], color=colors[arm], alpha=0.15
                )
        ax.set_title(f"{tier}: mean reward of its agents")
        ax.set_xlabel("round")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("mean reward (band: 95% bootstrap over seeds)")
    figure.tight_layout()
    path = stem.with_name(f"{stem.name}-curves.png")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_report(
    results_path: Path, out: Path | None = None, resamples: int = stats.BOOTSTRAP_RESAMPLES
) -> Path:
    """Write the markdown report (and its PNG next to it); returns the report's path."""
    results = json.loads(Path(results_path).read_text())
    out = out or Path(results_path).with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = results["config"]
    analysis = analyse_tiers(results, resamples)
    image = _plot(results, out.with_suffix(""), min(resamples, 2000)) if cfg["cells_done"] else None
    sizes = " + ".join(f"{cfg['agents_per_tier']} {tier}" for tier in cfg["tiers"])
    status = (
        "complete"
        if cfg["complete"]
        else f"**incomplete: {cfg['cells_done']} of {cfg['cells_total']} cells**; rerun `swarm-worker heterogeneous` to resume"
    )
    seeds_done = {arm: sum(seed_key(s) in results["curves"][arm] for s in cfg["seeds"]) for arm in ARMS}
    lines = [
        f"# A heterogeneous swarm at CPU scale ({sizes})",
        "",
        f"Generated by `swarm-worker study-report {results_path}` from the study's results; regenerate it "
        "rather than editing it. Issue #29 item 6: the platform's setting (swarm against isolated reward "
        "per model size): do a size's agents gain from the other size's rollouts, beyond their own "
        "size's, and what does sharing give each size against training alone?",
        "",
        f"Status: {status}.",
        "",
        *answer(analysis),
        "",
        "## Setup",
        "",
        f"- Agents: {sizes} ({len(cfg['agent_tiers'])} in all); agent i has the same size, questions and "
        "generation seeds in every arm, so the arms of a seed pair agent for agent. Independent unit: the "
        f"seed (n = {len(cfg['seeds'])} seeds; cells done per arm: "
        + ", ".join(f"{arm} {n}" for arm, n in seeds_done.items())
        + ").",
        f"- Arms: {'; '.join(f'`{arm}`: {text}' for arm, text in cfg['arm_semantics'].items())}.",
        f"- Pool windows (rollouts): mixed {cfg['pool_windows']['mixed']['']}; by size "
        + ", ".join(f"{t} {w}" for t, w in cfg["pool_windows"]["by-size"].items())
        + " (the same share of the window as of the agents: the same age in rounds).",
        f"- {cfg['rounds']} rounds, B = {cfg['questions_per_round']} questions a round, G = {cfg['group_size']}, "
        f"{cfg['max_new_tokens']} new tokens, learning rate {cfg['learning_rate']:g}, tasks `{cfg['tasks']}`.",
        f"- Measure: {cfg['cumulative_reward']}.",
        "- Pre-registered (worker/research/heterogeneous.py, before any data): per size, "
        f"{PRIMARY[0]} - {PRIMARY[1]}, Holm over the sizes; the rest exploratory and unadjusted.",
        f"- Compute: {cfg['elapsed_seconds'] / 60:.1f} process-minutes, {cfg.get('wall_seconds', 0) / 60:.1f} "
        f"minutes of wall clock with {cfg.get('jobs', 1)} process(es) of one torch thread on {cfg.get('machine', '?')} "
        f"({cfg.get('seconds_per_agent_round', 0):.2f} s per agent-round, both sizes together).",
        "",
    ]
    if image is not None:
        lines += ["![curves per size]" + f"({image.name})", ""]
    for tier, (comparisons, courses) in analysis.items():
        lines += [f"## {tier}", "", *_arm_rows(results, tier, resamples), ""]
        lines += ["Groups trained on per agent-round (means over the size's agents, rounds and seeds):", ""]
        lines += [*_batch_rows(results, tier), ""]
        if comparisons:
            lines += [*_comparison_rows(comparisons), ""]
        if courses:
            lines += [
                "Time course (exploratory; windows = thirds of the horizon, reward per round):",
                "",
                *time_course_rows(courses),
                "",
            ]
    out.write_text("\n".join(lines).rstrip() + "\n")
    return out
