"""Isolated controls are worker nodes: Celery starts them on the ``controls`` queue as
``swarm-worker join`` processes; they speak the protocol, are re-scored by the coordinator, keep
their rollouts out of every pool, pair their arms, survive a SIGKILL from their checkpoint on
either of two Celery workers, and never hold up beat's housekeeping."""

from __future__ import annotations

import itertools
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.celery import app as celery_app
from swarm_app.coordinator.models import Lease, PoolRollout, WorkerNode, WorkerToken
from swarm_app.coordinator.tokens import renew_control_token
from swarm_app.runs import controls, lifecycle
from swarm_app.runs.local_workers import training_command
from swarm_app.web import dashboard
from tests.coordinator.helpers import honest_rollouts, run
from tests.factories import tiny_campaign_config
from tests.servers import celery_worker
from tests.wsclient import RawSession
from worker.shared.campaign import ControlsConfig
from worker.shared.paired import control_stream, round_refs

pytestmark = pytest.mark.slow


def campaign_of(rounds: int, controls: ControlsConfig, name: str = "controls", **overrides) -> Campaign:
    config = tiny_campaign_config(rounds, max_new_tokens=8, controls=controls, **overrides)
    return Campaign.objects.create(name=name, state=Campaign.State.PENDING, config=config.to_json())


