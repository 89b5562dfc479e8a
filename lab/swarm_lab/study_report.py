"""The SAPO table study's report: markdown with PNG plots, generated from its results file.

``swarm-worker study-report`` writes it; the answer is generated from the numbers, with what
would change it, so the report is regenerated rather than edited.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from swarm_lab import heterogeneous_report, study_v4_report
from swarm_lab.heterogeneous import DESIGN
from swarm_lab.study import (
    BASELINE,
    FAMILY,
    MECHANISM_METRICS,
    PAPER_CUMULATIVE,
    PRIMARY,
    SECONDARY,
    order_arms,
)
from swarm_lab.study_analysis import (
    Analysis,
    Comparison,
    analyse,
    late_trend,
    time_courses,
)
from swarm_lab.study_old_design import old_answer
from swarm_lab.study_plots import plots
from swarm_lab.study_text import (
    CROSSOVER_RULE,
    caveats,
    cell_means,
    describe,
    format_interval,
    format_p,
    format_pct,
    seed_advice,
    self_window_words,
    significant,
    time_course_answer,
    time_course_rows,
    trend_words,
    verdict_words,
    versions_words,
)
from swarm_lab.study_v3_text import answer_v3, compute_rows, semantics_rows
from worker.shared import stats

MECHANISM_LABELS = {
    "batch/informative_groups": "informative groups trained on",
    "batch/local_used": "own groups (I side)",
    "batch/external_used": "J-side groups",
    "batch/external_from_others": "J-side groups from other agents",
    "batch/external_age": "age of J-side groups (rounds)",
    "advantages/local_abs_mean": "mean abs advantage, own",
    "advantages/external_abs_mean": "mean abs advantage, J side",
    "batch/local_reward_std": "within-group reward std, own",
    "batch/external_reward_std": "within-group reward std, J side",
    "frac_reward_zero_std": "share of own first-B groups with zero advantage",
    "grad_norm": "gradient norm before clipping",
    "grad_norm_clipped": "share of steps clipped",
    "generation/questions": "questions generated",
    "completions/mean_length": "completion length (tokens)",
    "batch/local_requested": "own groups asked for (I_r)",
    "batch/external_requested": "external groups asked for (J_r)",
    "generation/completions": "completions generated",
    "generation/tokens": "completion tokens generated",
    "train/completions": "completions trained on",
    "train/tokens": "tokens trained on (prompt + completion)",
}


def mechanism_rows(results: dict[str, Any], analysis: Analysis, resamples: int) -> list[str]:
    """A table per metric of :data:`MECHANISM_METRICS`: per arm, the mean over seeds of the cell's
    mean over rounds and agents, with a bootstrap interval over seeds (n = seeds)."""
    mechanism = results.get("mechanism") or {}
    names = [n for n in order_arms(list(analysis.arms)) if mechanism.get(n)]
    if not names:
        return []
    lines = [
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key in MECHANISM_METRICS:
        if not any(cell_means(results, name, key) for name in names):
            continue  # a metric the file's engine did not record (v2's files: compute)
        cells = []
        for name in names:
            values = cell_means(results, name, key)
            if not values:
                cells.append("-")
                continue
            interval = stats.bootstrap_interval(values, resamples)
            cells.append(f"{sum(values) / len(values):.2f} {format_interval(interval)} (n={len(values)})")
        lines.append(f"| {MECHANISM_LABELS.get(key, key)} (`{key}`) | " + " | ".join(cells) + " |")
    return lines


def context(
    results: dict[str, Any], by_pair: dict[tuple[str, str], Comparison], headline_says_no_gain: bool = False
) -> list[str]:
    """What the verdict on the primary does not say: whether 4/4 has a gain over 8/0 to explain at
    all (unless the headline said so), how replay and fresh curation compare with 8/0, and whether
    the two J sides were as old."""
    lines = []
    gain, self_vs_plain, dyn = (
        by_pair.get(("4/4", "8/0")),
        by_pair.get(SECONDARY[1]),
        by_pair.get(("8/0-dyn", "8/0")),
    )
    if gain is not None and significant(gain) != "higher":
        parts = (
            ["\nWhy there is none:"]
            if headline_says_no_gain
            else [
                f"\nBut at this scale there is **no gain of 4/4 over 8/0 to explain**: {describe(gain)} "
                "(the paper: +94.6%)."
            ]
        )
        if self_vs_plain is not None and significant(self_vs_plain) == "lower":
            parts.append(
                "Replacing half of the fresh own groups by older ones costs reward: 4/4-self, which "
                f"replays its own, is below 8/0 ({format_pct(self_vs_plain.gain)}), and what the "
                "other agents' rollouts add over self-replay makes up only part of that."
            )
        if dyn is not None and significant(dyn) == "higher":
            parts.append(
                "Curation of fresh groups is what helps here: over-generating until 8 groups are "
                f"informative (8/0-dyn) beat 8/0 ({format_pct(dyn.gain)}, at more generation: below)."
            )
        lines.append(" ".join(parts))
    shared_age, own_age = (cell_means(results, arm, "batch/external_age") for arm in ("4/4", "4/4-self"))
    if shared_age and own_age:
        shared, own = sum(shared_age) / len(shared_age), sum(own_age) / len(own_age)
        if abs(shared - own) > 0.1:
            older = "4/4-self's" if own > shared else "4/4's"
            lines.append(
                f"\nA residual difference between the primary's arms: {older} J-side groups were older "
                f"({own:.2f} rounds for 4/4-self against {shared:.2f} for 4/4, mean over seeds). The "
                "self-replay window holds as many groups as the pool per agent, but not of exactly the "
                "same age, so part of the primary difference may be staleness rather than sharing."
            )
    return lines


def answer(results: dict[str, Any], analysis: Analysis) -> list[str]:
    """The plain answer, generated from the numbers: which mechanism the data support (sharing,
    curation, reuse, or cannot tell), with the minimum detectable effect at this n."""
    if analysis.old_design:
        return old_answer(results, analysis)
    if analysis.design == "v3":
        return answer_v3(results, analysis)
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    config = results["config"]
    lines = caveats(config)
    question = (
        "**Is 4/4's gain sharing, or curation (training on informative groups) and reuse of "
        "slightly older rollouts?**"
    )
    scale = (
        f"{config['tier']}, {config['agents']} agents, {config['rounds']} rounds, G = {config['group_size']}"
    )
    primary = by_pair.get(PRIMARY)
    if primary is None:
        lines.append(f"{question} Not answerable from this file: 4/4 and 4/4-self have no common seed.")
        return lines
    s1, s2 = (by_pair.get(pair) for pair in SECONDARY)
    dyn = by_pair.get(("8/0-dyn", "8/0"))
    sharing, self_gain = significant(primary), significant(s2)
    gain = by_pair.get(("4/4", "8/0"))
    # The question asks about 4/4's gain: a one-word answer only where that gain is shown.
    no_gain = gain is not None and significant(gain) != "higher"
    n_family = analysis.family_size
    holm_scope = (
        f"over the {n_family} comparison{'s' if n_family != 1 else ''} of the family this file holds "
        "(a follow-up, so exploratory)"
        if config.get("follow_up")
        else "over the pre-registered family"
    )
    if sharing == "higher" and gain is None:
        verdict = (
            f"**Other agents' rollouts beat self-replay** at this scale ({scale}); this file has no "
            "4/4 - 8/0 comparison, so it does not show a gain of 4/4 to explain. 4/4 beat its "
            f"self-replay control 4/4-self, which trains on as many informative groups from "
            f"{self_window_words(config)}. {describe(primary)}; Holm p = {format_p(primary.holm_p)} "
            f"{holm_scope}."
        )
    elif sharing == "higher" and no_gain:
        assert gain is not None
        verdict = (
            f"**There is no gain of 4/4 over 8/0 to explain** at this scale ({scale}): {describe(gain)} "
            "(the paper: +94.6%). What the pre-registered comparison does show is that other agents' "
            "rollouts are worth more than the agent's own replayed ones: 4/4 beat its self-replay "
            f"control 4/4-self, which trains on as many informative groups from "
            f"{self_window_words(config)}. {describe(primary)}; Holm p = "
            f"{format_p(primary.holm_p)} {holm_scope}."
        )
    elif sharing == "higher":
        verdict = (
            f"**Sharing**, at this scale ({scale}): 4/4 beat its self-replay control 4/4-self, which "
            f"trains on as many informative groups from {self_window_words(config)}. "
            f"{describe(primary)}; Holm p = {format_p(primary.holm_p)} {holm_scope}."
        )
    elif sharing == "lower":
        verdict = (
            f"**Not sharing**, at this scale ({scale}): the self-replay control 4/4-self beat 4/4, so "
            f"other agents' rollouts did worse than the agent's own. {describe(primary)}; Holm p = "
            f"{format_p(primary.holm_p)}."
        )
    elif self_gain == "higher":
        mechanism = (
            "curation: over-generating to 8 informative fresh groups (8/0-dyn) also beat 8/0"
            if significant(dyn) == "higher"
            else "curation and reuse together: 8/0-dyn (curation of fresh groups only) was not "
            "shown to beat 8/0, so reuse may be part of it"
        )
        verdict = (
            f"**Curation/reuse, not shown to be sharing**, at this scale ({scale}): 4/4 and 4/4-self "
            f"were not distinguishable (Holm p = {format_p(primary.holm_p)}), while 4/4-self beat 8/0 "
            f"(Holm p = {format_p(s2.holm_p) if s2 else 'n/a'}). The data point to {mechanism}. "
            f"{describe(primary)}."
        )
    else:
        verdict = (
            f"**Cannot tell**, at this scale ({scale}): 4/4 vs 4/4-self is not significant after Holm "
            f"(p = {format_p(primary.holm_p)}), and neither is 4/4-self vs 8/0 "
            f"(Holm p = {format_p(s2.holm_p) if s2 else 'n/a'}). {describe(primary)}."
        )
    lines.append(f"{question} {verdict}")
    lines += context(results, by_pair, headline_says_no_gain=sharing == "higher" and no_gain)
    n = len(primary.seeds)
    mde = (
        stats.minimum_detectable_effect(primary.sd, n, 0.05 / max(analysis.family_size, 1))
        if n >= 2 and primary.sd == primary.sd
        else None
    )
    if mde is not None:
        lines.append(
            f"\nAt n = {n} seeds, with the observed spread of 4/4 - 4/4-self (sd {primary.sd:.2f}), the "
            f"exact test at Holm's level {0.05 / analysis.family_size:.3g} detects a true difference of "
            f"about {mde:.2f} in cumulative reward with 80% power: smaller effects of sharing are not "
            "ruled out."
        )

    def line(c: Comparison | None, what: str) -> None:
        if c is None:
            return
        word = verdict_words(c, "permutation test")
        holm = f"; Holm p = {format_p(c.holm_p)}" if c.preregistered else " (exploratory, unadjusted)"
        lines.append(f"- {what}: {c.a} vs {c.b} {word}; {describe(c)}{holm}.")

    lines.append("")
    line(primary, "Primary, sharing vs self-replay")
    line(s1, "Secondary, sharing vs over-generation")
    line(s2, "Secondary, curation and reuse vs the paper's baseline")
    line(dyn, "Curation of fresh groups alone")
    line(by_pair.get(("4/4", "8/0")), "The paper's comparison (paper: +94.6%)")
    line(by_pair.get(("8/0-filtered", "8/0")), "Sanity: the filter alone at B = I (cannot differ much)")
    cells = config.get("cells", {})
    questions = [
        c["questions_generated"]
        for k, c in cells.items()
        if k.startswith("8/0-dyn|") and "questions_generated" in c
    ]
    if questions:
        low, high = stats.bootstrap_interval(questions) or (math.nan, math.nan)
        lines.append(
            f"- Generation cost: 8/0-dyn generated {sum(questions) / len(questions):.1f} questions per "
            f"agent and round [{low:.1f}, {high:.1f}] ({len(questions)} seeds) against 8 for every "
            "other arm."
        )
    lines += time_course_answer(results, analysis, [*FAMILY, ("4/4", "8/0")])
    lines += ["", "### What would change this answer", "", seed_advice(primary, analysis.family_size)]
    late = late_trend(results, analysis, min(analysis.resamples, 2000))
    if late is not None:
        lines.append(
            f"- **More rounds.** Over the last third of the {config['rounds']} rounds the mean reward "
            f"(all arms; least squares per seed, mean over seeds) was {trend_words(late)}."
        )
    lines.append(
        f"- **A bigger tier and other tasks.** {config['tier']} on the `{config['tasks']}` tasks is a "
        "~1M-parameter model on easy arithmetic and spelling; the paper's effect was measured on "
        "Qwen2.5-0.5B with nine reasoning-gym tasks and 256-token completions."
    )
    return lines


def compute_words(config: dict[str, Any]) -> str:
    """The Setup's compute line: process-minutes over the cells this run computed; cells reused from
    another file (``cells_reused``) are named and not counted."""
    reused = config.get("cells_reused") or []
    reused = [reused] if isinstance(reused, dict) else list(reused)
    reused_arms = {entry.get("arm") for entry in reused}
    cells = config.get("cells") or {}
    mine = {k: c for k, c in cells.items() if k.split("|")[0] not in reused_arms}
    if not reused_arms or not cells:
        seconds, done = config.get("elapsed_seconds", 0), config.get("cells_done")
        per_round = config.get("seconds_per_agent_round", float("nan"))
        note = ""
    else:
        seconds = sum(c.get("seconds", 0.0) for c in mine.values())
        done = len(mine)
        agent_rounds = done * config["agents"] * config["rounds"]
        per_round = seconds / agent_rounds if agent_rounds else float("nan")
        others = len(cells) - done
        source = ", ".join(sorted({f"{e.get('arm')} from {e.get('from')}" for e in reused}))
        note = (
            f"; not counted: the {others} reused cells ({source}), "
            f"{(sum(c.get('seconds', 0.0) for c in cells.values()) - seconds) / 60:.1f} process-minutes "
            "spent by the run that made them"
        )
    return (
        f"- Compute: {seconds / 60:.1f} process-minutes over the {done} cells this run computed "
        f"({config.get('wall_seconds', 0) / 60:.1f} minutes of wall clock), {per_round:.2f} s per "
        f"agent-round and process, one torch thread per process, {config.get('jobs', 1)} process(es); "
        f"{config.get('machine', '')}{note}."
    )


def write_report(
    results_path: Path, out: Path | None = None, resamples: int = stats.BOOTSTRAP_RESAMPLES
) -> Path:
    """Write the markdown report (and its PNGs next to it); returns the report's path. A file of
    the heterogeneous swarm (worker/research/heterogeneous.py) gets that study's report."""
    results = json.loads(Path(results_path).read_text())
    if results["config"].get("design") == DESIGN:
        return heterogeneous_report.write_report(results_path, out, resamples)
    if results["config"].get("design") == "v4":
        return study_v4_report.write_report(results_path, out, resamples)
    out = out or Path(results_path).with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    analysis = analyse(results, resamples)
    config = results["config"]
    courses = [] if analysis.old_design else time_courses(results, analysis, analysis.resamples)
    images = (
        plots(results, analysis, out.with_suffix(""), min(resamples, 2000), courses) if analysis.arms else []
    )
    image = {path.stem.rsplit("-", 1)[1]: path for path in images}
    arms = analysis.arms
    base = arms.get(BASELINE)
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    paper_base = PAPER_CUMULATIVE[BASELINE]
    # A run chosen after the main study's data says so, in the results file's config.
    follow_up = config.get("follow_up")

    lines = [
        f"# The SAPO table at CPU scale ({config['tier']})",
        "",
        f"Generated by `swarm-worker study-report {results_path}` from the study's results; "
        "regenerate it rather than editing it. "
        + (
            "Issue #8: does sharing rollouts beat training alone once the lone agent may also drop "
            "zero-advantage samples?"
            if analysis.old_design
            else "Issue #29 (design v3): does sharing help under the paper's own semantics of I/J "
            "(4/4@B4) and as backfill? The comparisons were pre-registered in "
            "worker/research/study.py before the data."
            if analysis.design == "v3"
            else "Issue #18: is 4/4's gain sharing, or curation and reuse? Controls: 4/4-self "
            "(self-replay) and 8/0-dyn (over-generation); "
            + (
                "the comparisons are the main study's, pre-registered in worker/research/study.py, "
                "but this run's setting was chosen after the main study's data (below)."
                if follow_up
                else "the comparisons were pre-registered in worker/research/study.py before the data."
            )
        ),
        "",
    ]
    if follow_up:
        lines += [
            f"> **Follow-up, not pre-registered.** {follow_up} Its p-values and Holm adjustment cover "
            "only the comparisons in this file: read them as exploratory.",
            "",
        ]
    if analysis.old_design:
        lines += [
            "> **Old design (issue #8).** Its control 8/0-filtered could not differ from 8/0 by "
            "construction (with B = I = 8 the filter only deletes zero-advantage groups, whose gradient "
            "was zero anyway; clipping removes the normaliser's effect), so this report does not test "
            "whether 4/4's gain is sharing or curation. See docs/experiments/README.md and issue #18.",
            "",
        ]
    if config.get("quick"):
        lines += ["> **Quick smoke-test run**: the numbers below mean nothing.", ""]
    if not config.get("complete"):
        lines += [f"> **Incomplete**: {config.get('cells_done')} of {config.get('cells_total')} cells.", ""]
    versions_text = versions_words(config)
    build = config.get("model_build") or {}
    recipe = build.get("recipe_version")
    lines += [
        "## Setup",
        "",
        f"- Arms: {', '.join(config['arms'])}. I/J = own/external rollouts trained on per round; the "
        "paper's sharing arms and 8/0-filtered drop zero-advantage groups (`nonzero_advantage`), "
        "8/0 and 4/4-unfiltered do not (`uniform`)."
        + (
            ""
            if analysis.old_design or analysis.design == "v3"
            else f" 4/4-self draws its 4 J-side groups from the agent's own last "
            f"{config.get('self_window')} groups (filtered); 8/0-dyn generates up to "
            f"{config.get('max_questions')} questions until 8 groups are informative. Required arms "
            f"({', '.join(config.get('required_arms', []))}) run on every seed, the others on the "
            f"first {config.get('other_seeds') or len(config['seeds'])}."
        ),
        *(
            [
                f"  Required arms ({', '.join(config.get('required_arms', []))}) run on every seed, the "
                f"others on the first {min(config.get('other_seeds') or len(config['seeds']), len(config['seeds']))}. "
                "What a round "
                "of each arm generates (B) and trains on, and which meaning of I/J it uses:",
                "",
                *semantics_rows(config),
                "",
            ]
            if analysis.design == "v3"
            else []
        ),
        f"- Each cell (arm, seed): {config['agents']} agents from the same weights, "
        + (
            f"B = {config['questions_per_round']} questions per agent per round (an arm named "
            "`@B<n>` generates n), "
            if analysis.design == "v3"
            else f"{config['questions_per_round']} questions per agent per round, "
        )
        + f"G = {config['group_size']} "
        f"completions of at most {config['max_new_tokens']} tokens, {config['rounds']} rounds, "
        f"tier {config['tier']}" + (f" (build recipe {recipe})" if recipe else "") + f", tasks "
        f"`{config['tasks']}`, learning rate {config['learning_rate']:g}, {config['num_iterations']} "
        f"GRPO iteration(s), beta {config['beta']:g}, pool window {config['pool_window']}.",
        f"- Seeds {config['seeds']}, the same for every arm: a seed fixes every agent's question stream "
        "and sampling seeds, so arms pair by seed.",
        f"- Cumulative reward: {config['cumulative_reward']}.",
        compute_words(config),
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
    for name in order_arms(list(arms)):
        s = arms[name]
        if name == BASELINE:
            gain = "(baseline)"
        elif base is not None and (c := by_pair.get((name, BASELINE))) is not None:
            gain = f"{format_pct(c.gain)} {format_interval(c.gain_interval, 1, 100)}%"
        else:
            gain = "n/a"
        # v3: the paper's 4/4 is 4/4@B4 (its semantics); v3's 4/4 generates 8, not the paper's arm
        paper_name = {"4/4@B4": "4/4", "4/4": None}.get(name, name) if analysis.design == "v3" else name
        paper = PAPER_CUMULATIVE.get(paper_name) if paper_name else None
        paper_cell = f"{paper:.2f}" if paper else "not run"
        paper_gain = (
            "(baseline)" if name == BASELINE else format_pct(paper / paper_base - 1) if paper else "not run"
        )
        lines.append(
            f"| {name} | {s.mean:.2f} {format_interval(s.interval)} ({len(s.seeds)} seeds) | "
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
        "seeds, so with n seeds p >= 2/2^n). "
        + (
            "Holm: adjusted over the rows of this table; the first row was fixed as the main "
            "question before the data, the others are exploratory."
            if analysis.old_design
            else f"Holm: adjusted over the comparisons of the main study's pre-registered family that "
            f"this file holds (the first {analysis.family_size} rows, marked *pre-registered*); this "
            "run's setting was chosen after the data, so they are exploratory too. The other rows' p "
            "is unadjusted."
            if follow_up
            else f"Holm: adjusted over the pre-registered family only (the first "
            f"{analysis.family_size} rows, marked *pre-registered*); the other rows are exploratory "
            "and their p is unadjusted."
        ),
        "",
        "| comparison | mean difference [95% bootstrap] | 95% t-interval | relative | first arm higher | "
        "p | Holm p |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in analysis.comparisons:
        label = f"{c.a} - {c.b}" + (
            " (*pre-registered*)" if c.preregistered and not analysis.old_design else ""
        )
        lines.append(
            f"| {label} | {c.mean:+.2f} {format_interval(c.interval)} | {format_interval(c.t_interval)} | "
            f"{format_pct(c.gain)} | "
            f"{c.wins} of {len(c.seeds)} | {format_p(c.p_value)}{'' if c.exact else ' (Monte-Carlo)'} | "
            f"{format_p(c.holm_p) if c.preregistered else '-'} |"
        )
    mechanism = mechanism_rows(results, analysis, min(resamples, 2000))
    if mechanism:
        lines += [
            "",
            "## What each arm trained on",
            "",
            "Per arm: the mean over seeds of each cell's mean over its rounds and agents, with a 95% "
            "bootstrap interval over seeds (n = seeds). `grad_norm` is the norm before clipping "
            "(max 1.0); J side = external (pool) or replayed (self) groups.",
            "",
            *mechanism,
        ]
    compute = compute_rows(results, analysis, min(resamples, 2000)) if analysis.design == "v3" else []
    if compute:
        lines += [
            "",
            "## Compute",
            "",
            "Per agent-round, mean over seeds of each cell's mean with a 95% bootstrap interval over "
            "seeds: completions and completion tokens generated (over-generation included), tokens "
            "trained on (prompt + completion); last column: the arm's mean cumulative reward over the "
            "completions one agent generated in the run, per 1,000.",
            "",
            *compute,
        ]
        if "compute" in image:
            lines += [
                "",
                "Cumulative reward against the completion tokens an agent generated (mean over seeds):",
                "",
                f"![reward against generated tokens]({image['compute'].name})",
            ]
    if courses:
        lines += [
            "",
            "## Time course",
            "",
            f"{CROSSOVER_RULE} Each cell: the mean difference in reward per round, its 95% bootstrap "
            "and t-intervals, the relative difference (sum of the first arm's rewards over the window "
            "and seeds over the second's, minus 1) and the seeds above 0. Slope: least squares of the "
            "per-round difference on the round, per seed, then the mean over seeds with both "
            "intervals (in brackets: seeds with a negative slope, of n).",
            "",
            *time_course_rows(courses),
        ]
        if "timecourse" in image:
            lines += ["", f"![paired differences over rounds]({image['timecourse'].name})"]
    lines += ["", "## Reward curves", ""]
    if images:
        lines += [
            "Mean over seeds of the per-round mean reward over the agents; the band is the pointwise "
            "95% percentile bootstrap interval of that mean over seeds (uncertainty of the mean, "
            "not the spread of agents).",
            "",
            f"![reward curves]({image['curves'].name})",
            "",
            "Cumulative reward of every seed (grey, lines join one seed's arms) and the mean with its "
            "interval:",
            "",
            f"![cumulative reward per seed]({image['cumulative'].name})",
            "",
            "Paired differences seed by seed, with the mean and its interval:",
            "",
            f"![paired differences]({image['differences'].name})",
            "",
        ]
    lines += ["## Answer", "", *answer(results, analysis), ""]
    out.write_text("\n".join(lines))
    return out
