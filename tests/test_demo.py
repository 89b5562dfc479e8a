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
        env=server_env(SWARM_DATA_DIR=str(data_dir), SWARM_MODEL_CACHE=str(tiny_1m_dir.parent)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"http://127.0.0.1:{port}/campaigns/" in result.stdout
    assert "staff account: organizer" in result.stdout

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
