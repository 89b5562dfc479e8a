"""What the volunteer, node and leaderboard pages show, as plain data (the views render it).

Names: a node is named the same way everywhere, by core.names.node_label (its volunteer's
display name and its short id): these pages, the dashboard's picker and workers table, the export. No page built from here carries a username, an
email or a token (tests/volunteers/ checks the page source).
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet

from swarm_app.campaigns.models import Arm, Campaign, RoundAggregate, RoundMetrics
from swarm_app.coordinator.models import WorkerNode
from swarm_app.core.names import node_label
from swarm_app.volunteers import credit
from swarm_app.volunteers.models import Volunteer
from swarm_app.web.held_out import held_out, node_evaluations
from swarm_app.web.series import ARM_LABELS, ARMS

PAGE_SIZE = 50
CURVE_NODES = 10  # reward curves drawn on a volunteer's page (its most recent nodes)
CURVE_ROUNDS = 5000


def export_line(campaign_id: int) -> str:
    """The command that writes a node's model of this campaign as a Hugging Face directory
    (worker/client/export.py)."""
    return f"swarm-worker export --campaign {campaign_id} --out swarm-model-{campaign_id}"


def volunteer_of(node: WorkerNode) -> Volunteer | None:
    """The volunteer who owns ``node``'s token (None for an organizer's token); ``node`` is
    loaded with select_related("token__owner__volunteer")."""
    owner = node.token.owner
    if owner is None:
        return None
    try:
        return owner.volunteer
    except Volunteer.DoesNotExist:
        return None


def owner_name(node: WorkerNode) -> str:
    volunteer = volunteer_of(node)
    return volunteer.display_name if volunteer is not None else ""


def node_row(node: WorkerNode) -> dict[str, Any]:
    banned = node.state == WorkerNode.State.BANNED
    return {
        "pk": node.pk,
        "campaign_id": node.campaign_id,
        "campaign_name": node.campaign.name,
        "name": node_label(node.node_id, owner_name(node)),
        "volunteer": volunteer_of(node),
        "state": node.state,
        "connected": node.connected,
        "last_seen": node.last_seen,
        "tier": node.tier,
        "rounds": node.accepted_submissions,
        "verified_groups": node.accepted_rollouts,
        "groups_drawn": credit.helpfulness(node)[0],
        "groups_drawn_informative": credit.helpfulness(node)[1],
        # A banned node's credit is frozen and hidden: None, shown as "—".
        "credit": None if banned else credit.credit_of(node),
    }


def paginate(rows: QuerySet | list, page: str | None) -> Page:
    return Paginator(rows, PAGE_SIZE).get_page(page)


def leaderboard(campaign: Campaign, volunteers_page: str | None, nodes_page: str | None) -> dict[str, Any]:
    volunteers = paginate(credit.volunteer_ranking(campaign.pk), volunteers_page)
    nodes = paginate(credit.node_ranking(campaign.pk).select_related("campaign"), nodes_page)
    return {
        "volunteers": volunteers,
        "volunteer_rank_start": volunteers.start_index(),
        "nodes": nodes,
        "node_rows": [node_row(node) for node in nodes],
        "node_rank_start": nodes.start_index(),
    }


def visible_nodes(volunteer: Volunteer, viewer) -> QuerySet[WorkerNode]:
    """A volunteer's nodes a viewer may see: all of them for the volunteer and staff; otherwise
    those of public campaigns, banned ones left out."""
    nodes = WorkerNode.objects.filter(token__owner=volunteer.user).select_related(
        "campaign", "token__owner__volunteer", "helpfulness"
    )
    if not (viewer.is_staff or viewer.pk == volunteer.user_id):
        nodes = nodes.filter(campaign__public=True).exclude(state=WorkerNode.State.BANNED)
    return nodes.order_by("-created_at")


def held_out_curve(node: WorkerNode, series: dict[str, dict[str, dict[str, list]]]) -> dict[str, Any] | None:
    """The node's held-out accuracy per evaluation (held_out.node_evaluations: a skipped one is
    None and listed in ``missing``, never a zero) beside each arm of its tier as the dashboard
    shows it (``series``: held_out.held_out of its campaign; the swarm's mean over its swarms,
    one swarm counting once, and each control's over its seeds, with their 95 % t intervals);
    None when the campaign does not evaluate."""
    config = node.campaign.settings
    if not config.eval_every:
        return None
    own = node_evaluations(node, config.eval_every, config.rounds, node.campaign.is_finished)
    arms = []
    for arm in ARMS:
        data = series.get(node.tier, {}).get(str(arm))
        if not data:
            continue
        n = max(data["n"])
        units = ("swarm" if n == 1 else "swarms") if arm == Arm.SWARM else ("seed" if n == 1 else "seeds")
        label = f"{ARM_LABELS[arm]}{' mean' if arm == Arm.SWARM else ''} ({n} {units})"
        arms.append(
            {"arm": str(arm), "label": label, **{k: data[k] for k in ("round", "accuracy", "low", "high")}}
        )
    return {
        "rounds": own["round"],
        "accuracy": own["accuracy"],
        "missing": [r for r, state in zip(own["round"], own["state"], strict=True) if state == "missing"],
        "arms": arms,
    }


def reward_curves(nodes: list[WorkerNode]) -> list[dict[str, Any]]:
    """Per node: its verified reward by round, beside the swarm's mean of its campaign and tier
    (the dashboard's rollup, campaigns.RoundAggregate), and its held-out accuracy beside its
    tier's arms (:func:`held_out_curve`; None where the campaign does not evaluate)."""
    curves = []
    series: dict[int, dict[str, dict[str, dict[str, list]]]] = {}
    for node in nodes[:CURVE_NODES]:
        if node.campaign_id not in series:
            series[node.campaign_id] = held_out(node.campaign)
        own = list(
            RoundMetrics.objects.filter(campaign_id=node.campaign_id, agent=f"node:{node.node_id}")
            .order_by("round")
            .values_list("round", "reward")[:CURVE_ROUNDS]
        )
        mean = list(
            RoundAggregate.objects.filter(campaign_id=node.campaign_id, arm=Arm.SWARM, tier=node.tier)
            .order_by("round")
            .values_list("round", "reward_mean")[:CURVE_ROUNDS]
        )
        curves.append(
            {
                "name": node_label(node.node_id, owner_name(node)),
                "campaign": node.campaign.name,
                "tier": node.tier,
                "rounds": [r for r, _ in own],
                "reward": [v for _, v in own],
                "swarm_rounds": [r for r, _ in mean],
                "swarm_mean": [v for _, v in mean],
                "held_out": held_out_curve(node, series[node.campaign_id]),
            }
        )
    return curves
