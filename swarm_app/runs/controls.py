"""Isolated controls: worker nodes with an arm, started and supervised by Celery.

For each tier and seed a campaign runs the controls it enabled (ControlsConfig; the kinds of
worker/shared/arms.py, for the swarm's arm I/J):

* *isolated* (I + J)/0: the SAPO paper's 8/0 baseline, I + J own groups, uniform;
* *filtered* (I + J)/0-filtered: the same with zero-advantage groups dropped; a sanity arm only
  (with B = I + J the filter can only delete groups that give zero gradient anyway);
* *self* I/J-self: I own groups of the round plus J from the agent's own recent window (the
  same age as the pool's): same batch and staleness as the swarm, no other agent;
* *dyn* (I + J)/0-dyn: over-generation until I + J informative groups (at most 2 (I + J)
  questions): the same batch as the swarm bought with more generation (generation/questions).

A control is a ``swarm-worker join`` process, like a volunteer's: the same program, websocket
protocol, leases, verified submissions, metrics, checkpoints and liveness. Its token (one per
control run, a new secret at every start: tokens.renew_control_token) tells the coordinator
which control it is; the coordinator gives it its seed's paired questions, keeps its rollouts
out of every pool, draws nothing for it and re-scores its reward (coordinator/control_nodes.py).

Celery runs each control as a task on the ``controls`` queue (:func:`run_control`): the task
starts the node process on the machine of the Celery worker that took it, connected to the
coordinator at ``settings.CONTROL_URL`` like any volunteer, and waits for it. Beat's
housekeeping runs on the default queue, so a control never holds a slot that housekeeping needs
(docs/deploy.md). The process's data directory (identity and checkpoint) is
``<CONTROL_DATA_DIR>/campaign-<id>-<created>/control-<run id>/``; where several machines serve
the queue, CONTROL_DATA_DIR must be a directory they share, so that a restarted control resumes
from its checkpoint wherever it restarts.

Pairing: every kind of one seed answers the same questions (the paired stream) with the same
generation seeds (the agent's ``seed_id``, ``control-<tier>-seed<seed>``), so in round 0 they
generate the very same first B groups; what differs afterwards comes from the arm alone.

Surviving a dead node:

* the node checkpoints every round before it reports the round (worker/client/volunteer.py),
  so a restarted node repeats at most the round it was killed in, with the same questions and
  seeds, and no round is missing or stored twice (a report replaces the round's one row);
* a node process that exits before the campaign's rounds are done is started again, by a new
  task on the ``controls`` queue (any Celery worker of it), at most ``CONTROL_MAX_STARTS``
  times; then the control fails, and the campaign with it;
* a Celery worker that dies with its node leaves the node offline (the nodes' one notion of
  liveness, coordinator/liveness.py): beat's :func:`requeue_offline` starts it again;
* a run has one current task (``ControlRun.task_id``): a superseded or redelivered copy starts
  nothing, nor does any task while the control's node is connected.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path

from django.conf import settings
from django.db.models import F

from swarm_app.campaigns.broadcast import broadcast_refresh
from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import renew_control_token
from swarm_app.runs import lifecycle
from swarm_app.runs.local_workers import model_cache, training_command

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often a task looks at its node process and at a shutdown
STOP_SECONDS = 60.0  # a node asked to stop (SIGTERM: it checkpoints) gets this long

# Set by the Celery worker's shutdown signal: the node processes stop cleanly, the runs go back
# in the queue.
SHUTDOWN = threading.Event()

RunState = ControlRun.State


def data_dir(run: ControlRun) -> Path:
    """The control's node data directory; the campaign's creation time keeps a recreated
    database (ids starting over) from resuming someone else's weights."""
    campaign = run.campaign
    folder = f"campaign-{campaign.pk}-{campaign.created_at:%Y%m%dT%H%M%S%f}"
    return Path(settings.CONTROL_DATA_DIR) / folder / f"control-{run.pk}"


def node_id(run: ControlRun) -> str:
    return f"control-{run.pk}"


def start_node(run: ControlRun, secret: str) -> subprocess.Popen[bytes]:
    """The control's ``swarm-worker join`` process, logging to ``node.log`` in its data directory."""
    folder = data_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        *training_command(settings.CONTROL_PYTHON, settings.CONTROL_URL, folder),
        "--node-id",
        node_id(run),
    ]
    env = {**os.environ, "SWARM_TOKEN": secret, "SWARM_MODEL_CACHE": str(model_cache())}
    with open(folder / "node.log", "ab") as out:
        # process_group=0: its own process group in the Celery worker's session (a terminal's
        # Ctrl-C reaches the worker, which stops it cleanly; no session of its own, which the
        # scheduler would give a whole share of the CPU: docs/deploy.md).
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0
        )


