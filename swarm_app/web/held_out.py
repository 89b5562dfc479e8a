"""Held-out accuracy on the campaign page: per tier, arm and evaluation, what the coordinator
scored (coordinator/evaluations.py; the questions: worker/shared/evaluation.py).

The unit rules and intervals are the training reward's (estimates.py): a unit is a control seed
for a control and a *swarm* for the swarm arm (the mean over its evaluated nodes: one swarm's
nodes share a pool, so they count once); an arm's accuracy at an evaluation is the mean over its
units with the 95 % t interval over them (estimates.mean_interval; none from one unit). A node
that passed the evaluation's round without a scored evaluation is counted as ``missing``, never
as a zero. Each evaluation draws fresh questions (the same for every arm): a curve moves with
the draw's difficulty as well as with learning; arms compared at one evaluation are not.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from swarm_app.campaigns.models import Arm, Campaign
from swarm_app.coordinator.models import Evaluation, WorkerNode
from swarm_app.web.estimates import estimate, interval_note
from swarm_app.web.series import ARMS

SERIES_KEYS = ("round", "accuracy", "low", "high", "n", "nodes", "missing", "reward")


def _units(campaign: Campaign) -> dict[tuple[str, str, int], dict[str, dict[str, list[float]]]]:
    """{(tier, arm, round): {unit: {"accuracy": [per node], "reward": [per node]}}} of the scored
    evaluations (a unit: ``swarm:<replicate>`` or ``control:<seed>``)."""
    rows = (
        Evaluation.objects.filter(campaign=campaign, accuracy__isnull=False)
        .values_list(
            "round",
            "accuracy",
            "reward",
            "node__tier",
            "node__arm",
            "node__replicate",
            "node__control_run__seed",
        )
        .order_by("round")
    )
    out: dict[tuple[str, str, int], dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: {"accuracy": [], "reward": []})
    )
    for round, accuracy, reward, tier, arm, replicate, seed in rows:
        unit = f"swarm:{replicate}" if arm == Arm.SWARM else f"control:{seed}"
        values = out[(tier, arm, round)][unit]
        values["accuracy"].append(accuracy)
        values["reward"].append(reward)
    return out


def _missing(
    campaign: Campaign, evaluated: dict[tuple[str, str, int], int]
) -> dict[tuple[str, str, int], int]:
    """{(tier, arm, round): nodes past that round without a scored evaluation of it}."""
    reached = list(WorkerNode.objects.filter(campaign=campaign).values_list("tier", "arm", "round"))
    missing = {}
    for (tier, arm, round), count in evaluated.items():
        passed = sum(1 for t, a, r in reached if t == tier and a == arm and r > round)
        missing[(tier, arm, round)] = max(0, passed - count)
    return missing


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def held_out(campaign: Campaign) -> dict[str, dict[str, dict[str, list]]]:
    """{tier: {arm: {round: [...], accuracy, low, high, n (units), nodes, missing, reward}}}:
    one entry per evaluation with a score, in round order (the chart's series)."""
    units = _units(campaign)
    evaluated = {key: sum(len(v["accuracy"]) for v in by_unit.values()) for key, by_unit in units.items()}
    missing = _missing(campaign, evaluated)
    out: dict[str, dict[str, dict[str, list]]] = {}
    for (tier, arm, round), by_unit in sorted(units.items(), key=lambda item: item[0][2]):
        accuracy = [_mean(values["accuracy"]) for _, values in sorted(by_unit.items())]
        reward = [_mean(values["reward"]) for _, values in sorted(by_unit.items())]
        point = estimate(accuracy, arm)
        series = out.setdefault(tier, {}).setdefault(str(arm), {key: [] for key in SERIES_KEYS})
        for key, value in (
            ("round", round),
            ("accuracy", point["mean"]),
            ("low", point["low"]),
            ("high", point["high"]),
            ("n", len(accuracy)),
            ("nodes", evaluated[(tier, arm, round)]),
            ("missing", missing[(tier, arm, round)]),
            ("reward", _mean(reward)),
        ):
            series[key].append(value)
    return out


def held_out_summary(series: dict[str, dict[str, dict[str, list]]], tier: str) -> dict[str, Any]:
    """summary[tier]["held_out"]: per arm, the accuracy at the latest evaluation every evaluated
    arm of the tier has a score for (so the arms compare on the same questions), with its
    interval, n (units), the evaluated nodes, those missing, and the round; None for an arm
    without one."""
    arms = series.get(tier, {})
    common = set.intersection(*(set(s["round"]) for s in arms.values())) if arms else set()
    result: dict[str, Any] = {}
    for arm in ARMS:
        data = arms.get(str(arm))
        if not common or data is None:
            result[str(arm)] = None
            continue
        at = data["round"].index(max(common))
        entry = {key: data[key][at] for key in SERIES_KEYS}
        entry["note"] = interval_note(entry["n"], arm)
        result[str(arm)] = entry
    return result
