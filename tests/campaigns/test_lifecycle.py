"""The lifecycle functions behind the organizer's buttons: launch and its control runs, the state
machine, pause/resume pushed to workers and dashboards, failure, completion."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer
from django.urls import reverse

from swarm_app.campaigns.broadcast import campaign_group, worker_group
from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.runs import lifecycle
from tests.campaigns.helpers import make_campaign
from worker.shared.campaign import ControlsConfig


def test_launch_creates_one_control_per_tier_arm_and_seed(db):
    campaign = make_campaign(tiers=["tiny-1m", "tiny-5m"], seed=10, controls=ControlsConfig(True, True, 2))
    runs = lifecycle.launch(campaign, enqueue=False)
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.RUNNING and campaign.started_at is not None
    keys = sorted((r.tier, r.arm, r.seed) for r in runs)
    assert keys == sorted(
        (tier, arm, seed)
        for tier in ("tiny-1m", "tiny-5m")
        for arm in ("isolated", "filtered")
        for seed in (10, 11)
    )
    assert all(r.state == ControlRun.State.QUEUED for r in runs)
    only_filtered = make_campaign(controls=ControlsConfig(isolated=False, filtered=True, seeds=1))
    assert [(r.arm, r.seed) for r in lifecycle.launch(only_filtered, enqueue=False)] == [("filtered", 0)]


def test_transitions_follow_the_state_machine(db):
    campaign = make_campaign()
    with pytest.raises(lifecycle.LifecycleError):
        lifecycle.pause(campaign)
    lifecycle.launch(campaign, enqueue=False)
    with pytest.raises(lifecycle.LifecycleError):
        lifecycle.launch(campaign, enqueue=False)
    lifecycle.pause(campaign)
    assert campaign.state == Campaign.State.PAUSED
    lifecycle.resume(campaign)
    assert campaign.state == Campaign.State.RUNNING
    lifecycle.stop(campaign)
    assert campaign.state == Campaign.State.STOPPED and campaign.finished_at is not None
    for action in (lifecycle.resume, lifecycle.pause, lifecycle.stop):
        with pytest.raises(lifecycle.LifecycleError):
            action(campaign)
    lifecycle.fail(campaign, "too late")  # a finished campaign keeps its first outcome
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.STOPPED and campaign.failure_reason == ""


def test_the_actions_each_state_allows_are_the_ones_the_lifecycle_performs(db, staff):
    """lifecycle.ACTIONS is the one definition of the state machine: for every stored state and
    action, the action succeeds exactly when allowed_actions() lists it, and the campaign page
    serves that table to the dashboard's script (which shows the buttons from it)."""
    perform = {
        "launch": lambda c: lifecycle.launch(c, enqueue=False),
        "pause": lifecycle.pause,
        "resume": lifecycle.resume,
        "stop": lifecycle.stop,
    }
    assert set(perform) == set(lifecycle.ACTIONS)
    for state in Campaign.State.values:
        for action, run in perform.items():
            campaign = make_campaign(state=state, controls=ControlsConfig(False, False, 0))
            try:
                run(campaign)
                performed = True
            except lifecycle.LifecycleError:
                performed = False
            assert performed == (action in lifecycle.allowed_actions(state)), (state, action)
    paused = make_campaign(state=Campaign.State.PAUSED)
    page = staff.get(reverse("campaign-detail", args=[paused.pk]))
    config = page.context["page_config"]
    assert config["actions_by_state"] == lifecycle.actions_by_state()
    assert config["actions_by_state"]["paused"] == ["resume", "stop"]


def test_the_buttons_move_the_campaign_and_say_so(staff):
    campaign = make_campaign(controls=ControlsConfig(False, False, 0))
    response = staff.post(reverse("campaign-launch", args=[campaign.pk]), follow=True)
    assert "is running" in response.content.decode()
    staff.post(reverse("campaign-pause", args=[campaign.pk]))
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.PAUSED
    response = staff.post(reverse("campaign-pause", args=[campaign.pk]), follow=True)
    assert "cannot make it paused" in response.content.decode()  # an error message, not a crash
    staff.post(reverse("campaign-resume", args=[campaign.pk]))
    staff.post(reverse("campaign-stop", args=[campaign.pk]))
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.STOPPED


