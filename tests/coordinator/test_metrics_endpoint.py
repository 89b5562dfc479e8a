"""``/metrics`` (issue 31, item 1): two real daphne servers sharing one multiprocess directory,
real worker frames, scraped as Prometheus would; and the scrape refused from the public side.
"""

from __future__ import annotations

import asyncio
import os
import signal
import urllib.error
import urllib.request

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.coordinator.helpers import run, submit_round
from tests.servers import ROOT, start_asgi, stop
from tests.wsclient import RawSession

TOKEN = "scrape-token-for-tests-only-0123456789abcdef"


def scrape(base: str, token: str | None = TOKEN, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{base}/metrics", headers=headers)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_a_scrape_of_either_server_sees_both_and_follows_nodes_and_acks(campaign, token, tmp_path):
    shared = tmp_path / "prometheus"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared), "METRICS_TOKEN": TOKEN}
    first, base = start_asgi(tmp_path / "daphne-1.log", **env)
    second, other = start_asgi(tmp_path / "daphne-2.log", **env)
    mix = campaign.settings.mix
    c = str(campaign.pk)

    async def scenario() -> str:
        status, before = scrape(base)
        assert status == 200, before
        assert value(before, "swarm_connected_nodes", campaign=c) == 0
        assert value(before, "swarm_ack_seconds_count", campaign=c) == 0
        a = await RawSession.open(base)
        tier = (await a.hello(token, "node-a"))["tier"]
        b = await RawSession.open(other)
        assert (await b.hello(token, "node-b"))["type"] == "welcome"
        during = scrape(base)[1]
        # Node B's socket is on the other server: the scrape of this one adds both processes.
        assert value(during, "swarm_connected_nodes", campaign=c, tier=tier) == 2
        assert value(during, "swarm_nodes_marked_connected", campaign=c, tier=tier) == 2
        for name, session in (("node-a", a), ("node-b", b)):
            assert (await submit_round(session, name, mix))["type"] == "submit_ack"
        await b.close()
        await asyncio.sleep(0.5)  # the server's disconnect handler
        after = scrape(other)[1]  # either server answers for the host
        assert value(after, "swarm_connected_nodes", campaign=c, tier=tier) == 1  # B closed
        assert value(after, "swarm_rounds_acked_total", campaign=c, tier=tier) == 2
        submits = {"campaign": c, "tier": tier, "request": "submit"}
        assert value(after, "swarm_ack_seconds_count", **submits) == 2
        assert value(after, "swarm_ack_seconds_bucket", le="+Inf", **submits) == 2
        assert value(after, "swarm_ack_seconds_count", campaign=c, tier=tier, request="lease_request") == 2
        assert value(after, "swarm_ack_seconds_sum", **submits) > 0
        assert value(after, "swarm_db_threads") >= 0 and value(after, "swarm_db_queue_limit") > 0
        assert value(after, "swarm_pool_shared_rollouts_total", campaign=c) == 4  # 2 rounds x 2 questions
        assert value(after, "swarm_pool_window_rollouts", campaign=c, tier=tier) == 4
        assert (await a.request("lease_request", round=-1))["type"] == "error"
        stays = await RawSession.open(other)
        assert (await stays.hello(token, "node-c"))["type"] == "welcome"
        assert value(scrape(base)[1], "swarm_connected_nodes", campaign=c, tier=tier) == 2
        # The other server dies with node C connected and without running its exit handlers:
        # the dead process's live gauges are swept, this one's (node A) stay.
        os.kill(second.pid, signal.SIGKILL)
        second.wait(timeout=10)
        last = scrape(base)[1]
        assert value(last, "swarm_connected_nodes", campaign=c, tier=tier) == 1
        assert value(last, "swarm_errors_total", campaign=c, tier=tier, code="invalid_message") == 1
        assert value(last, "swarm_rounds_acked_total", campaign=c, tier=tier) == 2  # counters stay
        await a.close()
        return tier

    try:
        run(scenario())
        # Refused: without the token, with a wrong one, and through the public proxy.
        status, body = scrape(base, token=None)
        assert status == 401 and "swarm_" not in body
        assert scrape(base, token="x" * 40)[0] == 401
        status, body = scrape(base, **{"X-Forwarded-For": "203.0.113.9"})
        assert status == 403 and "swarm_" not in body
    finally:
        stop(second)
        stop(first)


