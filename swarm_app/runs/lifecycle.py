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
import uuid

from django.db import transaction
from django.utils import timezone

from swarm_app.campaigns.broadcast import push_state
from swarm_app.campaigns.models import Arm, Campaign, ControlRun
from swarm_app.celery import app as celery_app
from swarm_app.coordinator.models import WorkerNode

log = logging.getLogger(__name__)
State = Campaign.State
UNFINISHED = (State.PENDING, State.RUNNING, State.PAUSED)

# The organizer's actions: from which stored states each is allowed, and where it leads. The
# one definition: the transitions below use it, the campaign page shows buttons from it, and the
# dashboard's script receives it (views.detail's page config) to show them as the state changes.
ACTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "launch": ((State.PENDING,), State.RUNNING),
    "pause": ((State.RUNNING,), State.PAUSED),
    "resume": ((State.PAUSED,), State.RUNNING),
    "stop": (UNFINISHED, State.STOPPED),
}


def allowed_actions(state: str) -> list[str]:
    """The organizer's actions a campaign in ``state`` allows, in ACTIONS' order."""
    return [name for name, (sources, _) in ACTIONS.items() if state in sources]


def actions_by_state() -> dict[str, list[str]]:
    return {state: allowed_actions(state) for state in State.values}


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
    pk = campaign.pk
    transaction.on_commit(lambda: celery_app.send_task("campaigns.rebuild_rollups", args=[pk]))


def control_runs_for(campaign: Campaign) -> list[ControlRun]:
    """The control runs a launch creates: per tier, per enabled control kind
    (``CampaignConfig.control_kinds``: isolated, filtered, self, dyn), seeds ``seed + k``."""
    config = campaign.settings
    arms = [Arm(kind) for kind in config.control_kinds()]
    return [
        ControlRun(campaign=campaign, tier=tier, arm=arm, seed=config.seed + k)
        for tier in config.tiers
        for arm in arms
        for k in range(config.controls.seeds)
    ]


def enqueue_control(run: ControlRun) -> None:
    """Send one ControlRun's Celery task, recording its task id first."""
    task_id = uuid.uuid4().hex
    ControlRun.objects.filter(pk=run.pk).update(task_id=task_id)
    run.task_id = task_id
    celery_app.send_task("campaigns.run_control", args=[run.pk], task_id=task_id)


def launch(campaign: Campaign, enqueue: bool = True) -> list[ControlRun]:
    """pending -> running: start the clock, create the control runs, enqueue their tasks."""
    with transaction.atomic():
        _transition(campaign, *ACTIONS["launch"], started_at=timezone.now())
        runs = ControlRun.objects.bulk_create(control_runs_for(campaign), ignore_conflicts=True)
        runs = list(ControlRun.objects.filter(campaign=campaign).order_by("tier", "arm", "seed"))
        if enqueue:
            transaction.on_commit(lambda: [enqueue_control(run) for run in runs])
    push_state(campaign)
    return runs


def pause(campaign: Campaign) -> Campaign:
    """running -> paused: leases stop at once; controls wait at their next round."""
    _transition(campaign, *ACTIONS["pause"])
    push_state(campaign)
    return campaign


def resume(campaign: Campaign) -> Campaign:
    """paused -> running, at the same rounds."""
    _transition(campaign, *ACTIONS["resume"])
    push_state(campaign)
    return campaign


def stop(campaign: Campaign) -> Campaign:
    """Any unfinished state -> stopped; controls exit after their current round."""
    _transition(campaign, *ACTIONS["stop"], finished_at=timezone.now())
    push_state(campaign)
    _finished(campaign)
    return campaign


def fail(campaign: Campaign, reason: str) -> Campaign:
    """Any unfinished state -> failed, keeping the reason for the campaign page."""
    try:
        _transition(
            campaign,
            UNFINISHED,
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
    """Some swarm node finished the campaign's rounds, no live swarm node is still short of them,
    and every control finished.

    A node that finished counts even after it went offline (a worker leaves when it is done).
    Offline and banned nodes short of the rounds do not hold a campaign open: a volunteer who
    left must not keep it running forever; the organizer can still stop a campaign by hand.
    """

    rounds = campaign.settings.rounds
    nodes = WorkerNode.objects.filter(campaign=campaign, arm=Arm.SWARM).exclude(state=WorkerNode.State.BANNED)
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
