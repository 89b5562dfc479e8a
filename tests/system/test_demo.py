"""`manage.py demo`, the README's main job, started headless with a few rounds: its multi-node
swarm and both control arms report, and once the campaign completes the dashboard and its export
stay served until Ctrl-C, which then exits 0 and leaves no process behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from swarm_app.campaigns.models import Campaign, RoundMetrics
from tests.servers import ROOT, free_port, server_env

pytestmark = pytest.mark.slow


def test_demo_runs_a_campaign_to_completion_serves_it_and_cleans_up(tiny_1m_dir, transactional_db, tmp_path):
    port = free_port()
    data_dir = tmp_path / "data"
    # As on a user's machine: no SWARM_MODEL_CACHE; the shipped tiny-1m is used, nothing is built.
    env = server_env(SWARM_DATA_DIR=str(data_dir))
    env.pop("SWARM_MODEL_CACHE", None)
    out = tmp_path / "demo.out"
    with open(out, "w") as handle:
        demo = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "demo",
                "--tiers",
                "tiny-1m",
                "--workers",
                "1",
                "--nodes",
                "2",
                "--seeds",
                "1",
                "--rounds",
                "2",
                "--no-browser",
                "--port",
                str(port),
                "--status-every",
                "2",
                "--minutes",
                "10",
            ],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 600
        while "until Ctrl-C" not in out.read_text():
            assert demo.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.5)
        campaign = Campaign.objects.get()
        assert campaign.state == Campaign.State.COMPLETED
        time.sleep(3)  # the workers have exited by themselves; the server must still answer
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}{campaign.get_absolute_url()}", timeout=10) as page:
            assert page.status == 200 and "cpu-demo" in page.read().decode()
        with urllib.request.urlopen(f"{base}/api/campaigns/{campaign.pk}/metrics", timeout=10) as export:
            assert export.status == 200 and export.read()
        demo.send_signal(signal.SIGINT)  # how a user ends the demo once it is done
        assert demo.wait(timeout=120) == 0, out.read_text()[-3000:]
    finally:
        if demo.poll() is None:
            demo.kill()
    stdout = out.read_text()
    assert f"http://127.0.0.1:{port}/campaigns/" in stdout
    assert "staff account: organizer" in stdout
    assert "swarm r1" in stdout and "(n=2, external" in stdout  # the status line's n and external share
    logs = {path.name: path.read_text() for path in (data_dir / "demo").glob("*.log")}
    assert "worker-tiny-1m-0.log" in logs and "celery.log" in logs
    rebuilt = [name for name, text in logs.items() if "building tiny-1m" in text]
    assert "building tiny-1m" not in stdout and not rebuilt, f"tiny-1m built again by {rebuilt}"

    arms = set(RoundMetrics.objects.filter(campaign=campaign).values_list("arm", flat=True))
    assert arms == {"swarm", "isolated", "self"}  # the strongest control, not the filtered sanity arm
    assert "self r1" in stdout  # the status line shows the self-replay arm too
    swarm = RoundMetrics.objects.filter(campaign=campaign, arm="swarm")
    assert swarm.count() == 2 * 2  # 1 process x 2 nodes x 2 rounds
    assert any(m["external_fraction"] > 0 for m in swarm.values_list("metrics", flat=True))

    leftovers = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True).stdout.split()
    leftovers += subprocess.run(["pgrep", "-f", f"-p {port} "], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes left behind: {leftovers}"