def wait_for(condition, timeout: float, what: str, *logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {log}\n{log.read_text()[-3000:]}" for log in logs if log.exists())
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")
        time.sleep(0.3)


def states(campaign: Campaign) -> set[str]:
    return set(ControlRun.objects.filter(campaign=campaign).values_list("state", flat=True))


def rewards_by_round(run: ControlRun) -> list[tuple[int, float]]:
    return list(RoundMetrics.objects.filter(control_run=run).order_by("round").values_list("round", "reward"))


@pytest.fixture
def control_env(coordinator, tiny_1m_dir, tmp_path) -> dict[str, str]:
    """What a Celery worker of the controls queue needs: the coordinator's address, the shared
    models, and one directory for the controls' nodes that every worker of the queue shares."""
    celery_app.control.purge()
    return {
        "SWARM_CONTROL_URL": coordinator,
        "SWARM_MODEL_CACHE": str(tiny_1m_dir.parent),
        "SWARM_CONTROL_DATA_DIR": str(tmp_path / "controls"),
    }


def test_every_control_kind_is_a_node_paired_rescored_and_out_of_the_pool(control_env, tmp_path):
    """All four kinds, one seed, on a real controls worker: each is a worker node with its arm;
    round 0 is the same for every kind (paired questions and seeds); the reward shown is the
    coordinator's mean verified reward of the round's paired questions; nothing entered the
    pool; self-replay trains on its own window, over-generation generates beyond B."""
    rounds = 2
    kinds = ControlsConfig(isolated=True, filtered=True, self_replay=True, over_generation=True, seeds=1)
    campaign = campaign_of(rounds, kinds)
    config = campaign.settings
    lifecycle.launch(campaign)
    log = tmp_path / "controls.log"
    with celery_worker(log, controls=4, **control_env):
        wait_for(lambda: states(campaign) == {"completed"}, 300, "every control completed", log)
    runs = {run.arm: run for run in ControlRun.objects.filter(campaign=campaign)}
    assert sorted(runs) == ["dyn", "filtered", "isolated", "self"]
    rows = {(m.arm, m.round): m for m in RoundMetrics.objects.filter(campaign=campaign)}
    assert sorted(rows) == [(arm, r) for arm in sorted(runs) for r in range(rounds)]
    for arm, control in runs.items():
        node = WorkerNode.objects.get(control_run=control)
        assert (node.arm, node.tier, node.node_id, node.round) == (
            arm,
            "tiny-1m",
            f"control-{control.pk}",
            rounds,
        )
        for number in range(rounds):
            row = rows[(arm, number)]
            assert row.agent == f"control:{control.pk}" and row.node_id == node.pk
            # The coordinator's reward: the verified rewards of the round's paired questions.
            refs = [r.to_json() for r in round_refs(config.mix, control_stream(control.seed), number, 4)]
            leases = Lease.objects.filter(node=node, round=number, state="submitted", questions=refs)
            verified = leases.order_by("-id").first().ack["verified_rewards"]
            assert row.reward == pytest.approx(sum(sum(g) / len(g) for g in verified) / len(verified))
            assert row.metrics["batch/external_from_others"] == 0
    assert not PoolRollout.objects.filter(campaign=campaign).exists()
    assert len({rows[(arm, 0)].reward for arm in runs}) == 1  # paired: one first round
    batch = config.num_local + config.num_external
    for number in range(rounds):
        own, dyn = rows[("self", number)].metrics, rows[("dyn", number)].metrics
        assert own["generation/questions"] == config.questions_per_round
        if number >= 1:
            assert own["batch/external_used"] > 0, own  # replayed from its own window
        assert dyn["batch/external_used"] == 0
        assert config.questions_per_round <= dyn["generation/questions"] <= 2 * batch
        assert dyn["batch/informative_groups"] == batch or dyn["generation/questions"] == 2 * batch, dyn
    assert any(
        rows[("dyn", r)].metrics["generation/questions"] > config.questions_per_round for r in range(rounds)
    )


def test_the_dashboard_shows_the_rescored_reward_not_the_control_nodes_claim(coordinator):
    """A control node that reports a reward other than the one it generated: the stored reward,
    the dashboard and the node's row are the coordinator's verified mean."""
    config = tiny_campaign_config(3, max_new_tokens=8, controls=ControlsConfig(isolated=True, filtered=False))
    campaign = Campaign.objects.create(name="claims", state=Campaign.State.RUNNING, config=config.to_json())
    control = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=7)
    secret = renew_control_token(control)

    async def round_zero() -> tuple[dict, dict, dict]:
        s = await RawSession.open(coordinator)
        welcome = await s.hello(secret, "control-x", protocol_versions=[2])
        lease = await s.request("lease_request", round=0)
        records = honest_rollouts(lease, "control-x", "tiny-1m", config.mix)
        ack = await s.request("submit", submission_id="s0", lease_id=lease["lease_id"], rollouts=records)
        report = await s.request("metrics", round=0, metrics={"reward": 0.99, "loss": 0.5})
        await s.close()
        return welcome, ack, report

    welcome, ack, report = run(round_zero())
    assert welcome["control"] == {"arm": "isolated", "seed": 7}
    assert ack["samples"] == []  # a control draws nothing
    assert report["type"] == "metrics_ack" and report["next_lease"]["round"] == 1
    verified = ack["verified_rewards"]
    truth = sum(sum(g) / len(g) for g in verified) / len(verified)
    assert truth != pytest.approx(0.99)
    row = RoundMetrics.objects.get(campaign=campaign)
    assert (row.arm, row.agent, row.reward) == ("isolated", f"control:{control.pk}", pytest.approx(truth))
    payload = dashboard.dashboard_payload(campaign)
    shown = payload["series"]["tiny-1m"]["isolated"]["mean"][0]
    assert shown == pytest.approx(truth)
    # the paired questions of seed 7, not the campaign's stream
    expected = [r.to_json() for r in round_refs(config.mix, control_stream(7), 0, config.questions_per_round)]
    assert Lease.objects.get(round=0).questions == expected
    assert not PoolRollout.objects.filter(campaign=campaign).exists()


def node_process(control: ControlRun) -> psutil.Process | None:
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "join" in cmdline and f"control-{control.pk}" in cmdline:
            return process
    return None


