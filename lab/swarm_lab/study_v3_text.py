"""The v3 study's (issue #29) report text: what each arm generates and trains on, its compute,
and the answer to the pre-registered family (4/4@B4 - 8/0; backfill - 8/0, backfill - 8/0-dyn),
generated from the numbers (worker/research/study_report.py puts it together)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swarm_lab.study import (
    DESIGN_OUT,
    QUESTIONS_PER_ROUND,
    V3_FAMILY,
    V3_PRIMARY,
    V3_SECONDARY,
    order_arms,
    resolve_arm,
)
from swarm_lab.study_analysis import CROSSES, Analysis, Comparison, time_course
from swarm_lab.study_text import (
    caveats,
    cell_means,
    describe,
    format_interval,
    format_p,
    format_pct,
    seed_advice,
    shape_words,
    significant,
    time_course_answer,
    verdict_words,
)
from worker.shared import stats


def arm_semantics(config: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Per arm of the file: (B, what a round generates and trains on), from the file's own
    record (``arm_questions``, ``arm_semantics``), else from the arm's definition today."""
    default = config.get("questions_per_round", QUESTIONS_PER_ROUND)
    out = {}
    for name in config["arms"]:
        recorded = (config.get("arm_semantics") or {}).get(name)
        questions = (config.get("arm_questions") or {}).get(name)
        if recorded is None or questions is None:
            arm = resolve_arm(
                name, config.get("self_window"), config.get("max_questions"), config.get("decay_rounds")
            )
            questions, recorded = arm.questions(default), arm.semantics(default)
        out[name] = (questions, recorded)
    return out


def semantics_rows(config: dict[str, Any]) -> list[str]:
    """The report's table of I/J semantics: B per arm, and whether it is the paper's reading
    (B = I questions generated, J taken from the swarm) or this project's earlier one (B = 8)."""
    lines = [
        "| arm | B (questions generated per round) | a round of this arm | I/J semantics |",
        "|---|---|---|---|",
    ]
    for name, (questions, text) in arm_semantics(config).items():
        arm = resolve_arm(
            name, config.get("self_window"), config.get("max_questions"), config.get("decay_rounds")
        )
        if not arm.num_external or arm.replay == "self":
            kind = "isolated (J = 0 from others)"
        elif arm.batch_rule == "backfill":
            kind = "backfill: J = B - informative own groups, per round"
        elif arm.batch_rule == "decay":
            kind = f"schedule: J falls from {arm.num_external} to 0, I of the {questions} generated"
        elif questions == arm.num_local:
            kind = "the paper's (rl-swarm): I = questions generated"
        else:
            kind = f"v2's: I of the {questions} generated"
        lines.append(f"| {name} | {questions} | {text} | {kind} |")
    return lines