def test_pause_and_resume_are_pushed_to_workers_and_dashboards(db):
    campaign = make_campaign()
    lifecycle.launch(campaign, enqueue=False)
    layer = get_channel_layer()

    async def listen():
        workers, viewers = await layer.new_channel(), await layer.new_channel()
        await layer.group_add(worker_group(campaign.pk), workers)
        await layer.group_add(campaign_group(campaign.pk), viewers)
        return workers, viewers

    async def receive(channel):
        return await asyncio.wait_for(layer.receive(channel), timeout=10)

    workers, viewers = asyncio.run(listen())
    lifecycle.pause(campaign)
    assert asyncio.run(receive(workers))["state"] == "paused"
    assert asyncio.run(receive(viewers)) == {"type": "campaign.state", "state": "paused", "reason": ""}
    lifecycle.resume(campaign)
    assert asyncio.run(receive(workers)) == {"type": "campaign.state", "state": "running", "reason": ""}


def test_a_failed_campaign_shows_its_reason(anonymous):
    campaign = make_campaign(state=Campaign.State.RUNNING)
    lifecycle.fail(campaign, "control isolated/tiny-1m/seed 0 failed: RuntimeError: out of memory")
    page = anonymous.get(campaign.get_absolute_url()).content.decode()
    assert "Failed:" in page and "RuntimeError: out of memory" in page
    assert 'id="failure" class="failure" hidden' not in page


