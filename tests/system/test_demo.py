"""`manage.py demo`, the README's main job, started headless with a few rounds: it exits 0 by
itself with metrics for the swarm and both control arms, and leaves no process behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from swarm_app.campaigns.models import Campaign, RoundMetrics
from tests.servers import ROOT, free_port, server_env

pytestmark = pytest.mark.slow


def test_demo_runs_a_campaign_to_completion_and_cleans_up(tiny_1m_dir, transactional_db, tmp_path):
    port = free_port()
    data_dir = tmp_path / "data"
    # As on a user's machine: no SWARM_MODEL_CACHE, so the model cache is the data directory's,
    # where the demo finds tiny-1m already built. Every process it starts must use that one.
    (data_dir / "models").mkdir(parents=True)
    (data_dir / "models" / "tiny-1m").symlink_to(tiny_1m_dir)
    env = server_env(SWARM_DATA_DIR=str(data_dir))
    env.pop("SWARM_MODEL_CACHE", None)
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "demo",
            "--tiers",
            "tiny-1m",
            "--workers",
            "2",
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
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"http://127.0.0.1:{port}/campaigns/" in result.stdout
    assert "staff account: organizer" in result.stdout
    logs = {path.name: path.read_text() for path in (data_dir / "demo").glob("*.log")}
    assert "worker-tiny-1m-0.log" in logs and "celery.log" in logs
    rebuilt = [name for name, text in logs.items() if "building tiny-1m" in text]
    assert "building tiny-1m" not in result.stdout and not rebuilt, f"tiny-1m built again by {rebuilt}"

    campaign = Campaign.objects.get()
    assert campaign.state == Campaign.State.COMPLETED
    arms = set(RoundMetrics.objects.filter(campaign=campaign).values_list("arm", flat=True))
    assert arms == {"swarm", "isolated", "filtered"}
    assert (
        RoundMetrics.objects.filter(campaign=campaign, arm="swarm").count() == 2 * 2
    )  # 2 workers x 2 rounds

    leftovers = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True).stdout.split()
    leftovers += subprocess.run(["pgrep", "-f", f"-p {port} "], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes left behind: {leftovers}"