def compute_rows(results: dict[str, Any], analysis: Analysis, resamples: int) -> list[str]:
    """Per arm: generated completions and tokens and trained tokens per agent-round (mean over
    seeds of the cell's mean), and cumulative reward per 1,000 generated completions per agent."""
    names = [n for n in order_arms(list(analysis.arms)) if cell_means(results, n, "generation/completions")]
    if not names:
        return []
    rounds = results["config"]["rounds"]
    lines = [
        "| arm | generated completions | generated tokens | trained tokens | cumulative reward per "
        "1,000 generated completions |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        cells = []
        for key in ("generation/completions", "generation/tokens", "train/tokens"):
            values = cell_means(results, name, key)
            if not values:  # not recorded in this file
                cells.append("-")
                continue
            interval = format_interval(stats.bootstrap_interval(values, resamples), 1)
            cells.append(f"{sum(values) / len(values):.1f} {interval}")
        completions = sum(cell_means(results, name, "generation/completions")) / len(
            cell_means(results, name, "generation/completions")
        )
        per_thousand = (
            analysis.arms[name].mean / (completions * rounds / 1000) if completions else float("nan")
        )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {per_thousand:.2f} |")
    return lines


def _line(lines: list[str], c: Comparison | None, what: str) -> None:
    if c is None:
        return
    word = verdict_words(c)
    holm = f"; Holm p = {format_p(c.holm_p)}" if c.preregistered else " (exploratory, unadjusted)"
    lines.append(f"- {what}: {c.a} vs {c.b} {word}; {describe(c)}{holm}.")


def answer_v3(results: dict[str, Any], analysis: Analysis) -> list[str]:
    """The v3 answer: the primary (the paper's 4/4 under its semantics against 8/0) and the
    secondaries after Holm over the family, then the exploratory rows, each in plain words."""
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    config = results["config"]
    lines = caveats(config)
    scale = (
        f"{config['tier']}, {config['agents']} agents, {config['rounds']} rounds, G = {config['group_size']}"
    )
    question = (
        "**Does sharing help under the paper's own semantics (4/4@B4: generate 4, train on them "
        "plus 4 from the swarm) against 8/0, and does sharing as backfill?**"
    )
    primary = by_pair.get(V3_PRIMARY)
    if primary is None:
        lines.append(f"{question} Not answerable from this file: 4/4@B4 and 8/0 have no common seed.")
        return lines
    verdict = significant(primary)
    if len(primary.seeds) < 2:
        text = (
            f"**No verdict yet**: 4/4@B4 and 8/0 have {len(primary.seeds)} paired seed so far (a "
            "verdict needs at least 2)."
        )
    elif verdict == "higher":
        text = f"**Yes for 4/4@B4**, at this scale ({scale}): it beat 8/0 at half the generation."
    elif verdict == "lower":
        text = f"**No: 4/4@B4 did worse than 8/0**, at this scale ({scale})."
    else:
        text = f"**Cannot tell for 4/4@B4**, at this scale ({scale}): not significant after Holm."
    course = time_course(results, *V3_PRIMARY, resamples=analysis.resamples)
    if course is not None and len(course.seeds) >= 2 and course.shape == CROSSES:
        text += f" Over the rounds it is not one effect: {shape_words(course)} (time course below)."
    lines.append(f"{question} {text} {describe(primary)}; Holm p = {format_p(primary.holm_p)}.")
    backfill = [by_pair.get(pair) for pair in V3_SECONDARY]
    lines.append("")
    _line(lines, primary, "Primary, the paper's semantics vs the paper's baseline")
    _line(lines, backfill[0], "Secondary, backfill vs the paper's baseline")
    _line(lines, backfill[1], "Secondary, backfill vs over-generation")
    for pair, what in (
        (("4/4", "8/0"), "Exploratory, v2's semantics (generate 8, train on 4 + 4)"),
        (("4/4@B4", "4/4"), "Exploratory, the two semantics of 4/4"),
        (("4/4-is", "4/4"), "Exploratory, importance-corrected external rollouts"),
        (("4/4-decay", "8/0"), "Exploratory, the schedule (J falls to 0)"),
        (("8/0-dyn", "8/0"), "Exploratory, over-generation alone"),
        (("4/4", "4/4-self"), "Exploratory, v2's primary"),
    ):
        _line(lines, by_pair.get(pair), what)
    gains = [(name, by_pair.get((name, "8/0"))) for name in ("4/4@B4", "backfill", "8/0-dyn")]
    cost = [
        f"{name} {format_pct(c.gain)} {format_interval(c.gain_interval, 1, 100)}% ({len(c.seeds)} seeds)"
        for name, c in gains
        if c is not None and len(c.seeds) >= 2
    ]
    if cost:
        lines.append(
            "- Relative differences from 8/0 in cumulative reward (95% bootstrap, seeds as pairs): "
            + ", ".join(cost)
            + "; what each arm generated and trained on is in the compute table above."
        )
    lines += time_course_answer(results, analysis, [*V3_FAMILY, ("4/4", "8/0")])
    lines += ["", "### What this answer does not show (issue #49)", "", *limits_v3(results, analysis)]
    lines += ["", "### What would change this answer", "", seed_advice(primary, analysis.family_size)]
    return lines


def _mean_of(results: dict[str, Any], arm: str, key: str) -> float | None:
    """The mean over an arm's cells of each cell's mean of mechanism curve ``key``."""
    cells = []
    for cell in ((results.get("mechanism") or {}).get(arm) or {}).values():
        series = [v for v in cell.get(key) or [] if v is not None]
        if series:
            cells.append(sum(series) / len(series))
    return sum(cells) / len(cells) if cells else None


def repeated_cells(results: dict[str, Any]) -> str:
    """How many of v3's cells repeat v2's (same arm, settings and seed) and how closely: a
    sentence, empty when v2's file is not there."""
    path = Path(__file__).resolve().parent.parent.parent / DESIGN_OUT["v2"]
    if not path.exists():
        return ""
    v2 = json.loads(path.read_text())["curves"]
    same = total = 0
    first_diff, largest = None, 0.0
    for arm, cells in results["curves"].items():
        for seed, curve in cells.items():
            theirs = (v2.get(arm) or {}).get(seed)
            if theirs is None or len(theirs) != len(curve):
                continue
            total += 1
            if theirs == curve:
                same += 1
                continue
            gaps = [i for i, (x, y) in enumerate(zip(curve, theirs, strict=True)) if x != y]
            first_diff = gaps[0] if first_diff is None else min(first_diff, gaps[0])
            largest = max(largest, max(abs(x - y) for x, y in zip(curve, theirs, strict=True)))
    if not total:
        return ""
    text = (
        f" {total} of v3's cells repeat v2's arm, settings and seed ({DESIGN_OUT['v2']}): {same} "
        "are identical to the digit"
    )
    if same < total:
        text += (
            f", the other {total - same} until round {first_diff + 1} at the earliest and then within "
            f"{largest:.4f} a round (floating-point differences between runs)"
        )
    return text + "; what those arms show in v3 is v2's data read again, not a replication."


def limits_v3(results: dict[str, Any], analysis: Analysis) -> list[str]:
    """What the v3 answer's comparisons cannot separate, and how far its exploratory rows go: the
    caveats an outside review of v3 raised (issue #49), with the file's own figures."""
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    lines = []
    old_b4, old_44 = (
        _mean_of(results, "4/4@B4", "batch/external_age"),
        _mean_of(results, "4/4", "batch/external_age"),
    )
    if old_b4 is not None and old_44 is not None:
        lines.append(
            f"- **The primary changes two things at once.** The pool window counts rollouts, not "
            f"rounds, and 4/4@B4 generates half as many, so its external groups were {old_b4:.2f} "
            f"rounds old against {old_44:.2f} for 4/4. Its loss to 8/0 may be staleness rather than "
            "the paper's semantics; v4's 4/4@B4-age (a window of the same rounds) separates them."
        )
    lines.append(
        "- **Reward per generated completion is arithmetic, not a finding.** Cumulative reward sums "
        "per-round means, so any arm that generates half as much earns about twice the reward per "
        "completion; no v3 arm generates 4 and trains on its own 4 without sharing (v4's 4/0@B4 does)."
    )
    if ("backfill", "8/0") in by_pair:
        lines.append(
            "- **Backfill's gain is not tied to other agents' data by this design.** backfill - 8/0 "
            "mixes dropping zero-advantage groups, adding informative groups and their coming from "
            "other agents; no v3 arm fills from its own replay (v4's backfill-self does)."
        )
    exploratory = [c for c in analysis.comparisons if not c.preregistered]
    if exploratory:
        adjusted = dict(
            zip(
                [(c.a, c.b) for c in exploratory],
                stats.holm([c.p_value for c in exploratory]),
                strict=True,
            )
        )
        rows = [
            f"{a} - {b} p = {format_p(by_pair[(a, b)].p_value)} (Holm over the {len(exploratory)} "
            f"exploratory rows: {format_p(adjusted[(a, b)])})"
            for a, b in (("4/4-is", "8/0"), ("4/4-is", "4/4"), ("4/4-decay", "8/0"))
            if (a, b) in adjusted
        ]
        lines.append(
            "- **Exploratory rows are hypotheses, not findings.** "
            + ("; ".join(rows) + ". " if rows else "")
            + "No divergence between agents was measured, so nothing here shows that own rollouts "
            "matter 'more the longer agents train apart'." + repeated_cells(results)
        )
    clipped = _mean_of(results, "8/0", "grad_norm_clipped")
    lines.append(
        f"- **Regime.** A {results['config']['tier']} model warm-started on the same tasks it trains "
        f"on, {results['config']['max_new_tokens']} new tokens, {results['config']['rounds']} rounds "
        "with the curves still rising"
        + (f"; gradient clipping active in {clipped:.0%} of 8/0's steps" if clipped is not None else "")
        + "; graded partial-credit rewards, so 'zero advantage' means all G rewards exactly equal; "
        "the measure is sampled training reward, not held-out accuracy (v4 measures both)."
    )
    return lines


BATCH_KEYS = (
    ("generation/questions", "generated"),
    ("batch/local_used", "own"),
    ("batch/external_used", "external"),
    ("batch/external_requested", "J asked"),
    ("train/tokens", "trained tokens"),
)


def batch_rows(results: dict[str, Any]) -> list[str]:
    """What each arm's rounds generated and trained on, round by round: per arm and round, the
    mean over seeds of the per-round mean over agents of questions generated, own and external
    groups trained on, external groups asked for, tokens trained on (``swarm-worker
    study-batches``: the check that the arms' batches differ as designed)."""
    mechanism = results.get("mechanism") or {}
    lines = [
        "| arm | round | " + " | ".join(label for _, label in BATCH_KEYS) + " |",
        "|---|---|" + "---|" * len(BATCH_KEYS),
    ]
    for name in order_arms(list(results["config"]["arms"])):
        cells = list((mechanism.get(name) or {}).values())
        if not cells:
            continue
        for r in range(results["config"]["rounds"]):
            values = []
            for key, _ in BATCH_KEYS:
                series = [c[key][r] for c in cells if key in c and c[key][r] is not None]
                values.append(f"{sum(series) / len(series):.2f}" if series else "-")
            lines.append(f"| {name} | {r} | " + " | ".join(values) + " |")
    return lines
