"""The dashboard's rollups, kept current from new RoundMetrics rows.

Why rollups: a campaign of 1,000 workers x 2,000 rounds has two million RoundMetrics rows.
Aggregating them per page view costs seconds (more with the JSON metrics the pool panel needs);
reading per-round aggregates costs milliseconds. So two small tables are maintained:

* :class:`RoundAggregate` per (campaign, arm, tier, round): mean/std/min/max of the verified
  reward across agents, the means of the pool-related metrics, and the mean and std across the
  arm's independent units (a control's seeds; the swarm arm's swarms, each the mean over its
  nodes);
* :class:`AgentBlock` per (campaign, agent, block of BLOCK_ROUNDS rounds): the agent's reward
  sum, from which the summary's bootstrap over agents is drawn.

Both also keep the arms' mechanism metrics (MECHANISM_KEYS: what each arm generated and trained
on, issue #18): per round their mean across agents (``RoundAggregate.metric_means``), per agent
and block their sum and the rounds that reported them (``AgentBlock.metric_sums``), so the
dashboard's mechanism table has an interval over agents like the rewards.

How they stay exact: a refresh finds the RoundMetrics rows added since the last refresh (by id,
above the highest ``source_id`` already aggregated, minus a margin for rows whose transaction
committed late), and *recomputes* every round and block those rows touch from the raw rows,
instead of adding deltas; so a row seen twice is harmless. A refresh runs under a lock
(PostgreSQL advisory lock; SQLite's write lock), so two refreshes never interleave. Rows
rewritten in place (a repeated report of the same round) are picked up when the campaign
finishes, by a full rebuild (lifecycle.py).

Refreshes run on beat (every few seconds), before a dashboard is served, and before each live
push, so in a live campaign each one handles a few seconds' worth of rows. A large backlog (rows
that predate the rollups) is rebuilt by beat, outside the lock.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import connection, transaction
from django.db.models import Avg, Count, ExpressionWrapper, F, FloatField, IntegerField, Max, Min, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from swarm_app.campaigns.models import AgentBlock, Arm, RoundAggregate, RoundMetrics

log = logging.getLogger(__name__)

BLOCK_ROUNDS = 50
MARGIN_IDS = 256  # rows below the watermark re-read each refresh (late commits)
COLD_ROWS = 50_000  # more new rows than this: rebuild the touched campaigns in one pass
CHUNK = 500  # agents per IN (...) list
LOCK_KEY = 0x5A_0D_A5  # PostgreSQL advisory lock id of the refresh


def _metric(key: str) -> Cast:
    return Cast(KT(f"metrics__{key}"), FloatField())


# The arms' mechanism metrics (worker/engine/agent.py's names), kept in the rollups: the
# generation cost of over-generation, the informative groups a step trained on, where the J
# side came from and how old it was, and how often gradient clipping bit.
MECHANISM_KEYS = (
    "generation/questions",
    "batch/informative_groups",
    "batch/external_from_others",
    "batch/external_age",
    "grad_norm_clipped",
    # compute (issue #29): what a round cost to generate and to train on
    "generation/completions",
    "generation/tokens",
    "train/completions",
    "train/tokens",
    "batch/external_requested",
)
# SQL aliases of the keys (annotate() takes identifiers, the keys have slashes)
_ALIASES = {key: f"mech_{index}" for index, key in enumerate(MECHANISM_KEYS)}

ROUND_AGGREGATES = {
    "agents": Count("id"),
    "reward_mean": Avg("reward"),
    "reward_sq": Avg(F("reward") * F("reward")),
    "reward_min": Min("reward"),
    "reward_max": Max("reward"),
    "zero_std_share": Avg(_metric("frac_reward_zero_std")),
    "local_used": Avg(_metric("batch/local_used")),
    "external_used": Avg(_metric("batch/external_used")),
    "source_id": Max("id"),
    **{alias: Avg(_metric(key)) for key, alias in _ALIASES.items()},
}
BLOCK_AGGREGATES = {
    "rounds": Count("id"),
    "reward_sum": Sum("reward"),
    "last_round": Max("round"),
    **{f"{alias}_sum": Sum(_metric(key)) for key, alias in _ALIASES.items()},
    **{f"{alias}_n": Count(_metric(key)) for key, alias in _ALIASES.items()},
}
# A block's reward alone: no JSON read per row (the windows of the time course need no more).
REWARD_BLOCK_AGGREGATES = {key: BLOCK_AGGREGATES[key] for key in ("rounds", "reward_sum", "last_round")}
# What a RoundAggregate holds per (campaign, arm, tier, round), besides its keys and source_id.
AGGREGATE_FIELDS = [
    "agents",
    "reward_mean",
    "reward_std",
    "reward_min",
    "reward_max",
    "zero_std_share",
    "local_used",
    "external_used",
    "metric_means",
    "units",
    "unit_mean",
    "unit_std",
]
BLOCK = ExpressionWrapper(F("round") / BLOCK_ROUNDS, output_field=IntegerField())


def _swarm_units(queryset) -> dict[tuple[str, int], list[float]]:
    """{(tier, round): [each swarm's mean reward over its nodes]} of the swarm arm's rows in
    ``queryset`` (a row whose node is gone counts in swarm 0, as estimates.replicate_of does)."""
    rows = (
        queryset.filter(arm=Arm.SWARM)
        .annotate(swarm=Coalesce("node__replicate", 0))
        .values("tier", "round", "swarm")
        .annotate(mean=Avg("reward"))
        .order_by("tier", "round", "swarm")
    )
    units: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        units[(row["tier"], row["round"])].append(row["mean"])
    return units


def _round_objects(
    campaign_id: int, rows: Iterable[dict[str, Any]], swarm_units: dict[tuple[str, int], list[float]]
) -> list[RoundAggregate]:
    objects = []
    for row in rows:
        variance = max(0.0, row["reward_sq"] - row["reward_mean"] ** 2)
        if row["arm"] == Arm.SWARM:
            means = swarm_units.get((row["tier"], row["round"])) or [row["reward_mean"]]
            units, unit_mean = len(means), sum(means) / len(means)
            unit_std = math.sqrt(sum((m - unit_mean) ** 2 for m in means) / units)
        else:  # a control's agents are its seeds
            units, unit_mean, unit_std = row["agents"], row["reward_mean"], math.sqrt(variance)
        objects.append(
            RoundAggregate(
                campaign_id=campaign_id,
                arm=row["arm"],
                tier=row["tier"],
                round=row["round"],
                agents=row["agents"],
                reward_mean=row["reward_mean"],
                reward_std=math.sqrt(variance),
                reward_min=row["reward_min"],
                reward_max=row["reward_max"],
                zero_std_share=row["zero_std_share"],
                local_used=row["local_used"],
                external_used=row["external_used"],
                metric_means={key: row[alias] for key, alias in _ALIASES.items() if row[alias] is not None},
                units=units,
                unit_mean=unit_mean,
                unit_std=unit_std,
                source_id=row["source_id"],
            )
        )
    return objects


def _block_objects(campaign_id: int, rows: Iterable[dict[str, Any]]) -> list[AgentBlock]:
    return [
        AgentBlock(
            campaign_id=campaign_id,
            agent=row["agent"],
            arm=row["arm"],
            tier=row["tier"],
            block=row["block"],
            rounds=row["rounds"],
            reward_sum=row["reward_sum"],
            last_round=row["last_round"],
            metric_sums={
                key: [row[f"{alias}_sum"], row[f"{alias}_n"]]
                for key, alias in _ALIASES.items()
                if row.get(f"{alias}_n")
            },
        )
        for row in rows
    ]


def _upsert_rounds(objects: list[RoundAggregate]) -> None:
    RoundAggregate.objects.bulk_create(
        objects,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["campaign", "arm", "tier", "round"],
        update_fields=[*AGGREGATE_FIELDS, "source_id"],
    )


def _upsert_blocks(objects: list[AgentBlock]) -> None:
    AgentBlock.objects.bulk_create(
        objects,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["campaign", "agent", "block"],
        update_fields=["arm", "tier", "rounds", "reward_sum", "last_round", "metric_sums"],
    )


def _round_rows(queryset) -> Iterable[dict[str, Any]]:
    return queryset.values("arm", "tier", "round").annotate(**ROUND_AGGREGATES).order_by()


def _block_rows(queryset, aggregates: dict[str, Any] = BLOCK_AGGREGATES) -> Iterable[dict[str, Any]]:
    return (
        queryset.annotate(block=BLOCK)
        .values("agent", "arm", "tier", "block")
        .annotate(**aggregates)
        .order_by()
    )


def blocks_between(
    campaign_id: int, tier: str, start: int, end: int, with_metrics: bool = True
) -> list[AgentBlock]:
    """Each agent's rounds ``start..end-1`` as AgentBlocks (not saved): the stored blocks wholly
    inside the range, and the rounds inside it of the blocks at its edges from the raw rows
    (at most 2 x (BLOCK_ROUNDS - 1) rounds per agent), aggregated exactly as a stored block.
    An agent may have several; their sums add up. Without ``with_metrics`` the raw rows give
    the reward only (their metric_sums stay empty: a fifth of the cost on SQLite)."""
    first = -(-start // BLOCK_ROUNDS)  # the first block wholly inside
    last = end // BLOCK_ROUNDS  # blocks before this one end by ``end``
    raw = RoundMetrics.objects.filter(campaign_id=campaign_id, tier=tier)
    aggregates = BLOCK_AGGREGATES if with_metrics else REWARD_BLOCK_AGGREGATES
    if first >= last:
        return _block_objects(
            campaign_id, _block_rows(raw.filter(round__gte=start, round__lt=end), aggregates)
        )
    stored = AgentBlock.objects.filter(campaign_id=campaign_id, tier=tier, block__gte=first, block__lt=last)
    edges = raw.filter(
        Q(round__gte=start, round__lt=first * BLOCK_ROUNDS) | Q(round__gte=last * BLOCK_ROUNDS, round__lt=end)
    )
    return [*stored, *_block_objects(campaign_id, _block_rows(edges, aggregates))]


def rebuild_campaign(campaign_id: int) -> None:
    """Recompute a campaign's rollups from all its rows (a backlog never seen, a campaign's end).

    The long part (aggregating every row) runs outside the lock, on a consistent bound (rows up
    to the newest id at the start), so reports keep being stored meanwhile, even on SQLite; the
    write and a catch-up of the rows that arrived during it run under the lock.
    """
    top = newest_row()
    rows = RoundMetrics.objects.filter(campaign_id=campaign_id, pk__lte=top)
    round_objects = _round_objects(campaign_id, _round_rows(rows), _swarm_units(rows))
    block_objects = _block_objects(campaign_id, _block_rows(rows))
    with transaction.atomic():
        _lock()
        RoundAggregate.objects.filter(campaign_id=campaign_id).delete()
        AgentBlock.objects.filter(campaign_id=campaign_id).delete()
        _upsert_rounds(round_objects)
        _upsert_blocks(block_objects)
        _catch_up(top, only=campaign_id)


def _recompute(
    campaign_id: int, rounds: dict[tuple[str, str], set[int]], blocks: dict[int, set[str]]
) -> None:
    """Recompute the touched rounds (per arm and tier: the chart index) and agent blocks."""
    rows = RoundMetrics.objects.filter(campaign_id=campaign_id)
    objects = []
    for (arm, tier), numbers in rounds.items():
        touched = rows.filter(arm=arm, tier=tier, round__in=numbers)
        units = _swarm_units(touched) if arm == Arm.SWARM else {}
        objects += _round_objects(campaign_id, _round_rows(touched), units)
    _upsert_rounds(objects)
    block_objects = []
    for block, agents in blocks.items():
        names = sorted(agents)
        for start in range(0, len(names), CHUNK):
            chunk = rows.filter(
                agent__in=names[start : start + CHUNK],
                round__gte=block * BLOCK_ROUNDS,
                round__lt=(block + 1) * BLOCK_ROUNDS,
            )
            block_objects += _block_objects(campaign_id, _block_rows(chunk))
    _upsert_blocks(block_objects)


def _lock() -> None:
    """Serialise refreshes: an advisory lock on PostgreSQL; SQLite's IMMEDIATE transactions
    (settings: transaction_mode) already hold the database's single write lock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])


def watermark() -> int:
    """The highest RoundMetrics id the rollups include."""
    return RoundAggregate.objects.aggregate(mark=Max("source_id"))["mark"] or 0


def newest_row() -> int:
    return RoundMetrics.objects.aggregate(top=Max("id"))["top"] or 0


def _catch_up(after: int, only: int | None = None) -> dict[str, Any]:
    """Recompute what the rows with ids above ``after - MARGIN_IDS`` touch (under the lock).

    The id range is queried on the primary key alone: with a campaign filter, SQLite's planner
    would walk the campaign's whole index instead of the range.
    """
    new = RoundMetrics.objects.filter(pk__gt=max(0, after - MARGIN_IDS)).values_list(
        "campaign_id", "arm", "tier", "round", "agent"
    )
    rounds: dict[int, dict[tuple[str, str], set[int]]] = defaultdict(lambda: defaultdict(set))
    blocks: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    count = 0
    for campaign_id, arm, tier, number, agent in new.iterator(chunk_size=2000):
        if only is not None and campaign_id != only:
            continue
        rounds[campaign_id][(arm, tier)].add(number)
        blocks[campaign_id][number // BLOCK_ROUNDS].add(agent)
        count += 1
    for campaign_id in rounds:
        _recompute(campaign_id, rounds[campaign_id], blocks[campaign_id])
    return {"rows": count, "campaigns": sorted(rounds)}


def rows_after(mark: int) -> int:
    """How many RoundMetrics rows have ids above ``mark``, counting no further than COLD_ROWS + 1.

    Counted, not estimated from ids: ids are not dense (PostgreSQL's sequences skip on rollback
    and never restart), so ``newest id - watermark`` can claim a huge backlog for a handful of
    rows, and a live dashboard would then stop refreshing. The cap bounds the cost of a count
    over a real backlog of millions of rows.
    """
    return RoundMetrics.objects.filter(pk__gt=mark).values("pk")[: COLD_ROWS + 1].count()


def backlog() -> int:
    """RoundMetrics rows not yet in the rollups (up to COLD_ROWS + 1)."""
    return rows_after(watermark())


def refresh_rollups(rebuild: bool = True) -> dict[str, Any]:
    """Bring the rollups up to date with every committed RoundMetrics row; cheap when idle.

    A backlog of more than COLD_ROWS rows (data that predates the rollups) is rebuilt campaign
    by campaign when ``rebuild`` (beat does that); page loads pass ``rebuild=False`` and show
    what is there rather than wait for it.
    """
    mark, top = watermark(), newest_row()
    if top <= mark:
        return {"rows": 0}
    waiting = rows_after(mark)
    if waiting > COLD_ROWS:
        if not rebuild:
            return {"rows": 0, "backlog": waiting}
        campaigns = set(RoundMetrics.objects.filter(pk__gt=mark).values_list("campaign_id", flat=True))
        for campaign_id in sorted(campaigns):
            rebuild_campaign(campaign_id)
        return {"rows": waiting, "rebuilt": sorted(campaigns)}
    with transaction.atomic():
        _lock()
        mark = watermark()
        if newest_row() <= mark:  # another refresh did it while we waited for the lock
            return {"rows": 0}
        return _catch_up(mark)
