"""The admin is a view of the campaigns, not a side door around the lifecycle: a campaign's
state, timestamps and counters cannot be set there; its actions go through lifecycle.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from swarm_app.campaigns.models import Campaign, RoundMetrics
from tests.campaigns.helpers import make_campaign


@pytest.fixture
def admin_client(db) -> Client:
    user = get_user_model().objects.create_superuser("root", password="pw-root-1")
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_cannot_set_a_campaigns_state_or_counters(admin_client):
    campaign = make_campaign(name="steady")
    url = f"/admin/campaigns/campaign/{campaign.pk}/change/"
    form = admin_client.get(url).content.decode()
    assert 'name="state"' not in form and 'name="rollout_sequence"' not in form
    assert 'name="name"' in form  # what the lifecycle does not own stays editable
    response = admin_client.post(
        url,
        {
            "name": "renamed",
            "public": "on",
            "volunteer_access": "open",  # who may make their own tokens: the organizer's to set
            "state": Campaign.State.COMPLETED,
            "rollout_sequence": "999",
            "next_question_position": "999",
            "failure_reason": "forged",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    campaign.refresh_from_db()
    assert campaign.name == "renamed"
    assert campaign.state == Campaign.State.PENDING
    assert (campaign.rollout_sequence, campaign.next_question_position, campaign.failure_reason) == (0, 0, "")


def test_admin_actions_follow_the_lifecycle(admin_client):
    pending, stopped = make_campaign(name="a"), make_campaign(name="b", state=Campaign.State.STOPPED)
    response = admin_client.post(
        "/admin/campaigns/campaign/",
        {"action": "launch", "_selected_action": [pending.pk, stopped.pk]},
        follow=True,
    )
    pending.refresh_from_db()
    stopped.refresh_from_db()
    assert pending.state == Campaign.State.RUNNING and pending.control_runs.count() == 4  # 2 arms x 2 seeds
    assert stopped.state == Campaign.State.STOPPED  # a stopped campaign cannot be launched
    assert sorted(str(m) for m in response.context["messages"]) == [
        "a: now running",
        "b: campaign 'b' is stopped; cannot make it running",
    ]


def test_metrics_and_control_runs_are_read_only_and_named_right(admin_client):
    index = admin_client.get("/admin/").content.decode()
    assert "Round metrics" in index and "metricss" not in index
    campaign = make_campaign()
    row = RoundMetrics.objects.create(
        campaign=campaign, arm="swarm", tier="tiny-1m", agent="node:x", round=0, reward=0.5
    )
    assert admin_client.get("/admin/campaigns/roundmetrics/add/").status_code == 403
    response = admin_client.post(f"/admin/campaigns/roundmetrics/{row.pk}/change/", {"reward": "1.0"})
    assert response.status_code == 403
    row.refresh_from_db()
    assert row.reward == 0.5
    assert admin_client.get("/admin/campaigns/controlrun/add/").status_code == 403