def test_a_campaign_completes_when_every_live_node_and_control_is_done(
    db, django_capture_on_commit_callbacks, monkeypatch
):
    campaign = make_campaign(controls=ControlsConfig(True, False, 1), rounds=3)
    lifecycle.launch(campaign, enqueue=False)
    token, _ = create_token(campaign)
    node = WorkerNode.objects.create(campaign=campaign, node_id="n1", token=token, tier="tiny-1m", round=3)
    straggler = WorkerNode.objects.create(
        campaign=campaign, node_id="n2", token=token, tier="tiny-1m", round=1
    )
    assert lifecycle.complete_finished() == []  # a control still runs, a node lags
    ControlRun.objects.filter(campaign=campaign).update(state=ControlRun.State.COMPLETED, round=3)
    assert lifecycle.complete_finished() == []
    WorkerNode.objects.filter(pk=straggler.pk).update(
        state=WorkerNode.State.OFFLINE
    )  # gone: no longer waited for
    sent = []
    monkeypatch.setattr(lifecycle.celery_app, "send_task", lambda name, args: sent.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.complete_finished() == [campaign.pk]
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.COMPLETED and campaign.finished_at is not None
    # Once it has ended, its dashboard rollups are rebuilt from every row (exact final figures).
    assert sent == [("campaigns.rebuild_rollups", [campaign.pk])]
    node.refresh_from_db()  # completing the campaign leaves its nodes as they were
    assert (node.round, node.state) == (3, WorkerNode.State.HEALTHY)


def test_a_campaign_completes_after_its_finished_workers_have_left(db):
    # The demo's case: each worker leaves (offline) when it has run the rounds, and the last
    # control finishes later.
    campaign = make_campaign(controls=ControlsConfig(True, False, 1), rounds=3)
    lifecycle.launch(campaign, enqueue=False)
    token, _ = create_token(campaign)
    WorkerNode.objects.create(
        campaign=campaign, node_id="n1", token=token, tier="tiny-1m", round=3, state=WorkerNode.State.OFFLINE
    )
    WorkerNode.objects.create(
        campaign=campaign, node_id="n2", token=token, tier="tiny-1m", round=1, state=WorkerNode.State.BANNED
    )
    assert lifecycle.complete_finished() == []  # the control still runs
    ControlRun.objects.filter(campaign=campaign).update(state=ControlRun.State.COMPLETED, round=3)
    assert lifecycle.complete_finished() == [campaign.pk]
    # Nobody finished: every volunteer left early. The campaign waits for others.
    waiting = make_campaign(controls=ControlsConfig(False, False, 0), rounds=3)
    lifecycle.launch(waiting, enqueue=False)
    token, _ = create_token(waiting)
    WorkerNode.objects.create(
        campaign=waiting, node_id="n3", token=token, tier="tiny-1m", round=2, state=WorkerNode.State.OFFLINE
    )
    assert lifecycle.complete_finished() == []


def test_launch_queues_every_enabled_control_kind(db):
    """One run per tier x enabled kind x seed, the new kinds included; the count the demo's
    Celery concurrency uses is that number."""
    controls = ControlsConfig(isolated=True, filtered=False, seeds=2, self_replay=True, over_generation=True)
    campaign = make_campaign(tiers=["tiny-1m", "tiny-5m"], controls=controls)
    runs = lifecycle.launch(campaign, enqueue=False)
    assert sorted((r.tier, r.arm, r.seed) for r in runs) == sorted(
        (tier, arm, seed)
        for tier in ("tiny-1m", "tiny-5m")
        for arm in ("isolated", "self", "dyn")
        for seed in (0, 1)
    )
    assert campaign.settings.control_run_count() == len(runs) == 12
    none = make_campaign(controls=ControlsConfig(True, True, 0, self_replay=True))
    assert none.settings.control_kinds() == [] and lifecycle.launch(none, enqueue=False) == []


def test_control_arms_follow_the_campaign_and_default_off():
    """The new kinds are off unless chosen (existing campaigns are unchanged), cpu-demo runs
    plain and self-replay (issue #26), sapo-table turns them all on; each kind's agent runs worker.shared.arms.control_arm's arm,
    the self-replay window being the pool's share of one of 8 agents (at least 8 groups)."""
    from worker.shared.arms import control_arm, sharing_arm
    from worker.shared.campaign import CampaignConfig, ConfigError, cpu_demo_config, sapo_table_config

    assert CampaignConfig().control_kinds() == ["isolated", "filtered"]
    assert cpu_demo_config().control_kinds() == ["isolated", "self"]
    assert sapo_table_config().control_kinds() == ["isolated", "filtered", "self", "dyn"]
    config = CampaignConfig(num_local=4, num_external=4, pool_window=256)
    assert config.self_window() == 32
    assert CampaignConfig(pool_window=40).self_window() == 8  # the floor
    assert CampaignConfig(controls=ControlsConfig(self_window=5)).self_window() == 5
    for kind in ("isolated", "filtered", "self", "dyn"):
        arm = control_arm(kind, sharing_arm(4, 4), self_window=32)
        assert config.control_arm(kind) == arm
        agent = config.control_agent_config("tiny-1m", 3, kind)
        assert {key: getattr(agent, key) for key in arm.agent_overrides()} == arm.agent_overrides()
        assert agent.seed == 3 and agent.questions_per_round == 8  # the rest from the campaign
    assert config.control_agent_config("tiny-1m", 0, "self").replay == "self"
    assert config.control_agent_config("tiny-1m", 0, "dyn").max_questions == 16
    with pytest.raises(ConfigError, match="needs J >= 1"):
        CampaignConfig(num_external=0, controls=ControlsConfig(self_replay=True)).validate()
    with pytest.raises(ConfigError, match=r"controls\.self_window: must be between 0 and 4096"):
        CampaignConfig(controls=ControlsConfig(self_window=-1)).validate()
    # The headline's reference: one the campaign runs, or automatic (""): the first it runs.
    assert cpu_demo_config().controls.reference_kind() == "self"
    assert sapo_table_config().controls.reference_kind() == "isolated"
    with pytest.raises(ConfigError, match="must be one the campaign runs"):
        CampaignConfig(controls=ControlsConfig(reference="dyn")).validate()
    with pytest.raises(ConfigError, match=r"controls\.reference: choose one of '', 'isolated'"):
        CampaignConfig(controls=ControlsConfig(reference="other")).validate()
    assert ControlsConfig(isolated=False, self_replay=True).reference_kind() == "filtered"
    assert (
        CampaignConfig(controls=ControlsConfig(isolated=False)).validate().controls.reference_kind()
        == "filtered"
    )
    assert ControlsConfig(seeds=0).reference_kind() is None
