"""The validation campaign's markdown report (docs/experiments/platform-validation.md) from
:func:`swarm_app.demo.validation.analyse`'s results: the command, settings and budget, the
platform's and the simulator's gains side by side with n and intervals, the comparison, pool ages
on both sides, the question streams, and where the two are not paired."""

from __future__ import annotations

from typing import Any


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(row: dict[str, Any], digits: int = 2) -> str:
    if row.get("low") is None:
        return "none (fewer than 2 units a side)"
    return f"[{_number(row['low'], digits)}, {_number(row['high'], digits)}]"


def _age_row(label: str, summary: dict[str, Any]) -> str:
    if not summary.get("n"):
        return f"| {label} | 0 | - | - | - | - | - | - |"
    q = summary["quantiles"]
    return (
        f"| {label} | {summary['n']} | {summary['mean']:.2f} | {summary['sd']:.2f} | "
        f"{q['10']:.2f} / {q['50']:.2f} / {q['90']:.2f} | {summary['min']:.2f} .. {summary['max']:.2f} | "
        f"{100 * summary['below_zero']:.1f}% | {', '.join(f'{k}: {v}' for k, v in summary['histogram'].items())} |"
    )


def _memory(memory: dict[str, Any], nodes_per_process: int | None) -> str:
    if not memory:
        return "not measured"
    workers = memory.get("worker_process_peak_mib") or {}
    largest = max(workers.values()) if workers else None
    return (
        f"{_number(largest, 0)} MiB for the largest worker process ({nodes_per_process} nodes), "
        f"{_number(memory.get('control_node_peak_mib'), 0)} MiB for a control node (a process of one "
        f"node), {_number(memory.get('servers_peak_mib'), 0)} MiB for the server and Celery, "
        f"{_number(memory.get('peak_total_mib'), 0)} MiB in all"
    )


