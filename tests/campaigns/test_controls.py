"""Isolated controls: the same engine as a node with J = 0, paired arms, checkpoints, the claim
that keeps two copies of a run apart, and a real Celery worker killed and restarted mid-run."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.celery import app as celery_app
from swarm_app.runs import controls, lifecycle
from tests.factories import tiny_campaign_config
from tests.servers import celery_worker
from worker.shared.campaign import ControlsConfig

pytestmark = pytest.mark.slow


def tiny_campaign(rounds: int, state: str = Campaign.State.RUNNING, seeds: int = 1) -> Campaign:
    config = tiny_campaign_config(
        rounds, max_new_tokens=8, controls=ControlsConfig(isolated=True, filtered=True, seeds=seeds)
    )
    return Campaign.objects.create(name="controls", state=state, config=config.to_json())


def wait_for(condition, timeout: float, what: str, log=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tail}")
        time.sleep(0.3)


@pytest.fixture
def checkpoints(settings, tmp_path, monkeypatch, tiny_1m_dir):
    """Checkpoints in this test's directory; models from the shared cache."""
    settings.DATA_DIR = tmp_path
    monkeypatch.setenv("SWARM_MODEL_CACHE", str(tiny_1m_dir.parent))
    return tmp_path / "checkpoints" / "controls"


# --- the claim ----------------------------------------------------------------------------------


def test_a_run_is_claimed_by_one_task_at_a_time(db, settings):
    settings.CONTROL_STALE_SECONDS = 30
    campaign = tiny_campaign(3)
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    assert controls.claim(run.pk, "task-a")
    assert not controls.claim(run.pk, "task-b")  # held
    assert controls.touch(run.pk, "task-a") and not controls.touch(run.pk, "task-b")
    ControlRun.objects.filter(pk=run.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert controls.claim(run.pk, "task-b")  # the holder's lease ran out: taken over
    assert not controls.touch(run.pk, "task-a")  # the old holder learns it lost the run
    run.refresh_from_db()
    assert (run.claimed_by, run.attempts, run.state) == ("task-b", 2, "running")
    controls.release(run.pk, "task-b", state=ControlRun.State.COMPLETED)
    assert not controls.claim(run.pk, "task-c")  # finished runs are never claimed again
    assert controls.run_control(run.pk, "task-c") == "busy"
    assert controls.run_control(10**9, "task-c") == "missing"  # a task of a deleted campaign


def test_stale_runs_are_requeued_and_those_of_ended_campaigns_closed(db, monkeypatch):
    enqueued = []
    monkeypatch.setattr(lifecycle, "enqueue_control", lambda run: enqueued.append(run.pk))
    live = tiny_campaign(3)
    ended = tiny_campaign(3, state=Campaign.State.STOPPED)
    old = timezone.now() - timedelta(minutes=5)
    stale = ControlRun.objects.create(campaign=live, tier="tiny-1m", arm="isolated", seed=0, state="running")
    fresh = ControlRun.objects.create(campaign=live, tier="tiny-1m", arm="filtered", seed=0, state="running")
    orphan = ControlRun.objects.create(
        campaign=ended, tier="tiny-1m", arm="isolated", seed=0, state="running"
    )
    ControlRun.objects.filter(pk__in=[stale.pk, orphan.pk]).update(
        updated_at=old, claimed_by="dead", lease_until=old
    )
    assert controls.requeue_stale() == [stale.pk] and enqueued == [stale.pk]
    stale.refresh_from_db()
    orphan.refresh_from_db()
    fresh.refresh_from_db()
    assert (stale.state, stale.claimed_by) == ("queued", "")
    assert orphan.state == "stopped" and fresh.state == "running"
    assert controls.requeue_stale() == []  # re-enqueued once, not on every beat


# --- the run, in this process -------------------------------------------------------------------


def test_controls_train_paired_arms_checkpoint_and_resume(transactional_db, checkpoints):
    campaign = tiny_campaign(3)
    isolated = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    filtered = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="filtered", seed=0)
    assert controls.run_control(isolated.pk, "owner") == "completed"
    assert controls.run_control(filtered.pk, "owner") == "completed"
    rows = {
        (m.arm, m.round): m
        for m in RoundMetrics.objects.filter(campaign=campaign).select_related("control_run")
    }
    assert sorted(rows) == [(arm, r) for arm in ("filtered", "isolated") for r in range(3)]
    # Paired: the same questions, weights and generation seeds, so round 0 is identical.
    assert rows[("isolated", 0)].reward == rows[("filtered", 0)].reward
    assert (
        rows[("isolated", 0)].metrics["completions/mean_length"]
        == rows[("filtered", 0)].metrics["completions/mean_length"]
    )
    for (arm, _), row in rows.items():
        assert row.agent == f"control:{row.control_run_id}" and row.tier == "tiny-1m"
        assert row.metrics["batch/external_used"] == 0  # J = 0
        assert row.metrics["batch/local_used"] <= 4  # I + J of the campaign
        if arm == "isolated":
            assert row.metrics["batch/local_used"] == 4 and row.metrics["filtered/local"] == 0
    isolated.refresh_from_db()
    assert (isolated.state, isolated.round, isolated.claimed_by, isolated.resumed_from) == (
        "completed",
        3,
        "",
        None,
    )
    assert controls.checkpoint_path(isolated).exists()
    assert controls.checkpoint_path(isolated).is_relative_to(checkpoints)
    # Two more rounds: the run resumes from its checkpoint at round 3, not from scratch.
    config = campaign.config | {"rounds": 5}
    Campaign.objects.filter(pk=campaign.pk).update(config=config)
    ControlRun.objects.filter(pk=isolated.pk).update(state="queued")
    assert controls.run_control(isolated.pk, "owner-2") == "completed"
    isolated.refresh_from_db()
    assert (isolated.resumed_from, isolated.round, isolated.attempts) == (3, 5, 2)
    assert RoundMetrics.objects.filter(control_run=isolated).count() == 5


