"""Credit: what a node's verified work earned, from counters the coordinator keeps as it works.

    credit = verified groups + completed rounds + groups drawn by others + informative groups drawn

* **verified groups** (``WorkerNode.accepted_rollouts``): groups of G completions the coordinator
  re-scored and accepted into the pool; a submission counts once, when its lease is claimed.
* **completed rounds** (``accepted_submissions``): rounds whose submission was accepted (one lease,
  so at most one accepted submission, per node and round).
* **groups drawn by others** (``NodeCredit.groups_drawn``): times another node's pool draw gave it one of
  this node's groups to train on.
* **informative groups drawn** (``groups_drawn_informative``): of those, groups whose completions
  did not all score the same (a non-zero GRPO advantage: the group taught the drawer something).

The counters move only inside the transactions that accept a submission
(coordinator/submissions.py) and draw from the pool (coordinator/pool.py), on PostgreSQL in the
statements themselves (coordinator/sql.py). Rejected, duplicate, replayed or inflated
submissions move none of them; a draw credits at most the drawer's last accepted round's J
(``draw_allowance``), so asking the pool again and again credits nobody. A banned node's
counters stop where they were, and it is left out of every total and leaderboard (its credit is
hidden). Nothing here reads history: a page reads the counters.
"""

from __future__ import annotations

from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import Coalesce

from swarm_app.campaigns.models import Arm
from swarm_app.coordinator.models import NodeCredit, WorkerNode

GROUPS_DRAWN = Coalesce(F("helpfulness__groups_drawn"), 0)
INFORMATIVE_DRAWN = Coalesce(F("helpfulness__groups_drawn_informative"), 0)
CREDIT = F("accepted_rollouts") + F("accepted_submissions") + GROUPS_DRAWN + INFORMATIVE_DRAWN


def helpfulness(node: WorkerNode) -> tuple[int, int]:
    """(groups drawn by others, of them informative) of one node: its NodeCredit row, (0, 0)
    before its first accepted round."""
    try:
        row = node.helpfulness
    except NodeCredit.DoesNotExist:
        return 0, 0
    return row.groups_drawn, row.groups_drawn_informative


def credit_of(node: WorkerNode) -> int:
    """The credit of one node (as :data:`CREDIT`), from its loaded counters."""
    return node.accepted_rollouts + node.accepted_submissions + sum(helpfulness(node))


def counted_nodes(**filters) -> QuerySet[WorkerNode]:
    """Nodes whose credit counts: volunteers' (no campaign control), not banned."""
    return WorkerNode.objects.filter(arm=Arm.SWARM, **filters).exclude(state=WorkerNode.State.BANNED)


def node_ranking(campaign_id: int) -> QuerySet[WorkerNode]:
    """A campaign's nodes by credit, highest first (banned ones left out)."""
    return (
        counted_nodes(campaign_id=campaign_id)
        .annotate(credit=CREDIT)
        .select_related("token__owner__volunteer", "helpfulness")
        .order_by("-credit", "pk")
    )


def volunteer_ranking(campaign_id: int) -> QuerySet:
    """A campaign's volunteers by the credit of their counted nodes: rows of ``volunteer_id``
    (the Volunteer's pk), ``display_name``, ``credit``, ``nodes`` and ``rounds``."""
    return (
        counted_nodes(campaign_id=campaign_id, token__owner__volunteer__isnull=False)
        .values(
            volunteer_id=F("token__owner__volunteer__pk"),
            display_name=F("token__owner__volunteer__display_name"),
        )
        .annotate(
            total=Sum(CREDIT),
            nodes=Count("pk"),
            rounds=Sum("accepted_submissions"),
        )
        .order_by("-total", "display_name")
    )


def volunteer_credit(user_id: int) -> int:
    """A volunteer's credit over every campaign (banned nodes left out)."""
    total = counted_nodes(token__owner_id=user_id).aggregate(total=Sum(CREDIT))["total"]
    return int(total or 0)
