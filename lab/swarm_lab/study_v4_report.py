"""The report of study v4 (issue #49): only what its pre-registered comparisons show.

Reads ``sapo-table-cpu-v4.json`` and, for the cells v4 reruns (8/0, 4/4@B4, backfill, 4/4-is),
v3's file (``config.preregistered.reruns_of``) where v4 has not rerun a cell yet: the simulator
is deterministic, so a rerun's training curve equals v3's to the digit, and the report counts
the reruns that do (and names any that do not).

Statistics, per comparison a - b over the seeds both ran (a seed is the independent unit: every
arm of a seed shares its question streams and its evaluation set):

* d_s = value_s(a) - value_s(b); mean, its 95% percentile bootstrap interval (pairs resampled)
  and its 95% t-interval; relative = sum_s a / sum_s b - 1; seeds with d_s > 0;
* p: the two-sided exact sign-flip test of H0 "a and b are exchangeable within a seed";
  Holm over the pre-registered family (four comparisons), separately over the held-out family;
* a comparison that does not reject reports the smallest mean difference the same test (level
  0.05, unadjusted) would detect with 80% power at its n and the observed sd of d_s
  (``stats.minimum_detectable_effect``): the size of effect the null rules out, roughly.

Plain-words conclusions come from the pre-registered rows at their full n only; exploratory
rows are listed as hypotheses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm_lab.study import (
    V4_EXPLORATORY,
    V4_FAMILY,
    V4_HELD_OUT_FAMILY,
    V4_RERUN_ARMS,
    V4_SEEN_SEEDS,
    seed_key,
)
from swarm_lab.study_analysis import established_side
from worker.shared import stats

REPO = Path(__file__).resolve().parent.parent.parent
FULL_SEEDS = 10  # the pre-registered n


@dataclass
class Paired:
    a: str
    b: str
    seeds: list[int]
    differences: list[float]
    mean: float
    interval: tuple[float, float] | None
    t_interval: tuple[float, float] | None
    relative: float | None
    wins: int
    p: float
    holm_p: float = math.nan
    detectable: float | None = None

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def side(self) -> int:
        return established_side(self.interval, self.t_interval)

    def shown(self, alpha: float = 0.05) -> int:
        """The sign a pre-registered row shows: Holm p <= alpha and both intervals on one side."""
        return self.side if self.holm_p <= alpha else 0


def paired(a: str, b: str, va: dict[int, float], vb: dict[int, float], resamples: int) -> Paired | None:
    seeds = sorted(s for s in va if s in vb)
    if not seeds:
        return None
    xa, xb = [va[s] for s in seeds], [vb[s] for s in seeds]
    d = [x - y for x, y in zip(xa, xb, strict=True)]
    mean = sum(d) / len(d)
    out = Paired(
        a,
        b,
        seeds,
        d,
        mean,
        stats.paired_bootstrap_interval(xa, xb, resamples) if len(d) >= 2 else None,
        stats.t_interval(d),
        sum(xa) / sum(xb) - 1 if sum(xb) else None,
        sum(x > 0 for x in d),
        stats.sign_flip_test(xa, xb).p_value,
    )
    if len(d) >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
        out.detectable = stats.minimum_detectable_effect(sd, len(d))
    return out


def family(rows: list[Paired | None]) -> list[Paired]:
    members = [r for r in rows if r is not None]
    for row, adjusted in zip(members, stats.holm([r.p for r in members]), strict=True):
        row.holm_p = adjusted
    return members


class Data:
    """The v4 results, with v3's cells where v4 has not rerun them yet."""

    def __init__(self, results: dict[str, Any], v3: dict[str, Any] | None) -> None:
        self.results = results
        self.config = results["config"]
        self.v3 = v3
        self.seeds: list[int] = self.config["seeds"]

    def curve(self, arm: str, seed: int) -> tuple[list[float] | None, str]:
        mine = (self.results["curves"].get(arm) or {}).get(seed_key(seed))
        if mine is not None:
            return mine, "v4"
        if self.v3 is not None and arm in V4_RERUN_ARMS:
            theirs = (self.v3["curves"].get(arm) or {}).get(seed_key(seed))
            if theirs is not None:
                return theirs, "v3"
        return None, ""

    def cumulative(self, arm: str) -> dict[int, float]:
        out = {}
        for seed in self.seeds:
            curve, _ = self.curve(arm, seed)
            if curve is not None:
                out[seed] = sum(curve)
        return out

    def sources(self, arm: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for seed in self.seeds:
            _, source = self.curve(arm, seed)
            if source:
                counts[source] = counts.get(source, 0) + 1
        return counts

    def held_out(self, arm: str, key: str = "accuracy", point: int = -1) -> dict[int, float]:
        cells = (self.results.get("held_out") or {}).get(arm) or {}
        return {int(s): cell[key][point] for s, cell in cells.items() if cell.get(key)}

    def points(self) -> list[int]:
        for cells in (self.results.get("held_out") or {}).values():
            for cell in cells.values():
                return list(cell["rounds"])
        return []

    def reruns(self) -> tuple[int, list[str]]:
        """Reruns whose training curve equals v3's, and the cells whose curve does not."""
        same, differ = 0, []
        if self.v3 is None:
            return 0, []
        for arm in V4_RERUN_ARMS:
            for seed_text, curve in (self.results["curves"].get(arm) or {}).items():
                theirs = (self.v3["curves"].get(arm) or {}).get(seed_text)
                if theirs is None:
                    continue
                if theirs == curve:
                    same += 1
                else:
                    differ.append(f"{arm} seed {seed_text}")
        return same, differ

    def mechanism_mean(self, arm: str, key: str) -> Spread:
        values = []
        for cell in ((self.results.get("mechanism") or {}).get(arm) or {}).values():
            series = [v for v in cell.get(key) or [] if v is not None]
            if series:
                values.append(sum(series) / len(series))
        return Spread(values)


@dataclass
class Spread:
    """Per-seed values of one quantity, shown as their mean and 95% t-interval over seeds."""

    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    def text(self, digits: int = 2) -> str:
        if not self.values:
            return "-"
        mean = sum(self.values) / len(self.values)
        t = stats.t_interval(self.values)
        if t is None:
            return f"{mean:.{digits}f} (n={self.n})"
        return f"{mean:.{digits}f} [{t[0]:.{digits}f}, {t[1]:.{digits}f}] (n={self.n})"


def _interval(interval: tuple[float, float] | None, digits: int) -> str:
    return "-" if interval is None else f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def _row(row: Paired, digits: int, seen: str = "") -> str:
    relative = "-" if row.relative is None else f"{row.relative:+.1%}"
    holm = "-" if math.isnan(row.holm_p) else f"{row.holm_p:.3f}"
    detect = "-" if row.detectable is None or row.shown() else f"{row.detectable:.{digits}f}"
    return (
        f"| {row.a} - {row.b}{seen} | {row.mean:+.{digits}f} | {_interval(row.interval, digits)} | "
        f"{_interval(row.t_interval, digits)} | {relative} | {row.wins} of {row.n} | {row.p:.3f} | "
        f"{holm} | {detect} |"
    )


TABLE_HEAD = [
    "| comparison | mean difference | 95% bootstrap | 95% t | relative | first higher | p | Holm p | "
    "detectable (80%) |",
    "|---|---|---|---|---|---|---|---|---|",
]


def _seen(arm_a: str, arm_b: str) -> str:
    seen = max(V4_SEEN_SEEDS.get(arm_a, 0), V4_SEEN_SEEDS.get(arm_b, 0))
    return f" ({seen} seeds seen in v3)" if seen else ""


def conclusion(row: Paired, measure: str, digits: int) -> str:
    """One plain-words sentence for a pre-registered row at its full n."""
    if row.n < FULL_SEEDS:
        return f"- {row.a} - {row.b} ({measure}): {row.n} of {FULL_SEEDS} seeds so far; no conclusion yet."
    interval = _interval(row.interval, digits)
    if row.shown():
        word = "more" if row.mean > 0 else "less"
        return (
            f"- **{row.a} earns {word} {measure} than {row.b}**: {row.mean:+.{digits}f} {interval}"
            f" ({row.relative:+.1%}), {row.wins} of {row.n} seeds higher, Holm p = {row.holm_p:.3f}."
        )
    detect = (
        f"; an effect of about {row.detectable:.{digits}f} would have been detected with 80% power"
        if row.detectable is not None
        else ""
    )
    return (
        f"- {row.a} - {row.b} ({measure}): not shown at n = {row.n} ({row.mean:+.{digits}f} {interval}, "
        f"Holm p = {row.holm_p:.3f}){detect}. This is not evidence that the two are equal."
    )


def write_report(
    results_path: Path, out: Path | None = None, resamples: int = stats.BOOTSTRAP_RESAMPLES
) -> Path:
    results = json.loads(Path(results_path).read_text())
    config = results["config"]
    reruns_of = (config.get("preregistered") or {}).get("reruns_of")
    v3_path = REPO / reruns_of if reruns_of else None
    v3 = json.loads(v3_path.read_text()) if v3_path is not None and v3_path.exists() else None
    data = Data(results, v3)
    out = out or Path(results_path).with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)

    training = family([paired(a, b, data.cumulative(a), data.cumulative(b), resamples) for a, b in V4_FAMILY])
    held = family(
        [paired(a, b, data.held_out(a), data.held_out(b), resamples) for a, b in V4_HELD_OUT_FAMILY]
    )
    exploratory = [
        row
        for a, b in V4_EXPLORATORY
        if (row := paired(a, b, data.cumulative(a), data.cumulative(b), resamples)) is not None
    ]
    points = data.points()
    same, differ = data.reruns()
    images = _plots(data, out.with_suffix(""), points)

    lines = [
        f"# Study v4 at CPU scale ({config['tier']}): one control per question, held-out accuracy",
        "",
        f"Generated by `swarm-worker study-report {results_path}`; regenerate it rather than editing "
        "it. Issue #49. The design and every comparison below were committed in "
        "worker/research/study.py before the first v4 data (docs/experiments/README.md gives both "
        "commits).",
        "",
        "## Status",
        "",
        f"- Cells: {config.get('cells_done', 0)} of {config.get('cells_total', 0)} run"
        + (" (complete)." if config.get("complete") else "; the study is still running."),
        f"- Reruns of v3's cells: {same} equal v3's training curve to the digit"
        + (f"; **{len(differ)} differ**: {', '.join(differ)}." if differ else ", none differs."),
    ]
    for arm in ("8/0", "4/4@B4", "backfill", "4/4-is"):
        sources = data.sources(arm)
        if sources.get("v3"):
            lines.append(
                f"- {arm}: training reward from {sources.get('v4', 0)} v4 cell(s) and {sources['v3']} "
                "of v3's (not rerun yet; each rerun is compared with v3's cell above)."
            )
    lines += ["", "## Setup", ""]
    lines += [
        f"- Each cell (arm, seed): {config['agents']} agents from the same weights, B = "
        f"{config['questions_per_round']} questions a round (the @B4 arms 4), G = {config['group_size']}, "
        f"at most {config['max_new_tokens']} new tokens, {config['rounds']} rounds, learning rate "
        f"{config['learning_rate']}, pool window {config['pool_window']} rollouts, tasks `{config['tasks']}`.",
        "- Arms: "
        + "; ".join(f"`{name}`: {text}" for name, text in (config.get("arm_semantics") or {}).items())
        + ".",
        f"- Seeds {config['seeds']}, the same for every arm: a seed fixes every agent's question stream, "
        "sampling seeds and evaluation set, so arms pair by seed.",
        f"- Held-out: {config.get('held_out_per_task')} questions per task and seed, from evaluation seeds "
        f"no training stream reaches, answered greedily by every agent at rounds {points}; accuracy = "
        "share answered exactly right (the verifier's full score), reward = graded (partial credit).",
    ]
    lines += _provenance(config)
    lines += ["", "## Pre-registered: cumulative training reward (Holm over these four)", ""]
    lines += [
        "Cumulative reward = sum over rounds of the mean over agents of each agent's mean verified "
        "reward on its own first B x G completions (sampled at temperature 1); v3's measure.",
        "",
        *TABLE_HEAD,
        *[_row(row, 2, _seen(row.a, row.b)) for row in training],
    ]
    last = points[-1] if points else None
    lines += ["", f"## Pre-registered: held-out accuracy at round {last} (Holm over these four)", ""]
    lines += [*TABLE_HEAD, *[_row(row, 3, _seen(row.a, row.b)) for row in held]]
    lines += ["", "Does the training-reward ordering hold on held-out accuracy?", ""]
    by_pair = {(r.a, r.b): r for r in held}
    for row in training:
        other = by_pair.get((row.a, row.b))
        if other is None:
            lines.append(f"- {row.a} - {row.b}: no held-out pairs yet.")
            continue
        same_sign = math.copysign(1, row.mean) == math.copysign(1, other.mean)
        lines.append(
            f"- {row.a} - {row.b}: training {row.mean:+.2f}, held-out {other.mean:+.3f}: "
            + ("the same sign" if same_sign else "opposite signs")
            + ("" if other.shown() else " (held-out difference not shown at its n)")
            + "."
        )
    lines += ["", "## Held-out accuracy and reward by arm and round", ""]
    lines += _held_out_table(data, points)
    lines += ["", "## Exploratory (unadjusted p; hypotheses, not findings)", ""]
    lines += [*TABLE_HEAD, *[_row(row, 2) for row in exploratory]]
    lines += ["", "## Mechanism", ""]
    lines += _mechanism(data, points)
    lines += ["", "## Regime: what these results can and cannot speak to", ""]
    lines += _regime(data)
    lines += ["", "## In plain words (pre-registered rows only)", ""]
    lines += [conclusion(row, "training reward", 2) for row in training]
    lines += [conclusion(row, "held-out accuracy", 3) for row in held]
    lines += ["", "## Plots", ""]
    lines += [f"![{path.stem}]({path.name})" for path in images]
    out.write_text("\n".join(lines) + "\n")
    return out