def test_a_killed_control_node_resumes_from_its_checkpoint_on_either_worker_deterministically(
    control_env, tmp_path, settings
):
    """Two Celery workers of the controls queue with data directories of their own (the
    controls' directory shared; in embedded mode the broker lives in the data directory, so
    there the two share it: separate machines need Redis). Two campaigns with the same settings run the same control seed;
    one's node is killed (SIGKILL) mid-run, is started again by a task on either worker, and
    resumes from its checkpoint: every round stored once, and the same per-round rewards as the
    uninterrupted copy (the same seed run twice gives the same rewards)."""
    rounds = 6
    kinds = ControlsConfig(isolated=True, filtered=False, seeds=1)
    calm = campaign_of(rounds, kinds, name="uninterrupted")
    killed = campaign_of(rounds, kinds, name="killed")
    for campaign in (calm, killed):
        lifecycle.launch(campaign)
    victim = ControlRun.objects.get(campaign=killed)
    logs = [tmp_path / "controls-a.log", tmp_path / "controls-b.log"]
    own = [{"SWARM_DATA_DIR": str(tmp_path / name)} if not settings.EMBEDDED else {} for name in "ab"]
    with (
        celery_worker(logs[0], controls=2, **own[0], **control_env),
        celery_worker(logs[1], controls=2, **own[1], **control_env),
    ):
        wait_for(lambda: ControlRun.objects.get(pk=victim.pk).round >= 2, 180, "the victim at round 2", *logs)
        process = node_process(victim)
        assert process is not None
        process.send_signal(signal.SIGKILL)
        killed_at = ControlRun.objects.get(pk=victim.pk).round
        wait_for(
            lambda: states(calm) | states(killed) == {"completed"}, 300, "both controls completed", *logs
        )
    victim.refresh_from_db()
    assert victim.attempts == 2 and killed_at < rounds
    calm_run = ControlRun.objects.get(campaign=calm)
    assert [r for r, _ in rewards_by_round(victim)] == list(range(rounds))  # none missing, none twice
    assert rewards_by_round(victim) == rewards_by_round(calm_run)
    log = (Path(control_env["SWARM_CONTROL_DATA_DIR"])).glob(f"*/control-{victim.pk}/node.log")
    text = next(log).read_text()
    assert re.search(r"resumed from .*\(round [1-9]", text), text[-2000:]
    assert "starting it again" in logs[0].read_text() + logs[1].read_text()


def beat_runs(log: Path, task: str) -> list[datetime]:
    """When ``task`` started on the worker of ``log`` (Celery's "Task ... received" lines)."""
    times = []
    for line in log.read_text().splitlines():
        if f"Task {task}[" in line and "received" in line:
            stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)", line)
            if stamp:
                times.append(datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return times


def test_housekeeping_runs_on_time_while_more_controls_than_slots_wait(control_env, tmp_path):
    """Three control seeds and a controls worker of one slot: the controls run one after
    another, and beat's tasks (liveness, completion, archive) run on schedule meanwhile on the
    housekeeping worker, none dropped for expiry."""
    campaign = campaign_of(4, ControlsConfig(isolated=True, filtered=False, seeds=3))
    lifecycle.launch(campaign)
    housekeeping, controls_log = tmp_path / "celery.log", tmp_path / "controls.log"
    with (
        celery_worker(housekeeping, beat=True, POOL_ARCHIVE_SECONDS="2", **control_env),
        celery_worker(controls_log, controls=1, **control_env),
    ):
        wait_for(
            lambda: states(campaign) == {"completed"},
            300,
            "every control completed",
            housekeeping,
            controls_log,
        )
    started = min(beat_runs(controls_log, "campaigns.run_control"))
    ended = max(beat_runs(controls_log, "campaigns.run_control"))
    assert len(beat_runs(controls_log, "campaigns.run_control")) == 3  # one after another
    for task, period in (
        ("coordinator.update_liveness", 10),
        ("campaigns.complete_finished", 10),
        ("coordinator.archive_pool", 2),
    ):
        runs = [t for t in beat_runs(housekeeping, task) if started <= t <= ended]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(runs)]
        assert runs and max(gaps, default=0) <= period + 3, (task, gaps)
    assert "Discarding revoked task" not in housekeeping.read_text()  # how Celery drops an expired one