def test_a_paused_control_waits_heartbeating_and_a_stopped_one_exits(transactional_db, checkpoints, settings):
    settings.CONTROL_STALE_SECONDS = 2.0  # heartbeat every 0.5 s
    campaign = tiny_campaign(50, state=Campaign.State.PAUSED)
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    outcome = []

    def target() -> None:
        try:
            outcome.append(controls.run_control(run.pk, "owner"))
        finally:
            connection.close()  # this thread's own (Celery's Django fixup does it for tasks)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        wait_for(lambda: ControlRun.objects.get(pk=run.pk).state == "running", 60, "the claim")
        first = ControlRun.objects.get(pk=run.pk).updated_at
        time.sleep(2.5)
        run.refresh_from_db()
        assert run.updated_at > first  # heartbeating while it waits
        assert not RoundMetrics.objects.filter(campaign=campaign).exists()  # paused: no rounds
        Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.State.RUNNING)
        wait_for(lambda: RoundMetrics.objects.filter(campaign=campaign).count() >= 2, 60, "two rounds")
        lifecycle.stop(Campaign.objects.get(pk=campaign.pk))
        thread.join(timeout=60)
    finally:
        Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.State.STOPPED)
        thread.join(timeout=60)
    assert outcome == ["stopped"]
    run.refresh_from_db()
    assert run.state == "stopped" and run.claimed_by == "" and 2 <= run.round < 50


def test_a_crashing_control_fails_the_campaign_with_its_reason(transactional_db, checkpoints):
    """The training process's own error reaches the campaign: a damaged checkpoint."""
    campaign = tiny_campaign(3)
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="filtered", seed=0)
    path = controls.checkpoint_path(run)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a checkpoint")
    assert controls.run_control(run.pk, "owner") == "failed"
    run.refresh_from_db()
    campaign.refresh_from_db()
    assert run.state == "failed" and "agent.load(spec.checkpoint)" in run.error  # its traceback
    assert campaign.state == Campaign.State.FAILED
    assert campaign.failure_reason == (
        "control filtered/tiny-1m/seed 0 failed: UnpicklingError: invalid load key, 'n'."
    )
    assert not RoundMetrics.objects.filter(campaign=campaign).exists()


def test_a_control_without_the_worker_packages_fails_with_the_install_line(
    transactional_db, checkpoints, settings, tmp_path
):
    """A coordinator installed without the worker extra: the control's process says what to
    install instead of a bare traceback (a Python whose torch import fails stands in for it)."""
    shadow = tmp_path / "no-torch"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('torch is not installed here')\n")
    python = tmp_path / "python-without-torch"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={shadow} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    settings.CONTROL_PYTHON = str(python)
    campaign = tiny_campaign(3)
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    assert controls.run_control(run.pk, "owner") == "failed"
    campaign.refresh_from_db()
    assert campaign.failure_reason.startswith(
        "control isolated/tiny-1m/seed 0 failed: ImportError: torch is not installed here: "
    )
    assert "pip install 'swarm-sapo[worker]'" in campaign.failure_reason


# --- on a real Celery worker --------------------------------------------------------------------


