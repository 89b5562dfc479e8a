"""`manage.py validation_campaign` end to end at smoke scale (issue #50 item 2): the real
coordinator, Celery with its controls queue and local worker processes run a campaign of 2 swarms
of 2 nodes and 2 control seeds for 2 rounds of 4 tokens; the command exits by itself, leaves no
process behind, and writes the results file and the report from the database's rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.models import WorkerNode
from tests.servers import ROOT, free_port, server_env

pytestmark = pytest.mark.slow


def test_the_validation_campaign_runs_end_to_end_and_writes_its_report(
    tiny_1m_dir, transactional_db, tmp_path
):
    port = free_port()
    data_dir = tmp_path / "data"
    out = tmp_path / "validation.json"
    env = server_env(SWARM_DATA_DIR=str(data_dir))
    command = [
        sys.executable,
        "manage.py",
        "validation_campaign",
        "--swarms",
        "2",
        "--nodes",
        "2",
        "--control-seeds",
        "2",
        "--rounds",
        "2",
        "--tokens",
        "4",
        "--nodes-per-process",
        "2",
        "--port",
        str(port),
        "--status-every",
        "5",
        "--minutes",
        "8",
        "--out",
        str(out),
        "--beside",
        "the test suite",
        "--simulator-seeds",
        "1",
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=720)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-4000:]

    campaign = Campaign.objects.get()
    assert campaign.state == Campaign.State.COMPLETED
    assert campaign.settings.replicates == 2 and campaign.settings.control_kinds() == ["isolated"]
    swarm = WorkerNode.objects.filter(campaign=campaign, arm="swarm")
    assert sorted(swarm.values_list("replicate", flat=True)) == [0, 0, 1, 1]  # 2 swarms of 2
    assert RoundMetrics.objects.filter(campaign=campaign, arm="swarm").count() == 2 * 2 * 2
    assert RoundMetrics.objects.filter(campaign=campaign, arm="isolated").count() == 2 * 2

    result = json.loads(out.read_text())
    assert result["horizon"] == 2
    assert result["platform"]["gain"]["n"] == [2, 2]
    assert result["platform"]["gain"]["low"] is not None
    assert result["simulator"]["unpaired"]["n"] == [6, 10]  # v3's 4/4 and 8/0 cells
    assert result["pool_age"]["platform_per_draw"]["n"] >= 1  # round 1's draws at least
    # the simulator's 4/4 rerun at the same settings (2 agents, 2 rounds): its ages per draw
    assert result["pool_age"]["simulator_per_draw"]["n"] >= 1
    assert result["simulator_reruns"] == [
        {
            "seed": 0,
            "agents": 2,
            "cumulative": pytest.approx(result["simulator_reruns"][0]["cumulative"]),
            "v3_cumulative": None,
            "largest_round_difference": None,
        }
    ]
    counts = result["run"]["question_stream_counts"]
    assert counts["control_leases"] == 4 and counts["control_off_stream"] == 0
    assert counts["swarm_leases"] == 2 * 2 * 2 and counts["swarm_off_stream"] == 0
    assert counts["swarm_positions_repeated"] == 0
    assert result["run"]["memory"]["per_node_mib"] > 0 and result["run"]["wall_seconds"] > 0
    assert result["run"]["deviations"]["rounds"] == [2, 45]
    report = out.with_suffix(".md").read_text()
    assert "validation_campaign --swarms 2" in report and "A smoke run" in report
    assert "wrote" in printed and "platform swarm - control" in printed

    leftovers = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True).stdout.split()
    leftovers += subprocess.run(["pgrep", "-f", f"-p {port} "], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes left behind: {leftovers}"
