"""Fixtures of the coordinator's protocol tests: a running campaign, a token, and two nodes
holding a lease each on a real coordinator."""

from __future__ import annotations

import pytest

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.tokens import create_token
from tests.coordinator.helpers import G, run
from tests.wsclient import RawSession
from worker.shared.campaign import CampaignConfig


@pytest.fixture
def campaign(transactional_db) -> Campaign:
    config = CampaignConfig(group_size=G, questions_per_round=2, num_local=2, num_external=2, rounds=10)
    return Campaign.objects.create(
        name="protocol", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )


@pytest.fixture
def token(campaign) -> str:
    return create_token(campaign, "test")[1]


@pytest.fixture
def ready(coordinator, campaign, token):
    """Two nodes with a lease each; returns what the bad-input tests need."""

    async def setup():
        sessions = {}
        leases = {}
        for name in ("node-a", "node-b"):
            s = await RawSession.open(coordinator)
            assert (await s.hello(token, name))["type"] == "welcome"
            leases[name] = await s.request("lease_request", round=0)
            await s.close()
        return sessions, leases

    _, leases = run(setup())
    return {"url": coordinator, "token": token, "leases": leases, "mix": campaign.settings.mix}
