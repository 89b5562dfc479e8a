"""The old design's answer (issue #8: the SAPO table with 8/0-filtered as the primary control),
kept so that its results file still reports as it did, with the exact test's seed advice."""

from __future__ import annotations

from typing import Any

from swarm_lab.study import OLD_PRIMARY
from swarm_lab.study_analysis import Analysis, late_trend
from swarm_lab.study_text import (
    caveats,
    describe,
    format_p,
    format_pct,
    seed_advice,
    trend_words,
)


def old_answer(results: dict[str, Any], analysis: Analysis) -> list[str]:
    """The answer of the old design (issue #8), as its report gave it, with the exact test's seed advice."""
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    config = results["config"]
    lines = caveats(config)
    primary = by_pair.get(OLD_PRIMARY)
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
        text = f"Yes, at this scale ({scale}): 4/4 beat 8/0-filtered. {describe(primary)}."
    elif verdict == "lower":
        text = f"No, at this scale ({scale}): 4/4 did worse than 8/0-filtered. {describe(primary)}."
    elif verdict.startswith("suggestive"):
        word = "above" if verdict.endswith("higher") else "below"
        text = (
            f"Not established. The bootstrap interval of 4/4 - 8/0-filtered lies {word} zero, but the "
            f"exact permutation test does not reject exchangeability (p = {format_p(primary.p_value)}; "
            f"the smallest p possible with {n} seeds is {format_p(primary.min_p_value)}), and a percentile "
            f"bootstrap over {n} seeds is too narrow. {describe(primary)}."
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
            f"filters too. {describe(primary)}. The interval runs from {primary.interval[0]:+.2f} to "
            f"{primary.interval[1]:+.2f} in cumulative reward"
            + (
                f" ({format_pct(primary.gain_interval[0])} to {format_pct(primary.gain_interval[1])} relative)"
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
        lines.append(f"- {what}: {c.a} vs {c.b} {word}; {describe(c)}.")

    lines.append("")
    line(("4/4", "8/0"), "The paper's comparison (paper: +94.6%)")
    line(("8/0-filtered", "8/0"), "Filtering alone, without sharing")
    line(("4/4", "4/4-unfiltered"), "Filtering within sharing")
    line(("6/2", "8/0-filtered"), "Less sharing against the fair control")
    line(("2/6", "8/0-filtered"), "More sharing against the fair control")
    if primary.verdict() != "inconclusive" and primary.holm_p > 0.05:
        lines.append(
            f"- Across the {len(analysis.comparisons)} comparisons of the table, Holm's adjustment "
            f"gives the main comparison p = {format_p(primary.holm_p)}; it was fixed before the data, so "
            "its unadjusted p is the one to read, the others are exploratory."
        )

    lines += ["", "### What would change this answer", ""]
    lines.append(seed_advice(primary, analysis.family_size))
    late = late_trend(results, analysis, min(analysis.resamples, 2000))
    if late is not None:
        lines.append(
            f"- **More rounds.** Over the last third of the {config['rounds']} rounds the mean reward "
            f"(all arms; least squares per seed, mean over seeds) was {trend_words(late)}. The paper ran 2000 rounds; sharing "
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
