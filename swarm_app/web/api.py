"""Read-only JSON/CSV endpoints: the dashboard's first load, the run section's words, one
agent's curve, one node's held-out evaluations (which ``swarm-worker export`` puts in its model
card), the status counts, and the per-round metrics export (documented in docs/web.md).

The export streams: rows are read in id order, 2,000 at a time, through an async iterator, so
a two-million-row campaign is never held in memory (under ASGI, Django buffers whole sync
iterators; an async one is sent as it is produced).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from swarm_app.campaigns.models import Campaign, RoundAggregate, RoundMetrics
from swarm_app.campaigns.rollups import AGGREGATE_FIELDS, MECHANISM_KEYS
from swarm_app.coordinator.models import Evaluation, WorkerNode
from swarm_app.coordinator.tokens import authenticate
from swarm_app.core.names import control_label, node_label
from swarm_app.web import dashboard, run_info, status_tables
from swarm_app.web.views import get_visible, visible_campaigns
from worker.shared.protocol import ProtocolError

PAGE = 2000
# seed: a control run's seed (empty for nodes); swarm: a node's swarm, 0..R-1 (empty for controls);
# name: the agent's one name (core.names), as the pages and the dashboard's picker give it
FIXED = ["campaign", "arm", "tier", "agent", "round", "reward", "created_at", "seed", "swarm", "name"]
# The held-out evaluation scored after the agent's round (coordinator/evaluations.py), empty
# where none was: after the metrics' columns in the CSV, so that no older column moves.
EVAL_COLUMNS = ["eval/accuracy", "eval/reward"]
# The rollups' columns: metric_means (one CSV column per mechanism key) and then the arm's
# independent units, added after every older column so that none moves.
UNIT_FIELDS = ["units", "unit_mean", "unit_std"]
ROUND_FIELDS = ["arm", "tier", "round", *(f for f in AGGREGATE_FIELDS if f not in UNIT_FIELDS), *UNIT_FIELDS]
MEANS_AT = ROUND_FIELDS.index("metric_means")
# A spreadsheet reads a cell starting with one of these as a formula (tab and CR: some strip
# them first): OWASP's list against CSV injection.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@require_GET
def dashboard_json(request: HttpRequest, pk: int) -> JsonResponse:
    campaign = get_visible(request, pk)
    return JsonResponse(dashboard.dashboard_payload(campaign))


@require_GET
def run_json(request: HttpRequest, pk: int) -> JsonResponse:
    """The run section's words (run_info.run_info) from the tables the page's socket pushes
    (dashboard.cached_tables): static/campaigns/run.js asks for it when new tables arrive."""
    campaign = get_visible(request, pk)
    return JsonResponse(run_info.run_info(dashboard.cached_tables(campaign.pk)))


@require_GET
def agent_json(request: HttpRequest, pk: int) -> JsonResponse:
    campaign = get_visible(request, pk)
    agent = request.GET.get("agent", "")
    if not agent or len(agent) > 80:
        return JsonResponse({"error": "give ?agent=node:<id> or control:<id>"}, status=400)
    return JsonResponse(dashboard.agent_series(campaign, agent))


def _bearer(request: HttpRequest) -> str:
    """The secret of an ``Authorization: Bearer <secret>`` header, "" without one."""
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    return secret.strip() if scheme.lower() == "bearer" else ""


@require_GET
def evaluations_json(request: HttpRequest, pk: int) -> JsonResponse:
    """``?agent=node:<id>``: the node's held-out evaluations as the coordinator scored them
    (coordinator/evaluations.py), scored ones only, in round order. Visible as the campaign's
    pages are (a public campaign's nodes, banned ones left out; everything to staff), and to the
    worker that holds the node's own token (``Authorization: Bearer <worker token>``), whatever
    the campaign; a token that is not valid, or not that node's, is refused (403)."""
    agent = request.GET.get("agent", "")
    node_id = agent.removeprefix("node:")
    if not agent.startswith("node:") or not node_id or len(agent) > 80:
        return JsonResponse({"error": "give ?agent=node:<id>"}, status=400)
    secret = _bearer(request)
    if secret:
        try:
            token = authenticate(secret)
        except ProtocolError as error:
            return JsonResponse({"error": error.message}, status=403)
        node = WorkerNode.objects.filter(campaign_id=pk, node_id=node_id, token=token).first()
        if node is None:
            return JsonResponse({"error": "this token has no such node in this campaign"}, status=403)
    else:
        campaign = get_visible(request, pk)
        nodes = WorkerNode.objects.filter(campaign=campaign, node_id=node_id)
        if not request.user.is_staff:
            nodes = nodes.exclude(state=WorkerNode.State.BANNED)
        node = nodes.first()
        if node is None:
            return JsonResponse({"error": "no such node in this campaign"}, status=404)
    rows = (
        Evaluation.objects.filter(node=node, accuracy__isnull=False)
        .order_by("round")
        .values("round", "n", "correct", "accuracy", "reward", "submitted_at")
    )
    campaign_name = Campaign.objects.values_list("name", flat=True).get(pk=node.campaign_id)
    return JsonResponse(
        {"campaign": node.campaign_id, "name": campaign_name, "agent": agent, "evaluations": list(rows)}
    )


@require_GET
def status_json(request: HttpRequest) -> JsonResponse:
    rows, totals = status_tables.status_rows(list(visible_campaigns(request.user)[:200]))
    return JsonResponse({"campaigns": rows, "totals": totals})


# --- export --------------------------------------------------------------------------------------


def _filters(request: HttpRequest) -> dict[str, Any]:
    """Optional filters: arm, tier, agent, from_round, to_round (inclusive)."""
    filters: dict[str, Any] = {}
    for key in ("arm", "tier", "agent"):
        if request.GET.get(key):
            filters[key] = request.GET[key]
    for key, lookup in (("from_round", "round__gte"), ("to_round", "round__lte")):
        if request.GET.get(key):
            filters[lookup] = int(request.GET[key])
    return filters


def _metric_keys(rows) -> list[str]:
    """CSV columns for the metrics: the keys of the first and last 500 rows (one engine writes
    them all, so this is every key; the JSON export carries each row's own keys anyway)."""
    keys: set[str] = set()
    for metrics in [
        *rows.order_by("pk").values_list("metrics", flat=True)[:500],
        *rows.order_by("-pk").values_list("metrics", flat=True)[:500],
    ]:
        keys.update(metrics)
    return sorted(keys)


def spreadsheet_row(values: Iterable[Any]) -> list[Any]:
    """A CSV row whose text cells a spreadsheet shows as text: a string starting with a formula
    character gets a leading "'" (OWASP's rule). Numbers stay numbers: the csv writer writes a
    reward of -0.5 as ``-0.5``, which a spreadsheet reads as that number, not as a formula."""
    return [
        "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value
        for value in values
    ]


def agent_name(arm: str, tier: str, seed: int | None, node_id: str | None, owner: str | None) -> str:
    """The agent's one name (core.names): a node's volunteer and short id, a control's arm,
    tier and seed."""
    if node_id is not None:
        return node_label(node_id, owner)
    return control_label(arm, tier, seed) if seed is not None else ""


async def _pages(fetch: Callable[[int], list[tuple]]) -> AsyncIterator[list[tuple]]:
    """Keyset pagination by id; each page is fetched in a worker thread."""
    last = 0
    while True:
        page = await sync_to_async(fetch)(last)
        if not page:
            return
        yield page
        last = page[-1][0]


def _agent_fetch(campaign: Campaign, filters: dict[str, Any]) -> Callable[[int], list[tuple]]:
    rows = RoundMetrics.objects.filter(campaign=campaign, **filters)

    def fetch(after: int) -> list[tuple]:
        page = list(
            rows.filter(pk__gt=after)
            .order_by("pk")
            .values_list(
                "pk",
                "arm",
                "tier",
                "agent",
                "round",
                "reward",
                "created_at",
                "control_run__seed",
                "node__replicate",
                "metrics",
                "node__node_id",
                # the display name of the node's volunteer (swarm_app/volunteers/), by relation
                "node__token__owner__volunteer__display_name",
                "node_id",
            )[:PAGE]
        )
        if not page:
            return page
        scored = Evaluation.objects.filter(
            node_id__in={row[-1] for row in page}, round__in={row[4] for row in page}, accuracy__isnull=False
        ).values_list("node_id", "round", "accuracy", "reward")
        evaluations = {(node, number): (accuracy, reward) for node, number, accuracy, reward in scored}
        return [(*row[:-1], evaluations.get((row[-1], row[4]), (None, None))) for row in page]

    return fetch


async def _agent_csv(campaign: Campaign, fetch, keys: list[str]) -> AsyncIterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    # "reward" is the verified reward; the agent's own report of it becomes "metrics/reward".
    # Every cell passes spreadsheet_row: metric names and values come from workers (names are
    # restricted at the protocol since issue #27, but older rows may hold any), agents from
    # node ids, tiers and arms from the campaign's config.
    named = FIXED + EVAL_COLUMNS
    header = FIXED + [f"metrics/{key}" if key in named else key for key in keys] + EVAL_COLUMNS
    writer.writerow(spreadsheet_row(header))
    async for page in _pages(fetch):
        for _pk, arm, tier, agent, number, reward, created, seed, swarm, metrics, node, owner, scored in page:
            writer.writerow(
                spreadsheet_row(
                    [campaign.pk, arm, tier, agent, number, reward, created.isoformat()]
                    + ["" if seed is None else seed, "" if swarm is None else swarm]
                    + [agent_name(arm, tier, seed, node, owner)]
                    + [metrics.get(key, "") for key in keys]
                    + ["" if value is None else value for value in scored]
                )
            )
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


async def _agent_json(campaign: Campaign, fetch) -> AsyncIterator[str]:
    yield json.dumps({"campaign": campaign.pk, "name": campaign.name, "level": "agent"})[:-1] + ', "rows": ['
    first = True
    async for page in _pages(fetch):
        parts = []
        for _pk, arm, tier, agent, number, reward, created, seed, swarm, metrics, node, owner, scored in page:
            row = {
                "arm": arm,
                "tier": tier,
                "agent": agent,
                "round": number,
                "reward": reward,
                "created_at": created.isoformat(),
                "seed": seed,
                "swarm": swarm,
                "name": agent_name(arm, tier, seed, node, owner),
                "metrics": metrics,
                **dict(zip(EVAL_COLUMNS, scored, strict=True)),
            }
            parts.append(("" if first else ",") + json.dumps(row))
            first = False
        yield "".join(parts)
    yield "]}"


def _round_rows(campaign: Campaign, filters: dict[str, Any]) -> list[tuple]:
    filters = {key: value for key, value in filters.items() if key != "agent"}
    return list(
        RoundAggregate.objects.filter(campaign=campaign, **filters)
        .order_by("tier", "arm", "round")
        .values_list(*ROUND_FIELDS)
    )


@require_GET
def metrics_export(request: HttpRequest, pk: int) -> HttpResponse:
    """GET /api/campaigns/<id>/metrics?format=csv|json[&level=agent|round][&arm=&tier=&agent=
    &from_round=&to_round=]: one row per agent and round (default), or per arm, tier and round."""
    campaign = get_visible(request, pk)
    fmt = request.GET.get("format", "json")
    level = request.GET.get("level", "agent")
    if fmt not in ("csv", "json") or level not in ("agent", "round"):
        return HttpResponseBadRequest("format must be csv or json; level must be agent or round\n")
    try:
        filters = _filters(request)
    except ValueError:
        return HttpResponseBadRequest("from_round and to_round must be integers\n")
    filename = f"campaign-{campaign.pk}-metrics{'-rounds' if level == 'round' else ''}.{fmt}"
    if level == "round":
        dashboard.refresh_rollups(rebuild=False)
        rows = _round_rows(campaign, filters)
        if fmt == "json":
            body = {"campaign": campaign.pk, "name": campaign.name, "level": "round"}
            body["rows"] = [dict(zip(ROUND_FIELDS, row, strict=True)) for row in rows]
            response: HttpResponse = JsonResponse(body)
        else:
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            # metric_means flattened: one column per mechanism key (empty where not reported)
            writer.writerow(
                ["campaign", *ROUND_FIELDS[:MEANS_AT], *MECHANISM_KEYS, *ROUND_FIELDS[MEANS_AT + 1 :]]
            )
            writer.writerows(
                spreadsheet_row(
                    [
                        campaign.pk,
                        *row[:MEANS_AT],
                        *(row[MEANS_AT].get(key, "") for key in MECHANISM_KEYS),
                        *row[MEANS_AT + 1 :],
                    ]
                )
                for row in rows
            )
            response = HttpResponse(buffer.getvalue(), content_type="text/csv")
    else:
        fetch = _agent_fetch(campaign, filters)
        if fmt == "csv":
            keys = _metric_keys(RoundMetrics.objects.filter(campaign=campaign, **filters))
            content = _agent_csv(campaign, fetch, keys)
            response = StreamingHttpResponse(content, content_type="text/csv")
        else:
            response = StreamingHttpResponse(_agent_json(campaign, fetch), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