def _provenance(config: dict[str, Any]) -> list[str]:
    cells = config.get("cells") or {}
    commits: dict[str, int] = {}
    dirty = 0
    models: set[str] = set()
    for cell in cells.values():
        provenance = cell.get("provenance") or {}
        commit = (provenance.get("commit") or "unknown")[:12]
        commits[commit] = commits.get(commit, 0) + 1
        dirty += provenance.get("diff_sha256") is not None
        if provenance.get("model_sha256"):
            models.add(provenance["model_sha256"][:16])
    seconds = sum(cell.get("seconds", 0.0) for cell in cells.values())
    return [
        "- Provenance: "
        + ", ".join(f"{n} cell(s) from {commit}" for commit, n in commits.items())
        + f"; {dirty} from a tree with uncommitted changes; model weights SHA-256 "
        + (", ".join(sorted(models)) or "unknown")
        + f"; {len(config.get('runs') or [])} run(s) (config.runs).",
        f"- Compute: {seconds / 60:.1f} process-minutes over {len(cells)} cells "
        f"({config.get('seconds_per_agent_round', 0)} s per agent-round and process, one torch thread; "
        f"{config.get('machine', 'unknown machine')}; other work shared the machine, so per-cell "
        "times are upper bounds).",
    ]


def _held_out_table(data: Data, points: list[int]) -> list[str]:
    arms = [a for a in data.config["arms"] if data.held_out(a)]
    if not arms:
        return ["No held-out cells yet."]
    lines = [
        "Mean over seeds of each cell's mean over its agents, with the 95% t-interval over seeds (n = seeds).",
        "",
        "| arm | " + " | ".join(f"accuracy @ {p}" for p in points) + f" | graded reward @ {points[-1]} |",
        "|---|" + "---|" * (len(points) + 1),
    ]
    for arm in arms:
        cells = [Spread(list(data.held_out(arm, "accuracy", k).values())).text(3) for k in range(len(points))]
        reward = Spread(list(data.held_out(arm, "reward").values())).text(3)
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {reward} |")
    return lines