def log_tail(run: ControlRun) -> str:
    try:
        return (data_dir(run) / "node.log").read_text(errors="replace")[-4000:]
    except OSError:
        return ""


def run_control(run_id: int, task_id: str) -> str:
    """Run the control's node to its end; returns how this task ended.

    Outcomes: ``missing`` (no such run), ``superseded`` (another task is the run's current
    one), ``busy`` (its node is connected: another copy runs it), ``done`` (finished before),
    ``completed``, ``stopped`` (the campaign ended first), ``paused-shutdown`` (the Celery
    worker is shutting down; the run went back in the queue), ``restarted`` (the node exited
    early; a new task starts it again), ``failed``.
    """
    run = ControlRun.objects.select_related("campaign").filter(pk=run_id).first()
    if run is None:
        return "missing"
    if run.task_id != task_id:
        return "superseded"
    if run.state in (RunState.COMPLETED, RunState.FAILED, RunState.STOPPED):
        return "done"
    if run.campaign.is_finished:
        ControlRun.objects.filter(pk=run.pk).update(state=RunState.STOPPED)
        return "stopped"
    if (
        WorkerNode.objects.filter(control_run=run, connected=True)
        .exclude(state=WorkerNode.State.OFFLINE)
        .exists()
    ):
        return "busy"
    secret = renew_control_token(run)
    ControlRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, attempts=F("attempts") + 1)
    broadcast_refresh(run.campaign_id)
    process = start_node(run, secret)
    log.info("control %s (%s %s seed %s): node pid %s", run.pk, run.arm, run.tier, run.seed, process.pid)
    code = _wait(process)
    return _ended(run, task_id, code)


def _wait(process: subprocess.Popen[bytes]) -> int:
    """The node's exit status; on the Celery worker's shutdown, it is asked to stop first."""
    while True:
        try:
            return process.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if SHUTDOWN.is_set():
                process.send_signal(signal.SIGTERM)  # it finishes cleanly and checkpoints
                try:
                    return process.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    return process.wait()


def _ended(run: ControlRun, task_id: str, code: int) -> str:
    run.refresh_from_db()
    campaign = Campaign.objects.get(pk=run.campaign_id)
    if run.task_id != task_id:  # requeued meanwhile (its node went offline): the new task owns it
        return "superseded"
    if run.state == RunState.COMPLETED or run.round >= campaign.settings.rounds:
        ControlRun.objects.filter(pk=run.pk).update(state=RunState.COMPLETED)
        broadcast_refresh(run.campaign_id)
        lifecycle.complete_if_done(campaign)
        return "completed"
    if campaign.is_finished:
        ControlRun.objects.filter(pk=run.pk).update(state=RunState.STOPPED)
        broadcast_refresh(run.campaign_id)
        return "stopped"
    if SHUTDOWN.is_set():
        ControlRun.objects.filter(pk=run.pk).update(state=RunState.QUEUED)
        lifecycle.enqueue_control(run)
        return "paused-shutdown"
    tail = log_tail(run)
    if run.attempts < settings.CONTROL_MAX_STARTS:
        log.warning(
            "control %s: its node exited with status %s at round %s; starting it again",
            run.pk,
            code,
            run.round,
        )
        ControlRun.objects.filter(pk=run.pk).update(state=RunState.QUEUED, error=tail)
        lifecycle.enqueue_control(run)
        return "restarted"
    last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
    reason = (
        f"control {run.arm}/{run.tier}/seed {run.seed} failed: its node exited with status {code} "
        f"{run.attempts} times, last at round {run.round}: {last}"
    )
    log.error("%s\n%s", reason, tail)
    ControlRun.objects.filter(pk=run.pk).update(state=RunState.FAILED, error=tail)
    lifecycle.fail(campaign, reason)
    return "failed"


# --- beat --------------------------------------------------------------------------------------


def requeue_offline() -> list[int]:
    """Start again the running controls whose node went offline (its process and, with it, the
    Celery worker supervising it died): by the nodes' own liveness. Runs of campaigns that ended
    meanwhile are closed instead."""
    requeued = []
    offline = ControlRun.objects.filter(state=RunState.RUNNING, node__state=WorkerNode.State.OFFLINE)
    for run in offline.select_related("campaign"):
        if run.campaign.is_finished:
            done = run.round >= run.campaign.settings.rounds
            offline.filter(pk=run.pk).update(state=RunState.COMPLETED if done else RunState.STOPPED)
            continue
        if offline.filter(pk=run.pk).update(state=RunState.QUEUED):
            log.warning("control %s: its node is offline; starting it again", run.pk)
            lifecycle.enqueue_control(run)
            requeued.append(run.pk)
    return requeued
