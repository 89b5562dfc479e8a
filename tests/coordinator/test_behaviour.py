"""The off-policy fields of a rollout record (schema version 2, ``behaviour``) through the real
coordinator: kept and served to other nodes in a campaign that turns the correction on, dropped
(the record stored as version 1) in one that does not, refused with the field named when wrong."""

from __future__ import annotations

import pytest

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import PoolRollout
from swarm_app.coordinator.tokens import create_token
from tests.coordinator.helpers import G, expect_error, run, stored_state, submit_round
from tests.wsclient import RawSession
from worker.shared.campaign import CampaignConfig


def with_behaviour(records: list[dict]) -> list[dict]:
    """Each record with made-up generator ids and log-probs, one per counted token."""
    out = []
    for i, record in enumerate(records):
        tokens = record["completion_tokens"]
        out.append(
            {
                **record,
                "schema_version": 2,
                "behaviour": {
                    "prompt_ids": [1, 2, 3, i],
                    "completion_ids": [[10 + g] * n for g, n in enumerate(tokens)],
                    "logp": [[-0.25 * (g + 1)] * n for g, n in enumerate(tokens)],
                },
            }
        )
    return out


def share_and_sample(url: str, token: str, mix, rollouts=with_behaviour) -> tuple[list[dict], list[dict]]:
    """node-a submits its round 0 (records from ``rollouts``); node-b samples; (sent, received)."""

    async def scenario():
        a = await RawSession.open(url)
        assert (await a.hello(token, "node-a"))["type"] == "welcome"
        sent: list[dict] = []

        def edit(records: list[dict]) -> list[dict]:
            sent[:] = rollouts(records)
            return sent

        ack = await submit_round(a, "node-a", mix, edit=edit)
        assert ack["type"] == "submit_ack", ack
        b = await RawSession.open(url)
        assert (await b.hello(token, "node-b"))["type"] == "welcome"
        samples = await b.request("sample_request", round=0, count=len(sent))
        assert samples["type"] == "samples", samples
        await a.close()
        await b.close()
        return sent, samples["rollouts"]

    return run(scenario())


@pytest.fixture
def correcting(transactional_db) -> Campaign:
    config = CampaignConfig(
        group_size=G,
        questions_per_round=2,
        num_local=2,
        num_external=2,
        rounds=10,
        grpo={"external_importance_sampling_correction": True},
    )
    return Campaign.objects.create(
        name="correcting", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )


def test_a_correcting_campaign_keeps_and_serves_the_generators_log_probs(coordinator, correcting):
    token = create_token(correcting, "test")[1]
    sent, received = share_and_sample(coordinator, token, correcting.settings.mix)
    by_id = {r["rollout_id"]: r for r in received}
    assert sorted(by_id) == sorted(r["rollout_id"] for r in sent)
    for record in sent:
        served = by_id[record["rollout_id"]]
        assert served["schema_version"] == 2 and served["behaviour"] == record["behaviour"]


def test_other_campaigns_store_the_record_without_them_as_version_1(coordinator, campaign, token):
    _, received = share_and_sample(coordinator, token, campaign.settings.mix)
    assert received and all("behaviour" not in r and r["schema_version"] == 1 for r in received)
    stored = PoolRollout.objects.filter(campaign=campaign)
    assert stored.count() == 2 and all("behaviour" not in p.record for p in stored)


def test_log_probs_that_do_not_match_the_tokens_are_refused_and_nothing_is_stored(coordinator, correcting):
    token = create_token(correcting, "test")[1]
    before = stored_state(correcting)

    def short(records: list[dict]) -> list[dict]:
        bad = with_behaviour(records)
        bad[1]["behaviour"]["logp"][0] = bad[1]["behaviour"]["logp"][0][:-1]
        return bad

    async def scenario():
        a = await RawSession.open(coordinator)
        assert (await a.hello(token, "node-a"))["type"] == "welcome"
        reply = await submit_round(a, "node-a", correcting.settings.mix, edit=short)
        await a.close()
        return reply

    expect_error(run(scenario()), "invalid_message", "rollouts[1].behaviour")
    after = stored_state(correcting)
    assert after["rollouts"] == before["rollouts"] and after["metrics"] == before["metrics"]