def test_controls_run_on_celery_and_resume_after_the_worker_is_killed(
    transactional_db, tiny_1m_dir, tmp_path
):
    """Launch a short campaign: both control arms run on a real Celery worker (solo pool: one
    after the other) and store their metrics. The worker is killed (SIGKILL, no goodbye) in the
    middle of a run; a new worker's beat finds the stale heartbeat, re-enqueues the run, and it
    resumes from its checkpoint."""
    rounds = 8
    campaign = tiny_campaign(rounds)
    Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.State.PENDING)
    campaign.refresh_from_db()
    celery_app.control.purge()
    env = {"SWARM_CONTROL_STALE_SECONDS": "6", "SWARM_MODEL_CACHE": str(tiny_1m_dir.parent)}
    log = tmp_path / "celery.log"
    lifecycle.launch(campaign)
    runs = list(ControlRun.objects.filter(campaign=campaign))
    assert sorted(r.arm for r in runs) == ["filtered", "isolated"] and all(r.task_id for r in runs)

    def progress() -> dict[int, int]:
        return dict(ControlRun.objects.filter(campaign=campaign).values_list("pk", "round"))

    with celery_worker(log, beat=True, **env) as worker:
        wait_for(lambda: max(progress().values()) >= 3, 180, "a control at round 3", log)
        victim = max(progress().items(), key=lambda item: item[1])[0]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    killed_at = ControlRun.objects.get(pk=victim).round
    assert ControlRun.objects.get(pk=victim).state == "running"  # nobody said goodbye
    with celery_worker(tmp_path / "celery-2.log", beat=True, **env):
        wait_for(
            lambda: (
                set(ControlRun.objects.filter(campaign=campaign).values_list("state", flat=True))
                == {"completed"}
            ),
            240,
            "both controls completed",
            tmp_path / "celery-2.log",
        )
    resumed = ControlRun.objects.get(pk=victim)
    assert (
        resumed.attempts >= 2 and resumed.resumed_from is not None and resumed.resumed_from >= killed_at - 1
    )
    assert resumed.resumed_from > 0  # from its checkpoint, not from scratch
    for run in ControlRun.objects.filter(campaign=campaign):
        assert run.round == rounds
        assert sorted(RoundMetrics.objects.filter(control_run=run).values_list("round", flat=True)) == list(
            range(rounds)
        )
    assert "re-enqueued" in (tmp_path / "celery-2.log").read_text()


def test_self_replay_and_over_generation_controls_run_on_celery(transactional_db, tiny_1m_dir, tmp_path):
    """Issue #18's controls on a real Celery worker, tiny-1m, 2 rounds, checked from the stored
    metrics: the self-replay control trains on J groups of its own from round 1 on and never on
    another agent's; the over-generation control generates at least B questions, more until it
    holds I + J informative groups (or reaches its cap of 2 (I + J)), and shares nothing."""
    rounds = 2
    config = tiny_campaign_config(
        rounds,
        max_new_tokens=8,
        controls=ControlsConfig(
            isolated=False, filtered=False, seeds=1, self_replay=True, over_generation=True
        ),
    )
    campaign = Campaign.objects.create(
        name="new controls", state=Campaign.State.PENDING, config=config.to_json()
    )
    celery_app.control.purge()
    lifecycle.launch(campaign)
    assert sorted(ControlRun.objects.filter(campaign=campaign).values_list("arm", flat=True)) == [
        "dyn",
        "self",
    ]
    log = tmp_path / "celery.log"
    with celery_worker(log, SWARM_MODEL_CACHE=str(tiny_1m_dir.parent)):
        wait_for(
            lambda: (
                set(ControlRun.objects.filter(campaign=campaign).values_list("state", flat=True))
                == {"completed"}
            ),
            240,
            "both controls completed",
            log,
        )
    rows = {(m.arm, m.round): m.metrics for m in RoundMetrics.objects.filter(campaign=campaign)}
    assert sorted(rows) == [(arm, r) for arm in ("dyn", "self") for r in range(rounds)]
    batch = config.num_local + config.num_external
    for number in range(rounds):
        own = rows[("self", number)]
        assert own["batch/external_from_others"] == 0 and own["batch/external_from_self"] == 0
        assert (
            own["batch/local_used"] <= config.num_local and own["batch/external_used"] <= config.num_external
        )
        assert own["generation/questions"] == config.questions_per_round  # no extra generation
        if number >= 1:
            assert own["batch/external_used"] > 0, own  # replayed from its own window
            assert own["batch/external_age"] >= 0
        dyn = rows[("dyn", number)]
        assert dyn["batch/external_used"] == 0 and dyn["batch/external_from_others"] == 0
        assert config.questions_per_round <= dyn["generation/questions"] <= 2 * batch
        # it stops generating once it holds I + J informative groups, or at its cap
        assert dyn["batch/informative_groups"] == batch or dyn["generation/questions"] == 2 * batch, dyn
        assert dyn["batch/local_used"] <= batch
    # this seed's first B questions hold fewer than I + J informative groups: it over-generated
    assert any(rows[("dyn", r)]["generation/questions"] > config.questions_per_round for r in range(rounds))
    # Compute on the page (issue #29 item 3): what each arm generated and trained on, per round
    # and agent, from the rollups, with its n; over-generation paid in completions.
    from swarm_app.web import dashboard

    mechanism = dashboard.dashboard_payload(campaign)["mechanism"]["tiny-1m"]["arms"]
    for arm in ("self", "dyn"):
        assert mechanism[arm]["generation/completions"]["agents"] == 1
        assert mechanism[arm]["train/tokens"]["mean"] > 0
    assert (
        mechanism["dyn"]["generation/completions"]["mean"]
        > mechanism["self"]["generation/completions"]["mean"]
    )
