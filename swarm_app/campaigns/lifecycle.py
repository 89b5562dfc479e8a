"""A campaign's life, as plain functions the views, Celery tasks and tests call alike.

    pending --launch--> running --pause--> paused --resume--> running
    pending | running | paused --stop--> stopped              (organizer)
    running -----------------> completed                       (every node and control done)
    any unfinished  ---------> failed (with the reason shown)  (a control run crashed, ...)

Why the pieces are where they are:

* **Leases enforce pausing**, not the workers: swarm_app/coordinator/leases.py refuses a lease
  unless the campaign runs, so a paused campaign issues no new work even to a worker that
  missed the push. The push (``campaign.state`` to the workers' group) only makes workers
  react at once instead of at their next heartbeat.
* **Resuming continues at the same rounds**: nodes keep their ``round`` and controls their
  checkpoints, so nothing restarts.
* **Launching creates the control runs and enqueues them after commit**, so a Celery worker
  never picks up a task whose ControlRun row it cannot see yet.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from swarm_app.campaigns.metrics import campaign_group
from swarm_app.campaigns.models import Arm, Campaign, ControlRun

log = logging.getLogger(__name__)
State = Campaign.State


class LifecycleError(Exception):
    """An organizer's action that the campaign's state does not allow (shown as a message)."""


def _transition(campaign: Campaign, allowed: tuple[str, ...], target: str, **fields) -> Campaign:
    """Move ``campaign`` to ``target`` if its *stored* state is in ``allowed`` (row-locked)."""
    with transaction.atomic():
        locked = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if locked.state not in allowed:
            raise LifecycleError(f"campaign {locked.name!r} is {locked.state}; cannot make it {target}")
        locked.state = target
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.save(update_fields=["state", *fields])
    campaign.refresh_from_db()
    return campaign


def _finished(campaign: Campaign) -> None:
    """Once a campaign ends, rebuild its dashboard rollups from every row (on Celery), so the
    final figures are exact even for a report committed late or rewritten in place."""
    from swarm_app.campaigns.tasks import rebuild_rollups

    pk = campaign.pk
    transaction.on_commit(lambda: rebuild_rollups.delay(pk))


def push_state(campaign: Campaign) -> None:
    """Tell connected workers and dashboards about the new state (best effort)."""
    from swarm_app.coordinator.consumers import worker_group

    layer = get_channel_layer()
    if layer is None:
        return
    event = {"type": "campaign.state", "state": campaign.state, "reason": campaign.failure_reason}
    for group in (worker_group(campaign.pk), campaign_group(campaign.pk)):
        try:
            async_to_sync(layer.group_send)(group, event)
        except Exception:  # the next heartbeat carries the state anyway
            log.exception("could not push state of campaign %s to %s", campaign.pk, group)


def broadcast_refresh(campaign_id: int) -> None:
    """Ask the campaign's dashboards to refresh their tables (a control started or ended)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(campaign_group(campaign_id), {"type": "dashboard.refresh"})
    except Exception:  # dashboards also refresh on their own every few seconds
        log.exception("could not ask dashboards of campaign %s to refresh", campaign_id)


def control_runs_for(campaign: Campaign) -> list[ControlRun]:
    """The control runs a launch creates: per tier, per enabled arm, seeds ``seed + k``."""
    config = campaign.settings
    arms = [
        arm
        for arm, on in ((Arm.ISOLATED, config.controls.isolated), (Arm.FILTERED, config.controls.filtered))
        if on
    ]
    return [
        ControlRun(campaign=campaign, tier=tier, arm=arm, seed=config.seed + k)
        for tier in config.tiers
        for arm in arms
        for k in range(config.controls.seeds)
    ]


def enqueue_control(run: ControlRun) -> None:
    """Send one ControlRun's Celery task, recording its task id first."""
    from swarm_app.campaigns.tasks import run_control

    task_id = uuid.uuid4().hex
    ControlRun.objects.filter(pk=run.pk).update(task_id=task_id)
    run.task_id = task_id
    run_control.apply_async(args=[run.pk], task_id=task_id)


def launch(campaign: Campaign, enqueue: bool = True) -> list[ControlRun]:
    """pending -> running: start the clock, create the control runs, enqueue their tasks."""
    with transaction.atomic():
        _transition(campaign, (State.PENDING,), State.RUNNING, started_at=timezone.now())
        runs = ControlRun.objects.bulk_create(control_runs_for(campaign), ignore_conflicts=True)
        runs = list(ControlRun.objects.filter(campaign=campaign).order_by("tier", "arm", "seed"))
        if enqueue:
            transaction.on_commit(lambda: [enqueue_control(run) for run in runs])
    push_state(campaign)
    return runs


def pause(campaign: Campaign) -> Campaign:
    """running -> paused: leases stop at once; controls wait at their next round."""
    _transition(campaign, (State.RUNNING,), State.PAUSED)
    push_state(campaign)
    return campaign


def resume(campaign: Campaign) -> Campaign:
    """paused -> running, at the same rounds."""
    _transition(campaign, (State.PAUSED,), State.RUNNING)
    push_state(campaign)
    return campaign


def stop(campaign: Campaign) -> Campaign:
    """Any unfinished state -> stopped; controls exit after their current round."""
    _transition(
        campaign, (State.PENDING, State.RUNNING, State.PAUSED), State.STOPPED, finished_at=timezone.now()
    )
    push_state(campaign)
    _finished(campaign)
    return campaign


def fail(campaign: Campaign, reason: str) -> Campaign:
    """Any unfinished state -> failed, keeping the reason for the campaign page."""
    try:
        _transition(
            campaign,
            (State.PENDING, State.RUNNING, State.PAUSED),
            State.FAILED,
            failure_reason=reason[:2000],
            finished_at=timezone.now(),
        )
    except LifecycleError:  # already finished: keep the first outcome
        return campaign
    push_state(campaign)
    _finished(campaign)
    return campaign


def is_complete(campaign: Campaign) -> bool:
    """Some node finished the campaign's rounds, no live node is still short of them, and every
    control finished.

    A node that finished counts even after it went offline (a worker leaves when it is done).
    Offline and banned nodes short of the rounds do not hold a campaign open: a volunteer who
    left must not keep it running forever; the organizer can still stop a campaign by hand.
    """
    from swarm_app.coordinator.models import WorkerNode

    rounds = campaign.settings.rounds
    nodes = WorkerNode.objects.filter(campaign=campaign).exclude(state=WorkerNode.State.BANNED)
    if not nodes.filter(round__gte=rounds).exists():
        return False
    if nodes.filter(round__lt=rounds).exclude(state=WorkerNode.State.OFFLINE).exists():
        return False
    controls = ControlRun.objects.filter(campaign=campaign)
    return not controls.exclude(state=ControlRun.State.COMPLETED).exists()


def complete_if_done(campaign: Campaign) -> bool:
    """running -> completed when :func:`is_complete`; True when it moved."""
    if campaign.state != State.RUNNING or not is_complete(campaign):
        return False
    try:
        _transition(campaign, (State.RUNNING,), State.COMPLETED, finished_at=timezone.now())
    except LifecycleError:  # paused or stopped meanwhile
        return False
    push_state(campaign)
    _finished(campaign)
    return True


def complete_finished() -> list[int]:
    """Periodic (beat): mark running campaigns whose work is all done as completed."""
    return [c.pk for c in Campaign.objects.filter(state=State.RUNNING) if complete_if_done(c)]


# --- local worker processes (demo coordinators) -------------------------------------------------


def model_cache() -> Path:
    """The coordinator's model cache ($SWARM_MODEL_CACHE, else <data dir>/models): its controls
    load the tiers from it, and every worker process it starts is pointed at it."""
    from worker.models import model_cache_dir

    return model_cache_dir(Path(settings.DATA_DIR))


def local_workers_allowed() -> bool:
    return bool(getattr(settings, "SWARM_ALLOW_LOCAL_WORKERS", False))


def start_local_workers(campaign: Campaign, count: int, base_url: str, secret: str) -> list[int]:
    """Start ``count`` ``swarm-worker join`` processes on this machine for ``campaign``.

    Each gets its own data directory (its node identity and checkpoints) under
    ``<DATA_DIR>/local-workers/campaign-<id>/`` and logs there; the token travels in the
    environment, not on the command line. They exit by themselves when the campaign ends.
    """
    if not local_workers_allowed():
        raise LifecycleError("this coordinator does not start local workers (SWARM_ALLOW_LOCAL_WORKERS)")
    root = Path(settings.DATA_DIR) / "local-workers" / f"campaign-{campaign.pk}"
    env = {
        **os.environ,
        "SWARM_TOKEN": secret,
        "SWARM_TORCH_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        # The coordinator's model cache (where its controls find the tiers), not one per worker
        # data directory, which would build every tiny tier again for each worker.
        "SWARM_MODEL_CACHE": str(model_cache()),
    }
    pids = []
    for index in range(count):
        data_dir = root / f"worker-{index}"
        data_dir.mkdir(parents=True, exist_ok=True)
        with open(data_dir / "worker.log", "ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "worker.cli",
                    "join",
                    base_url,
                    "--data-dir",
                    str(data_dir),
                    "--no-status",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the request; stopped by the campaign's end
            )
        # Reap it when it exits, so a long-lived coordinator collects no zombies.
        threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
        pids.append(proc.pid)
    Campaign.objects.filter(pk=campaign.pk).update(local_workers=campaign.local_workers + count)
    campaign.local_workers += count
    log.info("campaign %s: started %d local workers (pids %s)", campaign.pk, count, pids)
    return pids
