"""Coordinator work on real Celery workers: pool sampling off the ASGI server, liveness on beat,
and the pool's sampling cost against its size."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.celery import app as celery_app
from swarm_app.coordinator.liveness import update_liveness
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode
from swarm_app.coordinator.pool import sample_external
from swarm_app.coordinator.tasks import sample_pool
from tests.coordinator.helpers import make_pool
from tests.servers import celery_worker
from worker.shared.campaign import CampaignConfig


@pytest.fixture
def campaign(transactional_db) -> Campaign:
    config = CampaignConfig(pool_window=12, external_strategy="nonzero_advantage").validate()
    return Campaign.objects.create(name="pool", state=Campaign.State.RUNNING, config=config.to_json())


def test_sampling_draws_recent_informative_rollouts_of_others(campaign):
    nodes = make_pool(campaign, nodes=3, per_node=10)  # sequences 1..30; window = last 12 (19..30)
    me = nodes[2]  # owns sequences 21..30
    drawn = sample_external(campaign.pk, me.pk, 10, rng=random.Random(0))
    sequences = sorted(int(r["rollout_id"][1:]) for r in drawn)
    assert sequences == [19, 20]  # in the window, not mine, not zero-advantage (21 is mine)
    uniform = sample_external(campaign.pk, nodes[0].pk, 10, strategy="uniform", rng=random.Random(0))
    drawn_uniform = [int(r["rollout_id"][1:]) for r in uniform]
    assert len(set(drawn_uniform)) == 10  # without replacement
    assert set(drawn_uniform) <= set(range(19, 31))  # only the window; zero-advantage ones allowed
    # Within a tier when the campaign says so: I move to tiny-5m, where only rollout 20 is.
    config = campaign.settings
    config.pool_within_tier = True
    Campaign.objects.filter(pk=campaign.pk).update(config=config.to_json())
    WorkerNode.objects.filter(pk=me.pk).update(tier="tiny-5m")
    PoolRollout.objects.filter(campaign=campaign, sequence=20).update(tier="tiny-5m")
    within = sample_external(campaign.pk, me.pk, 10, strategy="uniform", rng=random.Random(0))
    assert [r["rollout_id"] for r in within] == ["r20"]
    PoolRollout.objects.filter(node=nodes[1]).update(in_pool=False)  # banned node's rollouts
    assert sample_external(campaign.pk, me.pk, 10) == []


def test_pool_sampling_and_liveness_run_on_a_real_celery_worker(campaign, tmp_path):
    nodes = make_pool(campaign, nodes=2, per_node=6)
    celery_app.control.purge()
    healthy = nodes[0]
    WorkerNode.objects.filter(pk=healthy.pk).update(last_seen=timezone.now())
    WorkerNode.objects.filter(pk=nodes[1].pk).update(last_seen=timezone.now() - timedelta(seconds=45))
    with celery_worker(tmp_path / "celery.log", beat=True):
        drawn = sample_pool.delay(campaign.pk, nodes[0].pk, 3).get(timeout=60)
        assert len(drawn) == 3
        assert {r["agent_id"] for r in drawn} == {"n1"}
        deadline = time.monotonic() + 40
        while WorkerNode.objects.get(pk=nodes[1].pk).state != WorkerNode.State.STALE:
            assert time.monotonic() < deadline, (tmp_path / "celery.log").read_text()[-2000:]
            time.sleep(0.5)
    assert WorkerNode.objects.get(pk=healthy.pk).state == WorkerNode.State.HEALTHY


def test_liveness_moves_nodes_and_expires_leases(campaign):
    nodes = make_pool(campaign, nodes=3, per_node=1)
    now = timezone.now()
    for node, age in zip(nodes, (5, 60, 600), strict=True):
        WorkerNode.objects.filter(pk=node.pk).update(last_seen=now - timedelta(seconds=age))
    Lease.objects.filter(node=nodes[0]).update(state=Lease.State.ACTIVE, deadline=now - timedelta(seconds=1))
    result = update_liveness()
    states = [WorkerNode.objects.get(pk=n.pk).state for n in nodes]
    assert states == ["healthy", "stale", "offline"]
    assert result["expired_leases"] == 1
    assert Lease.objects.get(node=nodes[0]).state == Lease.State.EXPIRED