@pytest.mark.parametrize(
    ("remote", "headers", "status"),
    [
        ("127.0.0.1", {}, 200),
        ("10.1.2.3", {}, 200),
        ("203.0.113.9", {}, 403),  # a public address, straight to the server
        ("127.0.0.1", {"HTTP_X_FORWARDED_FOR": "127.0.0.1"}, 403),  # through the proxy
        ("127.0.0.1", {"HTTP_X_REAL_IP": "10.0.0.1"}, 403),
    ],
)
def test_only_the_allowed_addresses_may_scrape(db, remote, headers, status):
    import ipaddress

    allowed = [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8")]
    with override_settings(METRICS_ALLOWED_ADDRESSES=allowed, METRICS_TOKEN=""):
        response = Client(REMOTE_ADDR=remote).get("/metrics", **headers)
    assert response.status_code == status
    assert (b"swarm_connected_nodes" in response.content) == (status == 200)


def test_the_platform_files_keep_metrics_off_the_public_site():
    nginx = (ROOT / "platform" / "nginx.conf").read_text()
    assert "location = /metrics" in nginx and "return 404" in nginx.split("location = /metrics", 1)[1][:80]


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"METRICS_ALLOWED_ADDRESSES": "10.0.0.0/8,not-an-address"}, "not an address"),
        ({"METRICS_ALLOWED_ADDRESSES": "0.0.0.0/0"}, "set METRICS_TOKEN"),
        ({"METRICS_TOKEN": "short"}, "32 or more"),
        ({"PROMETHEUS_MULTIPROC_DIR": "/proc/no-such-place"}, "PROMETHEUS_MULTIPROC_DIR"),
    ],
    ids=["address", "everyone-without-token", "short-token", "unwritable-dir"],
)
def test_metrics_settings_are_checked_at_start(tmp_path, env, refused):
    from tests.core.test_security_settings import BASE_ENV, read_settings

    result = read_settings({**BASE_ENV, "SWARM_DATA_DIR": str(tmp_path), **env}, "METRICS_TOKEN")
    assert result.returncode != 0 and "ImproperlyConfigured" in result.stderr, result.stderr
    assert refused in result.stderr
    fine = {"METRICS_ALLOWED_ADDRESSES": "0.0.0.0/0, ::/0", "METRICS_TOKEN": TOKEN}
    result = read_settings({**BASE_ENV, "SWARM_DATA_DIR": str(tmp_path), **fine}, "METRICS_ALLOWED_ADDRESSES")
    assert result.returncode == 0 and "IPv6Network('::/0')" in result.stdout, result.stderr


def test_the_dashboard_and_the_scrape_example_name_only_exported_metrics(db):
    """Every metric the Grafana dashboard queries is one /metrics exports (the names of this
    process's instruments and of the database's figures, whether or not they have samples yet)."""
    import json
    import re

    import yaml

    exported = {
        family.name for family in text_string_to_metric_families(Client().get("/metrics").content.decode())
    }
    dashboard = json.loads((ROOT / "platform" / "grafana" / "swarm-coordinator.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries.append(dashboard["templating"]["list"][0]["definition"])
    used = {
        re.sub(r"_(total|bucket|count|sum)$", "", name)
        for q in queries
        for name in re.findall(r"swarm_\w+", q)
    }
    assert len(used) >= 10 and used <= exported, used - exported
    scrape_config = yaml.safe_load((ROOT / "platform" / "prometheus.yml").read_text())
    job = scrape_config["scrape_configs"][0]
    # The same host's scrape needs no token (loopback is allowed by default), so promtool accepts
    # the file as shipped; the remote examples read the token file docs/deploy.md creates.
    assert job["metrics_path"] == "/metrics" and "authorization" not in job
    assert (
        "#     credentials_file: /etc/swarm/metrics-token"
        in (ROOT / "platform" / "prometheus.yml").read_text()
    )
