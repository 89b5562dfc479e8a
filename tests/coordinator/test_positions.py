"""The question stream's positions (leases.PositionBlocks): each handed out once per campaign,
whichever server hands it out, and a campaign's block never given to another campaign."""

from __future__ import annotations

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.leases import PositionBlocks
from worker.shared.campaign import CampaignConfig


def new_campaign(**fields) -> Campaign:
    config = (
        CampaignConfig(questions_per_round=3, num_local=3, num_external=3, rounds=10).validate().to_json()
    )
    return Campaign.objects.create(name="positions", state=Campaign.State.RUNNING, config=config, **fields)


def test_two_servers_hand_out_each_position_once(transactional_db):
    campaign = new_campaign()
    one, two = PositionBlocks(), PositionBlocks()  # two servers' processes
    key = (campaign.pk, campaign.created_at)
    taken = [server.take(*key, 3) for _ in range(PositionBlocks.LEASES + 5) for server in (one, two)]
    positions = [p for block in taken for p in block]
    assert all(len(block) == 3 for block in taken)
    assert len(positions) == len(set(positions)), "a position was handed out twice"
    # Each server's first block, then the second one it reserved when the first ran out.
    assert taken[0] == range(0, 3) and taken[1] == range(96, 99)
    assert taken[2 * PositionBlocks.LEASES] == range(192, 195)
    campaign.refresh_from_db()
    assert campaign.next_question_position == 4 * 3 * PositionBlocks.LEASES


def test_a_new_campaign_under_an_old_id_starts_its_own_stream(transactional_db):
    """SQLite gives a rolled-back insert's id to the next one: the block reserved for the first
    campaign must not be handed out for the second (their counters both start at 0)."""
    blocks = PositionBlocks()
    first = new_campaign()
    assert blocks.take(first.pk, first.created_at, 3) == range(0, 3)
    pk = first.pk
    first.delete()
    second = new_campaign(pk=pk)
    assert blocks.take(second.pk, second.created_at, 3) == range(0, 3)
    assert blocks.take(second.pk, second.created_at, 3) == range(3, 6)