MECHANISM_ROWS = [
    ("external groups trained on", "batch/external_used"),
    ("of them from other agents", "batch/external_from_others"),
    ("age of external groups (rounds)", "batch/external_age"),
    ("informative own groups trained on", "batch/local_informative"),
    ("own groups with zero advantage (share)", "frac_reward_zero_std"),
    ("generated completions", "generation/completions"),
    ("steps clipped (share)", "grad_norm_clipped"),
    ("IS ratio, mean", "sampling/external_importance_sampling_ratio/mean"),
    ("IS ratio, min", "sampling/external_importance_sampling_ratio/min"),
    ("IS ratio, max", "sampling/external_importance_sampling_ratio/max"),
    ("IS ratios truncated (share)", "sampling/external_importance_sampling_truncated"),
]


def _mechanism(data: Data, points: list[int]) -> list[str]:
    arms = [a for a in data.config["arms"] if (data.results.get("mechanism") or {}).get(a)]
    lines = [
        "Per arm: the mean over seeds of each cell's mean over rounds and agents, 95% t-interval over "
        "seeds. IS rows: 4/4-is's importance weights of external tokens (others' policy / its own).",
        "",
        "| metric | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for label, key in MECHANISM_ROWS:
        cells = [data.mechanism_mean(a, key).text() for a in arms]
        if all(c == "-" for c in cells):
            continue
        lines.append(f"| {label} (`{key}`) | " + " | ".join(cells) + " |")
    if points:
        lines += [
            "",
            "Divergence between agents (mean KL over ordered pairs) and drift from the initial policy "
            "(mean KL), nats per answer token on the evaluation prompts (worker/research/held_out.py):",
            "",
            "| arm | "
            + " | ".join(f"divergence @ {p}" for p in points[1:])
            + " | "
            + " | ".join(f"drift @ {p}" for p in points[1:])
            + " |",
            "|---|" + "---|" * (2 * (len(points) - 1)),
        ]
        for arm in [a for a in data.config["arms"] if data.held_out(a)]:
            div = [
                Spread(list(data.held_out(arm, "divergence", k).values())).text(4)
                for k in range(1, len(points))
            ]
            drift = [
                Spread(list(data.held_out(arm, "drift", k).values())).text(4) for k in range(1, len(points))
            ]
            lines.append(f"| {arm} | " + " | ".join(div + drift) + " |")
    return lines


def _regime(data: Data) -> list[str]:
    clipped = [v for a in data.config["arms"] for v in data.mechanism_mean(a, "grad_norm_clipped").values]
    slopes = []
    for arm in data.config["arms"]:
        for seed in data.seeds:
            curve, _ = data.curve(arm, seed)
            if curve:
                third = len(curve) // 3
                slope = stats.least_squares_slope(range(third), curve[-third:])
                if slope is not None:
                    slopes.append(slope)
    rising = sum(s > 0 for s in slopes)
    clip_text = f"{min(clipped):.0%}-{max(clipped):.0%}" if clipped else "unknown"
    build = data.config.get("model_build") or {}
    size = f"{build['params'] / 1e6:.2f} M parameters, " if build.get("params") else ""
    return [
        f"- A {data.config['tier']} model ({size}the project's own build, warm-started on the "
        f"tasks it trains on), {data.config['max_new_tokens']} new tokens, {data.config['rounds']} rounds, "
        f"{data.config['agents']} agents. The training curves still rise at the end ({rising} of "
        f"{len(slopes)} cells have a positive slope over their last third): later rounds could "
        "order the arms differently.",
        f"- Gradient clipping (max norm 1) is active in {clip_text} of steps per cell: every arm's "
        "step has about the same length, so arms differ mainly in the direction of their steps.",
        "- Rewards are graded (partial credit): a group has zero advantage only when all G rewards "
        "are exactly equal, so the filter drops fewer groups than with 0/1 rewards.",
        "- Training reward is sampled (temperature 1) on each round's own questions; held-out accuracy "
        "is greedy on a fixed set no agent trains on. Neither is the SAPO paper's setting "
        "(Qwen2.5-0.5B, 2000 rounds); nothing here predicts what happens at that scale.",
    ]


def _plots(data: Data, stem: Path, points: list[int]) -> list[Path]:
    """Held-out accuracy and divergence over the evaluation points, per arm (means over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in data.config["arms"] if data.held_out(a)]
    if not arms or not points:
        return []
    paths = []
    for key, label in (("accuracy", "held-out accuracy"), ("divergence", "divergence between agents (KL)")):
        figure, axis = plt.subplots(figsize=(7, 4))
        for arm in arms:
            means, lows, highs = [], [], []
            for k in range(len(points)):
                values = list(data.held_out(arm, key, k).values())
                mean = sum(values) / len(values)
                t = stats.t_interval(values) or (mean, mean)
                means.append(mean)
                lows.append(t[0])
                highs.append(t[1])
            axis.plot(points, means, marker="o", label=arm)
            axis.fill_between(points, lows, highs, alpha=0.12)
        axis.set_xlabel("round")
        axis.set_ylabel(label)
        axis.legend(fontsize=8)
        figure.tight_layout()
        path = stem.parent / f"{stem.name}-{key}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths
