"""Isolated controls: the same agent loop as a swarm node, sharing nothing, run by Celery.

For each tier and seed a campaign runs the controls it enabled (ControlsConfig; the kinds of
worker/shared/arms.py, for the swarm's arm I/J):

* *isolated* (I + J)/0: the SAPO paper's 8/0 baseline, I + J own groups, uniform;
* *filtered* (I + J)/0-filtered: the same with zero-advantage groups dropped; a sanity arm only
  (with B = I + J the filter can only delete groups that give zero gradient anyway);
* *self* I/J-self: I own groups of the round plus J from the agent's own recent window (the
  same age as the pool's): same batch and staleness as the swarm, no other agent;
* *dyn* (I + J)/0-dyn: over-generation until I + J informative groups (at most 2 (I + J)
  questions): the same batch as the swarm bought with more generation (generation/questions).

They use the campaign's own settings and :class:`worker.engine.agent.Agent` with a
:class:`worker.engine.transport.LocalTransport` and no pool, so their only difference from a
swarm node is that they share nothing. The training runs in a process of its own
(``swarm-worker control``, control_process.py); this module keeps what touches the database.

Pairing: every kind of one seed uses the same agent id, the same question stream and the same
generation seeds, so in round 0 they generate the very same first B groups; what differs
afterwards comes from the arm alone.

Surviving a dead Celery worker, without relying on broker redelivery (Redis redelivers an
unacked task only after its visibility timeout, an hour):

* every round ends with the metrics stored (idempotent per round) and then a checkpoint, so a
  restarted run repeats at most the round it was killed in;
* a heartbeat thread touches ``updated_at`` and extends the claim every few seconds, also
  while the campaign is paused and during a long round;
* beat's :func:`requeue_stale` re-enqueues runs whose heartbeat is older than
  :func:`stale_seconds` (30 s by default);
* :func:`claim` is an atomic compare-and-set on ``claimed_by``/``lease_until``, so two copies
  of one run (a re-enqueued task and a redelivered one) never train at once; a copy that loses
  its claim stops before writing anything.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.db.models import F, Q
from django.utils import timezone

from swarm_app.campaigns.broadcast import broadcast_refresh
from swarm_app.campaigns.metrics import record_control_metrics
from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.runs import lifecycle
from swarm_app.runs.control_process import ControlProcess, ControlProcessError

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # while the campaign is paused


def stale_seconds() -> float:
    """A running control without a heartbeat for this long is re-enqueued, and its claim may be
    taken over (settings.CONTROL_STALE_SECONDS, 30 s by default)."""
    return float(getattr(settings, "CONTROL_STALE_SECONDS", 30.0))


def heartbeat_seconds() -> float:
    return min(5.0, stale_seconds() / 4)


# Set by the Celery worker's shutdown signal: finish the round, checkpoint, hand the run back.
SHUTDOWN = threading.Event()

RunState = ControlRun.State
ACTIVE = (RunState.QUEUED, RunState.RUNNING)


def checkpoint_path(run: ControlRun) -> Path:
    """``<DATA_DIR>/checkpoints/controls/campaign-<id>-<created>/<run id>.pt``: the creation time
    keeps a recreated database (ids starting over) from resuming someone else's weights."""
    campaign = run.campaign
    folder = f"campaign-{campaign.pk}-{campaign.created_at:%Y%m%dT%H%M%S%f}"
    return Path(settings.DATA_DIR) / "checkpoints" / "controls" / folder / f"{run.pk}.pt"


def default_owner(task_id: str | None) -> str:
    import os

    return f"{socket.gethostname()}:{os.getpid()}:{task_id or 'direct'}"


# --- the claim -------------------------------------------------------------------------------


def claim(run_id: int, owner: str) -> bool:
    """Take the run for ``owner`` if nobody holds it (or the holder's lease ran out)."""
    now = timezone.now()
    free = Q(claimed_by="") | Q(lease_until__lt=now) | Q(claimed_by=owner)
    return bool(
        ControlRun.objects.filter(pk=run_id, state__in=ACTIVE)
        .filter(free)
        .update(
            claimed_by=owner,
            lease_until=now + timedelta(seconds=stale_seconds()),
            state=RunState.RUNNING,
            attempts=F("attempts") + 1,
            updated_at=now,
        )
    )


def touch(run_id: int, owner: str) -> bool:
    """Heartbeat: renew the claim; False when another task took the run over."""
    now = timezone.now()
    return bool(
        ControlRun.objects.filter(pk=run_id, claimed_by=owner).update(
            updated_at=now, lease_until=now + timedelta(seconds=stale_seconds())
        )
    )


def release(run_id: int, owner: str, **fields) -> None:
    ControlRun.objects.filter(pk=run_id, claimed_by=owner).update(
        claimed_by="", lease_until=None, updated_at=timezone.now(), **fields
    )


class Heartbeat(threading.Thread):
    """Keeps the claim alive while the main thread generates or trains (a round can be long)."""

    def __init__(self, run_id: int, owner: str, interval: float | None = None) -> None:
        super().__init__(name=f"control-{run_id}-heartbeat", daemon=True)
        self.run_id, self.owner = run_id, owner
        self.interval = interval or heartbeat_seconds()
        self.stopping = threading.Event()
        self.lost = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.interval):
                try:
                    if not touch(self.run_id, self.owner):
                        self.lost.set()
                        return
                except Exception:  # a locked database for a moment is no reason to give up the run
                    log.exception("control %s: heartbeat failed", self.run_id)
        finally:
            connection.close()  # this thread's own connection

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=self.interval + 5)


# --- the run ---------------------------------------------------------------------------------


def run_control(run_id: int, owner: str) -> str:
    """Run (or resume) one control to the campaign's rounds; returns how it ended.

    Outcomes: ``missing`` (no such run), ``busy`` (another task holds it, or it is finished),
    ``completed``, ``stopped`` (the campaign ended first), ``paused-shutdown`` (the Celery worker
    is shutting down; the run was handed back and re-enqueued), ``lost`` (another task took it
    over), ``failed``.
    """
    if not ControlRun.objects.filter(pk=run_id).exists():
        return "missing"
    if not claim(run_id, owner):
        return "busy"
    run = ControlRun.objects.select_related("campaign").get(pk=run_id)
    if run.campaign.is_finished:  # stopped before this task's turn came: no model to load
        release(run_id, owner, state=RunState.STOPPED)
        return "stopped"
    heartbeat = Heartbeat(run_id, owner)
    heartbeat.start()
    try:
        return _loop(run, owner, heartbeat)
    except Exception as error:
        # The training process reports its own "Type: message" and traceback.
        training = isinstance(error, ControlProcessError)
        detail = str(error) if training else f"{type(error).__name__}: {error}"
        reason = f"control {run.arm}/{run.tier}/seed {run.seed} failed: {detail}"
        trace = error.details if training else traceback.format_exc()
        log.error("%s\n%s", reason, trace)
        release(run_id, owner, state=RunState.FAILED, error=trace[-4000:])
        lifecycle.fail(run.campaign, reason)
        return "failed"
    finally:
        heartbeat.stop()
        # Whatever happened, never leave a claim behind that blocks the next attempt.
        release(run_id, owner)


def _finish(run: ControlRun, owner: str, state: str) -> str:
    release(run.pk, owner, state=state)
    broadcast_refresh(run.campaign_id)
    if state == RunState.COMPLETED:
        lifecycle.complete_if_done(Campaign.objects.get(pk=run.campaign_id))
    return state


def _loop(run: ControlRun, owner: str, heartbeat: Heartbeat) -> str:
    process, ready = ControlProcess.start(run, checkpoint_path(run))
    try:
        return _rounds(run, owner, heartbeat, process, ready["round"], ready["resumed"])
    finally:
        process.close()


def _rounds(
    run: ControlRun, owner: str, heartbeat: Heartbeat, process: ControlProcess, next_round: int, resumed: bool
) -> str:
    campaign = run.campaign
    rounds = campaign.settings.rounds
    if resumed:
        log.info("control %s: resumed at round %d from %s", run.pk, next_round, checkpoint_path(run))
    ControlRun.objects.filter(pk=run.pk).update(
        resumed_from=next_round if resumed else None, round=next_round
    )
    broadcast_refresh(campaign.pk)
    while True:
        if heartbeat.lost.is_set():
            return "lost"
        state = Campaign.objects.values_list("state", flat=True).get(pk=campaign.pk)
        if next_round >= rounds:
            return _finish(run, owner, RunState.COMPLETED)
        if state in Campaign.FINISHED:
            return _finish(run, owner, RunState.STOPPED)
        if SHUTDOWN.is_set():
            release(run.pk, owner, state=RunState.QUEUED)
            lifecycle.enqueue_control(run)
            return "paused-shutdown"
        if state != Campaign.State.RUNNING:  # paused (or not yet launched): wait, heartbeating
            time.sleep(POLL_SECONDS)
            continue
        metrics = process.run_round()
        if heartbeat.lost.is_set():  # another copy owns the run now: write nothing
            return "lost"
        record_control_metrics(run, next_round, metrics)
        process.save()
        next_round += 1
        if not touch(run.pk, owner):
            return "lost"


# --- beat --------------------------------------------------------------------------------------


def requeue_stale(seconds: float | None = None) -> list[int]:
    """Re-enqueue running controls whose heartbeat stopped (their Celery worker died).

    Runs of campaigns that ended meanwhile are closed instead of re-enqueued.
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=seconds or stale_seconds())
    requeued = []
    for run in ControlRun.objects.filter(state=RunState.RUNNING, updated_at__lt=cutoff).select_related(
        "campaign"
    ):
        stale = ControlRun.objects.filter(pk=run.pk, state=RunState.RUNNING, updated_at__lt=cutoff)
        if run.campaign.is_finished:
            done = run.round >= run.campaign.settings.rounds
            stale.update(
                state=RunState.COMPLETED if done else RunState.STOPPED,
                claimed_by="",
                lease_until=None,
                updated_at=now,
            )
            continue
        # Reset the claim: if the old task is merely slow, its next heartbeat fails and it stops.
        if stale.update(state=RunState.QUEUED, claimed_by="", lease_until=None, updated_at=now):
            log.warning("control %s: no heartbeat since %s; re-enqueued", run.pk, run.updated_at)
            lifecycle.enqueue_control(run)
            requeued.append(run.pk)
    return requeued
