"""Held-out accuracy on the campaign page: per tier, arm and evaluation, what the coordinator
scored (coordinator/evaluations.py; the questions: worker/shared/evaluation.py).

The unit rules and intervals are the training reward's (estimates.py): a unit is a control seed
for a control and a *swarm* for the swarm arm (the mean over its evaluated nodes: one swarm's
nodes share a pool, so they count once); an arm's accuracy at an evaluation is the mean over its
units with the 95 % t interval over them (estimates.mean_interval; none from one unit). A node
that went on past the evaluation's round without a scored evaluation (or stopped there once the
campaign had finished) is counted as ``missing`` (:func:`missed`), never as a zero. Each
evaluation draws fresh questions (the same for every arm): a curve moves with the draw's
difficulty as well as with learning; arms compared at one evaluation are not.

The swarm's difference from each control at that evaluation (``difference``: accuracy points,
Welch's t interval over swarms and seeds, the exact permutation test's p and the smallest p its
design can give) is what the run page's verdict judges (run_info.py), as it judges the training
reward's gain.

A node's own curve (the volunteer's and the node's pages, swarm_app/volunteers/pages.py):
:func:`node_evaluations`.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import variance
from typing import Any

from swarm_app.campaigns.models import Arm, Campaign
from swarm_app.coordinator.models import Evaluation, WorkerNode
from swarm_app.web.estimates import CONFIDENCE, PAGE_PERMUTATIONS, estimate, interval_note
from swarm_app.web.series import ARMS, NO_INTERVAL, ONE_SWARM_GAIN
from worker.shared import stats
from worker.shared.evaluation import eval_rounds

# units: each unit's accuracy at the evaluation (the swarms', or the seeds'); questions: how many
# each node answered (every task's eval_questions)
SERIES_KEYS = ("round", "accuracy", "low", "high", "n", "nodes", "missing", "reward", "units", "questions")


def missed(node_round: int, eval_round: int, finished: bool) -> bool:
    """Whether a node whose next round is ``node_round`` missed the evaluation after
    ``eval_round`` if it has no score for it: it went on to report a later round (the coordinator
    no longer takes that evaluation), or it stopped right after that round and the campaign is
    over. A node that has just reported the round may still be answering: not missing yet."""
    return node_round > eval_round + 1 or (finished and node_round == eval_round + 1)


def _units(campaign: Campaign) -> dict[tuple[str, str, int], dict[str, dict[str, list[float]]]]:
    """{(tier, arm, round): {unit: {"accuracy": [per node], "reward": [per node]}}} of the scored
    evaluations (a unit: ``swarm:<replicate>`` or ``control:<seed>``)."""
    rows = (
        Evaluation.objects.filter(campaign=campaign, accuracy__isnull=False)
        .values_list(
            "round",
            "accuracy",
            "reward",
            "n",
            "node__tier",
            "node__arm",
            "node__replicate",
            "node__control_run__seed",
        )
        .order_by("round")
    )
    out: dict[tuple[str, str, int], dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: {"accuracy": [], "reward": [], "questions": []})
    )
    for round, accuracy, reward, questions, tier, arm, replicate, seed in rows:
        unit = f"swarm:{replicate}" if arm == Arm.SWARM else f"control:{seed}"
        values = out[(tier, arm, round)][unit]
        values["accuracy"].append(accuracy)
        values["reward"].append(reward)
        values["questions"].append(questions)
    return out


def _missing(
    campaign: Campaign, evaluated: dict[tuple[str, str, int], int]
) -> dict[tuple[str, str, int], int]:
    """{(tier, arm, round): nodes of that tier and arm without a score for that evaluation that
    missed it (:func:`missed`)}, for each evaluation with a score."""
    scored = set(
        Evaluation.objects.filter(campaign=campaign, accuracy__isnull=False).values_list("node_id", "round")
    )
    nodes: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for pk, tier, arm, reached in WorkerNode.objects.filter(campaign=campaign).values_list(
        "pk", "tier", "arm", "round"
    ):
        nodes[(tier, arm)].append((pk, reached))
    finished = campaign.is_finished
    return {
        (tier, arm, round): sum(
            1
            for pk, reached in nodes[(tier, arm)]
            if (pk, round) not in scored and missed(reached, round, finished)
        )
        for tier, arm, round in evaluated
    }


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
            ("units", accuracy),
            ("questions", max(q for values in by_unit.values() for q in values["questions"])),
        ):
            series[key].append(value)
    return out


def held_out_summary(series: dict[str, dict[str, dict[str, list]]], tier: str) -> dict[str, Any]:
    """summary[tier]["held_out"]: per arm, the accuracy at the latest evaluation every evaluated
    arm of the tier has a score for (so the arms compare on the same questions), with its
    interval, n (units), the evaluated nodes, those missing, and the round; for each control
    with the swarm beside it, the swarm's ``difference`` from it (:func:`difference`); None for
    an arm without one."""
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
    swarm = result.get(str(Arm.SWARM))
    for arm in ARMS[1:]:
        if swarm is not None and result[str(arm)] is not None:
            result[str(arm)]["difference"] = difference(swarm["units"], result[str(arm)]["units"])
    return result


def difference(swarms: list[float], seeds: list[float]) -> dict[str, Any]:
    """The swarm's held-out accuracy minus a control's at one evaluation, in accuracy points (an
    absolute difference: a control's accuracy may be 0), from the swarms' and the seeds'
    accuracies: Welch's t interval (stats.welch_interval; none with one swarm or one seed, and
    a note saying why), both n, the exact permutation test's two-sided p over the same units and
    ``min_p``, the smallest p that test can give with these n (as estimates.gain_row)."""
    n_a, n_b = len(swarms), len(seeds)
    value = _mean(swarms) - _mean(seeds)
    interval = None
    if n_a >= 2 and n_b >= 2:
        interval = stats.welch_interval(
            _mean(swarms), variance(swarms), n_a, _mean(seeds), variance(seeds), n_b, CONFIDENCE
        )
    note = ONE_SWARM_GAIN if n_a < 2 else NO_INTERVAL if n_b < 2 else None
    return {
        "value": value,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
        "n": [n_a, n_b],
        "note": note,
        "p": stats.permutation_test(swarms, seeds, PAGE_PERMUTATIONS).p_value,
        "min_p": stats.permutation_min_p(n_a, n_b),
    }


def node_evaluations(node: WorkerNode, every: int, rounds: int, finished: bool) -> dict[str, list]:
    """One node's held-out curve: per evaluation of the cadence (every ``every`` rounds of
    ``rounds``, and the last) whose round the node has reported, ``round``, its ``accuracy`` (None
    where it has no score) and ``state``: "scored", "missing" (:func:`missed`: shown as missing,
    never as a zero) or "pending" (it may still answer)."""
    scores = dict(
        Evaluation.objects.filter(node=node, accuracy__isnull=False).values_list("round", "accuracy")
    )
    out: dict[str, list] = {"round": [], "accuracy": [], "state": []}
    for number in eval_rounds(every, rounds):
        if number >= node.round:
            break
        score = scores.get(number)
        out["round"].append(number)
        out["accuracy"].append(score)
        if score is not None:
            out["state"].append("scored")
        else:
            out["state"].append("missing" if missed(node.round, number, finished) else "pending")
    return out