def render_markdown(result: dict[str, Any]) -> str:
    """The report (docs/experiments/platform-validation.md): the command, settings and budget,
    the platform's and the simulator's gains side by side with n and intervals, the comparison,
    pool ages on both sides, the question streams, and where the two are not paired."""
    run = result["run"]
    platform, simulator = result["platform"]["gain"], result["simulator"]
    unpaired, paired, comparison = simulator["unpaired"], simulator["paired"], result["comparison"]
    h = result["horizon"]
    smoke = bool(run.get("deviations"))
    lines = [
        "# Platform validation: a campaign against the simulator on study v3's design (issue #50 item 2)",
        "",
    ]
    if smoke:
        lines += [
            "**A smoke run, not the validation**: its sizes differ from v3's ("
            + ", ".join(f"{k} {v[0]} against {v[1]}" for k, v in run["deviations"].items())
            + "), so no conclusion is drawn from its numbers.",
            "",
        ]
    verdict = comparison.get("verdict")
    answer = {
        "consistent": "the platform's gain and the simulator's agree within the intervals "
        "(the 95 % interval of their difference holds 0).",
        "differs": "the platform's gain and the simulator's differ (the 95 % interval of their "
        "difference excludes 0); the pool ages below are the first measured cause to read.",
        None: "no verdict: a side has fewer than 2 units.",
    }[verdict]
    if smoke:
        answer = (
            f"none: a smoke run (the comparison's arithmetic says {verdict or 'nothing'}, about nothing)."
        )
    lines += [
        f"**Answer:** {answer}",
        "",
        "## How it ran",
        "",
        "```bash",
        run.get("command", "python manage.py validation_campaign"),
        "```",
        "",
        f"* Campaign {run.get('campaign')} ({run.get('database')}), state {run.get('state')}; "
        f"{run.get('swarms')} swarms of {run.get('nodes_per_swarm')} nodes (4/4) and "
        f"{run.get('control_seeds')} seeds of the isolated 8/0 control, {run.get('rounds')} rounds, "
        f"{run.get('max_new_tokens')} tokens; {run.get('nodes_per_process')} nodes per worker process "
        f"({run.get('worker_processes')} processes), every control a process of its own.",
        f"* Settings (the campaign's, from v3's results file): {run.get('settings_summary', '-')}.",
        f"* Budget: {_number(run.get('wall_seconds'), 0)} s of wall clock from launch to completion "
        f"({_number(run.get('seconds_per_agent_round'), 2)} s per agent-round over "
        f"{run.get('agent_rounds')} agent-rounds; "
        f"{_number(run.get('steady_seconds_per_agent_round'), 2)} s past the start: from the "
        f"first round's reports to the last), {_number(run.get('cpu_seconds'), 0)} CPU-seconds "
        f"in the child processes, on {run.get('machine', '-')}; then the simulator's reruns "
        f"(below) {_number(run.get('simulator_seconds'), 0)} s.",
        f"* Peak resident memory: {_memory(run.get('memory') or {}, run.get('nodes_per_process'))}.",
        f"* What else ran on the machine: {run.get('beside', 'not recorded')} "
        f"(load average at the start {run.get('load_start', '-')}, at the end {run.get('load_end', '-')}).",
        f"* Code: commit {run.get('commit', '-')}{' (uncommitted changes)' if run.get('dirty') else ''}.",
        "",
        f"## Swarm (4/4) - control (8/0) in cumulative reward per agent, rounds 0-{h - 1} (H = {h})",
        "",
        "| | gain | 95 % interval | % | n (swarm units, control units) | unit | p |",
        "|---|---|---|---|---|---|---|",
        f"| platform | {_number(platform.get('difference'), 3)} | {_interval(platform, 3)} | "
        f"{_number(platform.get('percent'), 1)} | {platform['n'][0]} swarms, {platform['n'][1]} seeds | "
        f"swarm (mean of its nodes) / control node | {_number(platform.get('p'), 3)} (exact permutation) |",
        f"| simulator, unpaired | {_number(unpaired.get('difference'), 3)} | {_interval(unpaired, 3)} | "
        f"{_number(unpaired.get('percent'), 1)} | {unpaired['n'][0]} cells, {unpaired['n'][1]} cells | "
        f"cell (mean of 8 agents) | {_number(unpaired.get('p'), 3)} (exact permutation) |",
        f"| simulator, paired by seed | {_number(paired.get('difference'), 3)} | {_interval(paired, 3)} | - | "
        f"{paired['n']} seeds | seed | {paired.get('above_zero', 0)} of {paired['n']} above 0 |",
        "",
        f"Platform - simulator (unpaired): {_number(comparison.get('difference'), 3)} "
        f"{_interval(comparison, 3)} (t interval from both standard errors, df {comparison.get('df', '-')}): "
        f"**{verdict or 'no verdict'}**.",
        "",
        "Arm means (cumulative reward per agent): platform swarm "
        f"{_number(platform.get('swarm_mean'), 3)}, control {_number(platform.get('control_mean'), 3)}; "
        f"simulator 4/4 {_number(unpaired.get('swarm_mean'), 3)}, 8/0 {_number(unpaired.get('control_mean'), 3)}.",
        "",
        "## Pool age (rounds between a drawn group's round and the drawing agent's)",
        "",
        "| side | n | mean | sd | 10 / 50 / 90 % | range | below 0 | per whole round |",
        "|---|---|---|---|---|---|---|---|",
        _age_row("platform, per draw (agent-round)", result["pool_age"]["platform_per_draw"]),
        _age_row(
            "platform, per round and swarm (mean over its agents)",
            result["pool_age"]["platform_per_round_swarm"],
        ),
        _age_row("platform, oldest group per draw", result["pool_age"]["platform_max_per_draw"]),
        _age_row(
            "simulator, per round and cell (mean over its agents)",
            result["pool_age"]["simulator_per_round_cell"],
        ),
        _age_row(
            "simulator, per draw (agent-round; 4/4 rerun, seeds "
            + (", ".join(str(r["seed"]) for r in result["simulator_reruns"]) or "none")
            + ")",
            result["pool_age"]["simulator_per_draw"],
        ),
        "",
        "The simulator's results file keeps the J side's age per round as the mean over a cell's "
        "8 agents, so its distribution is of swarm-round means; the platform's second row is the "
        "same quantity. The last row reruns 4/4 cells in the simulator with per-agent metrics "
        "(`swarm-worker simulate`, the same settings) for the age per draw. A platform age below "
        "0: the group's generator was ahead in rounds of the node that drew it (asynchronous nodes).",
        "",
    ]
    for rerun in result["simulator_reruns"]:
        if rerun["v3_cumulative"] is None:
            lines.append(
                f"* Rerun of seed {rerun['seed']} ({rerun['agents']} agents): cumulative reward "
                f"{rerun['cumulative']:.3f} over H; not comparable with v3's cell (other settings)."
            )
        else:
            lines.append(
                f"* Rerun of seed {rerun['seed']}: cumulative reward {rerun['cumulative']:.6f} over H, "
                f"v3's cell {rerun['v3_cumulative']:.6f} (largest per-round difference "
                f"{rerun['largest_round_difference']:.6f})."
            )
    lines += [
        "",
        "## Question streams",
        "",
    ]
    streams = run.get("question_streams", {})
    for key, text in sorted(streams.items()):
        lines.append(f"* {key}: {text}")
    lines += [
        "",
        "## Where the platform and the simulator are not paired",
        "",
        "* **Questions.** Platform swarm nodes take consecutive positions of the campaign's one "
        "stream (`ref_at(mix, campaign seed, position)`, in order of arrival, no position twice); "
        'control seed s answers its own stream `stable_seed("control-questions", s)` round by '
        "round (worker/shared/paired.py); simulator agent i of cell seed s answers "
        '`stable_seed(s, i, "questions")`. No question sequence is shared between the two '
        "sides, nor between the platform's swarms and controls: every comparison is unpaired.",
        "* **Pools.** The simulator runs its 8 agents in lockstep: round r draws from the pool as "
        "it stands after every agent's round-r submission (the last 256 rollouts, own excluded). "
        "Platform nodes are asynchronous: a node draws when it submits, from its swarm's last 256 "
        "rollouts by sequence of arrival (own excluded), whatever rounds their generators were "
        "at. The pool ages above measure the difference.",
        "* **Units.** A platform control seed is one node; a simulator 8/0 cell is the mean of 8 "
        "isolated agents, so the platform's control units vary more (same expectation per agent).",
        "* **Sampling seeds.** Generation and batch seeds differ (node ids on the platform, "
        "`stable_seed(seed, index)` in the simulator).",
        "",
        "Reproduce with the command above; the numbers are in "
        f"`{run.get('out', 'docs/experiments/platform-validation.json')}`.",
        "",
    ]
    return "\n".join(lines)
