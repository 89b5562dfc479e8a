"""What the validation campaign reads from the coordinator's database: every agent's verified
reward and J-side age per round (RoundMetrics, as the nodes reported them and the coordinator
re-scored them), and a check that the questions leased were the streams the design says."""

from __future__ import annotations

from collections import Counter
from typing import Any

from swarm_app.campaigns.models import Arm, Campaign, RoundMetrics
from swarm_app.coordinator.models import Lease, WorkerNode
from swarm_app.demo.validation import Row
from worker.shared.paired import control_stream, round_refs
from worker.shared.questions import QuestionRef, ref_at


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def campaign_rows(campaign: Campaign) -> list[Row]:
    """One :class:`~swarm_app.demo.validation.Row` per RoundMetrics row of ``campaign``: a swarm
    node's unit is its swarm (``swarm:<replicate>``), a control's its seed (``seed:<seed>``)."""
    replicates = dict(WorkerNode.objects.filter(campaign=campaign).values_list("pk", "replicate"))
    rows = []
    query = RoundMetrics.objects.filter(campaign=campaign).select_related("control_run")
    for metrics in query.order_by("agent", "round").iterator():
        if metrics.arm == Arm.SWARM:
            unit = f"swarm:{replicates.get(metrics.node_id, 0)}"
        else:
            unit = f"seed:{metrics.control_run.seed}" if metrics.control_run else metrics.agent
        reported = metrics.metrics or {}
        rows.append(
            Row(
                arm=metrics.arm,
                unit=unit,
                agent=metrics.agent,
                round=metrics.round,
                reward=metrics.reward,
                age=_number(reported.get("batch/external_age")),
                age_max=_number(reported.get("batch/external_age_max")),
            )
        )
    return rows


def question_streams(campaign: Campaign) -> dict[str, int]:
    """Whether the submitted leases asked what the design says: each control's round r the first
    B positions of its seed's paired stream (paired.round_refs over control_stream(seed)); each
    swarm lease positions of the campaign's stream (ref_at over the campaign's seed), no position
    answered twice. Counts: leases per side, those off their stream, positions repeated."""
    config = campaign.settings
    leases = Lease.objects.filter(campaign=campaign, state=Lease.State.SUBMITTED).select_related(
        "node__control_run"
    )
    counts = Counter(control_leases=0, control_off_stream=0, swarm_leases=0, swarm_off_stream=0)
    positions: Counter[int] = Counter()
    for lease in leases.iterator():
        refs = [QuestionRef.from_json(ref) for ref in lease.questions]
        run = lease.node.control_run
        if lease.node.arm != Arm.SWARM and run is not None:
            counts["control_leases"] += 1
            expected = round_refs(config.mix, control_stream(run.seed), lease.round, len(refs))
            counts["control_off_stream"] += refs != expected
        else:
            counts["swarm_leases"] += 1
            counts["swarm_off_stream"] += any(
                ref != ref_at(config.mix, config.seed, ref.index) for ref in refs
            )
            positions.update(ref.index for ref in refs)
    counts["swarm_positions"] = len(positions)
    counts["swarm_positions_repeated"] = sum(1 for count in positions.values() if count > 1)
    return dict(counts)


def stream_words(counts: dict[str, int], campaign_seed: int) -> dict[str, str]:
    """:func:`question_streams`' counts in the report's words, per side."""
    return {
        "controls": (
            f"{counts['control_leases']} submitted leases, {counts['control_off_stream']} not their "
            "seed's paired stream (round r: positions rB .. rB + B - 1 of "
            "stable_seed('control-questions', seed))"
        ),
        "swarm": (
            f"{counts['swarm_leases']} submitted leases, {counts['swarm_off_stream']} with a question "
            f"off the campaign's stream (seed {campaign_seed}); {counts['swarm_positions_repeated']} "
            f"of {counts['swarm_positions']} positions answered more than once"
        ),
    }