def test_beat_starts_again_a_running_control_whose_node_went_offline(db, monkeypatch):
    """A controls worker that died with its node: the node's own liveness (offline) re-queues
    the control, once; a control whose node is alive, or whose campaign ended, is left alone."""
    config = tiny_campaign_config(4, max_new_tokens=8, controls=ControlsConfig(isolated=True, seeds=3))
    campaign = Campaign.objects.create(name="liveness", state=Campaign.State.RUNNING, config=config.to_json())
    runs = [
        ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=s, state="running")
        for s in range(3)
    ]
    token = WorkerToken.objects.create(campaign=campaign, token_hash="x" * 64, prefix="x")
    for run_, state in zip(runs, ["offline", "healthy", "stale"], strict=True):
        WorkerNode.objects.create(
            campaign=campaign,
            node_id=f"control-{run_.pk}",
            token=token,
            tier="tiny-1m",
            arm="isolated",
            control_run=run_,
            state=state,
        )
    enqueued = []
    monkeypatch.setattr(lifecycle, "enqueue_control", lambda run_: enqueued.append(run_.pk))
    assert controls.requeue_offline() == [runs[0].pk] and enqueued == [runs[0].pk]
    assert ControlRun.objects.get(pk=runs[0].pk).state == "queued"
    assert controls.requeue_offline() == []  # queued once, not at every beat
    Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.State.STOPPED)
    WorkerNode.objects.filter(control_run=runs[1]).update(state="offline")
    assert controls.requeue_offline() == [] and ControlRun.objects.get(pk=runs[1].pk).state == "stopped"


def test_a_control_whose_python_lacks_torch_fails_the_campaign_saying_what_to_install(
    transactional_db, settings, tmp_path
):
    """The controls' Python without the worker extra (a Python whose torch import fails stands in
    for it): the node exits at once, and after CONTROL_MAX_STARTS the campaign fails with the
    node's own last line, which names the worker extra."""
    shadow = tmp_path / "no-torch"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('torch is not installed here')\n")
    python = tmp_path / "python-without-torch"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={shadow} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    settings.CONTROL_PYTHON, settings.CONTROL_MAX_STARTS = str(python), 1
    settings.CONTROL_DATA_DIR = tmp_path / "controls"
    config = tiny_campaign_config(3, max_new_tokens=8, controls=ControlsConfig(isolated=True, filtered=False))
    campaign = Campaign.objects.create(name="no torch", state=Campaign.State.RUNNING, config=config.to_json())
    control = ControlRun.objects.create(
        campaign=campaign, tier="tiny-1m", arm="isolated", seed=0, task_id="t1"
    )
    assert controls.run_control(control.pk, "t1") == "failed"
    campaign.refresh_from_db()
    assert campaign.state == Campaign.State.FAILED
    assert campaign.failure_reason.startswith(
        "control isolated/tiny-1m/seed 0 failed: its node exited with status 2 1 times, last at round 0: "
        "swarm-worker: error: torch is not installed here: "
    ), campaign.failure_reason
    assert "worker extra" in campaign.failure_reason
    assert controls.run_control(control.pk, "t1") == "done"  # a failed control is not started again


def test_every_training_process_runs_one_node_one_thread_at_the_training_niceness(settings, tmp_path):
    """The one command line of the demo's workers, the form's local workers and every control
    node: the same share per agent, below the coordinator's own processes."""
    settings.TRAINING_NICE = 10
    command = training_command("python", "http://127.0.0.1:8000/", tmp_path)
    options = {flag: command[command.index(flag) + 1] for flag in ("--nodes", "--threads", "--nice")}
    assert command[:5] == ["python", "-m", "worker.cli", "join", "http://127.0.0.1:8000/"]
    assert (options["--nodes"], options["--threads"], options["--nice"]) == ("1", "1", "10")
    assert "--no-status" in command
