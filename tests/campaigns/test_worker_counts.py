"""The workers box's counts add up (status_tables.worker_status_counts): every node in exactly
one status, the same words as the workers table. Issue #30 saw "1 healthy, 0 connected,
1 finished" for one finished node."""

from __future__ import annotations

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.web.status_tables import worker_rows, worker_status_counts
from worker.shared.campaign import CampaignConfig


def test_one_finished_node_reads_one_finished_worker(db):
    campaign = Campaign.objects.create(name="c", config=CampaignConfig(rounds=5).validate().to_json())
    token = create_token(campaign)[0]
    WorkerNode.objects.create(node_id="done", campaign=campaign, token=token, tier="tiny-1m", round=5)
    assert worker_status_counts(campaign) == {"total": 1, "finished": 1}


def test_every_node_counts_once_in_the_status_the_table_shows(db):
    campaign = Campaign.objects.create(name="c", config=CampaignConfig(rounds=5).validate().to_json())
    token = create_token(campaign)[0]
    nodes = [
        ("a", "healthy", True, 2),
        ("b", "healthy", False, 2),
        ("c", "healthy", False, 5),  # finished
        ("d", "stale", True, 1),
        ("e", "offline", False, 3),
        ("f", "banned", False, 5),
        ("g", "healthy", True, 5),  # at the last round but still connected
    ]
    for node_id, state, connected, round_ in nodes:
        WorkerNode.objects.create(
            node_id=node_id,
            campaign=campaign,
            token=token,
            tier="tiny-1m",
            state=state,
            connected=connected,
            round=round_,
        )
    counts = worker_status_counts(campaign)
    assert counts == {
        "total": 7,
        "healthy": 2,
        "stale": 1,
        "healthy (disconnected)": 1,
        "finished": 1,
        "offline": 1,
        "banned": 1,
    }
    assert sum(v for k, v in counts.items() if k != "total") == counts["total"]
    shown = {}
    for row in worker_rows(campaign):
        shown[row["status"]] = shown.get(row["status"], 0) + 1
    assert shown == {k: v for k, v in counts.items() if k != "total"}
