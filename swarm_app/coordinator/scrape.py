"""``GET /metrics``: the coordinator's figures in Prometheus's text format, for operators only.

Who may scrape (settings, docs/deploy.md "Metrics"), checked in this order:

1. a request that came through the public proxy is refused (403): it carries the header the
   proxy adds (``X-Forwarded-For``, ``Forwarded`` or ``X-Real-IP``; platform/nginx.conf sets
   ``X-Forwarded-For`` on every request it passes, and answers ``/metrics`` itself with 404);
2. the peer's address must be in ``METRICS_ALLOWED_ADDRESSES`` (default loopback only), else 403;
3. with ``METRICS_TOKEN`` (or ``METRICS_TOKEN_FILE``) set, ``Authorization: Bearer <token>`` must
   carry it, else 401 (503 while the token file cannot be read).

What it reports: the instruments of telemetry.py (every process of the host in multiprocess
mode, else this process's), then what the database knows, read now, for campaigns that are not
finished: the pool's window and the rollouts in it per tier (what a draw can reach), the
rollouts shared since the start, those moved out of the hot table (archive.py) and the nodes
marked connected.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator import telemetry
from swarm_app.coordinator.models import PoolArchive, PoolRollout, WorkerNode
from swarm_app.core import health
from worker.shared.campaign import CampaignConfig

PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def metrics_token() -> str:
    """The bearer token a scrape must carry: METRICS_TOKEN, or METRICS_TOKEN_FILE's content (read
    each time, so that a rotated file applies at once); empty: none. ValueError when the file
    cannot be read or holds no valid token."""
    if not settings.METRICS_TOKEN_FILE:
        return settings.METRICS_TOKEN
    try:
        token = Path(settings.METRICS_TOKEN_FILE).read_text().strip()
    except OSError as error:
        raise ValueError(f"METRICS_TOKEN_FILE {settings.METRICS_TOKEN_FILE}: {error.strerror}") from None
    if len(token) < 32 or any(character.isspace() for character in token):
        raise ValueError(
            f"METRICS_TOKEN_FILE {settings.METRICS_TOKEN_FILE}: not a token of 32 or more characters "
            "without spaces"
        )
    return token


def refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer to a scrape that is not allowed, or None when it is (rules: module docstring)."""
    if any(request.META.get(header) for header in PROXY_HEADERS):
        return HttpResponse("/metrics is not served through the public proxy\n", status=403)
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return HttpResponse("/metrics: unknown client address\n", status=403)
    if not any(peer in network for network in settings.METRICS_ALLOWED_ADDRESSES):
        return HttpResponse("/metrics is not served to this address\n", status=403)
    try:
        expected = metrics_token()
    except ValueError as error:
        return HttpResponse(f"/metrics: {error}\n", status=503)
    if expected:
        sent = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = sent.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected.encode()):
            response = HttpResponse("/metrics needs its bearer token\n", status=401)
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    return None


class DatabaseCollector(Collector):
    """The figures the database holds, read at scrape time (deployment-wide: every server's
    scrape reports the same values; aggregate them with max, not sum)."""

    def collect(self) -> Iterator:
        campaigns = list(
            Campaign.objects.exclude(state__in=Campaign.FINISHED).values_list(
                "pk", "config", "rollout_sequence"
            )
        )
        window = GaugeMetricFamily(
            "swarm_pool_window", "The pool's sampling window (pool_window), in rollouts", labels=["campaign"]
        )
        in_window = GaugeMetricFamily(
            "swarm_pool_window_rollouts",
            "Rollouts in the pool's window now (what a draw can reach), by tier",
            labels=["campaign", "tier"],
        )
        shared = CounterMetricFamily(
            "swarm_pool_shared_rollouts", "Rollouts the campaign's pool accepted", labels=["campaign"]
        )
        archived = GaugeMetricFamily(
            "swarm_pool_moved_rollouts",
            "Rollouts moved out of the hot table (archive.py), by the campaign's pool_retention",
            labels=["campaign", "retention"],
        )
        connected = GaugeMetricFamily(
            "swarm_nodes_marked_connected",
            "Nodes the database marks connected (all servers), by campaign and tier",
            labels=["campaign", "tier"],
        )
        ids = [pk for pk, _config, _sequence in campaigns]
        for pk, config, sequence in campaigns:
            size = CampaignConfig.from_json(config).pool_window
            window.add_metric([str(pk)], size)
            shared.add_metric([str(pk)], sequence)
            rows = (
                PoolRollout.objects.filter(campaign_id=pk, sequence__gt=sequence - size, in_pool=True)
                .values("tier")
                .annotate(n=Count("id"))
            )
            for row in rows:
                in_window.add_metric([str(pk), row["tier"]], row["n"])
        moved = (
            PoolArchive.objects.filter(campaign_id__in=ids)
            .values("campaign_id", "deleted")
            .annotate(n=Sum("rollouts"))
        )
        for row in moved:
            retention = "delete" if row["deleted"] else "archive"
            archived.add_metric([str(row["campaign_id"]), retention], row["n"] or 0)
        nodes = (
            WorkerNode.objects.filter(campaign_id__in=ids, connected=True)
            .values("campaign_id", "tier")
            .annotate(n=Count("id"))
        )
        for row in nodes:
            connected.add_metric([str(row["campaign_id"]), row["tier"]], row["n"])
        yield from (window, in_window, shared, archived, connected)


class HealthCollector(Collector):
    """/healthz/all's parts as gauges: 1 while a part answers, 0 while it does not."""

    def collect(self) -> Iterator:
        up = GaugeMetricFamily(
            "swarm_part_up",
            "1 while the part answers (database, redis, beat, celery_worker: /healthz/all), else 0",
            labels=["part"],
        )
        for name, state in health.parts().items():
            up.add_metric([name], 1 if state["ok"] else 0)
        yield up


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    if telemetry.MULTIPROC_DIR:
        telemetry.sweep_dead()
        processes = CollectorRegistry()
        MultiProcessCollector(processes, path=telemetry.MULTIPROC_DIR)
    else:
        processes = REGISTRY
    database = CollectorRegistry()
    database.register(DatabaseCollector())
    database.register(HealthCollector())
    return HttpResponse(
        generate_latest(processes) + generate_latest(database), content_type=CONTENT_TYPE_LATEST
    )
