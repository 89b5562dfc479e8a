"""A campaign's control nodes: what the coordinator does differently for a node with an arm.

A control (swarm_app/runs/controls.py starts one per tier, control kind and seed) is an ordinary
worker node to the protocol: it says hello with its control's token, leases, submits verified
rollouts, reports metrics and checkpoints like a volunteer, and its liveness is the node's. The
differences, all decided here from the node's ``arm``:

* **its questions** are its seed's paired stream (worker/shared/paired.py), the same for every
  control kind of that seed, round by round, not the campaign's shared stream; B is the arm's
  (``CampaignConfig.control_agent_config``). A lease of a control never lapses into the line of
  leases to reissue: nobody else may answer its questions, and after a restart the control asks
  for the same round again. Over-generation (``dyn``) gets its extra questions by
  ``extra_lease_request`` (leases of their own for the round, from the round's over-generation
  stream);
* **its rollouts stay out of every pool**: a submission is re-scored and checked like any other
  (submissions.py), and its verified rewards are kept with the lease (the ack), never in the
  pool table, so no draw ever sees them and no swarm's window is diluted; it draws nothing;
* **its reward** for a round is the coordinator's: the mean verified reward of the round's first
  B questions (its lease of the paired stream; a ``dyn`` control's extra questions excluded, as
  in the simulator), from the last submission of that lease's questions;
* **a round may be run again**: a control restarted from a checkpoint older than its last
  submission (killed between the submit and the checkpoint) asks for that round's lease again and
  gets the same questions on a new lease; it regenerates the same rollouts (same seeds), and its
  report replaces nothing but the round's one metrics row.

Controls are a few nodes per campaign (tiers x kinds x seeds), so these paths use the ORM; the
volunteers' hot paths (sql.py) never see a control node.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from swarm_app.campaigns.metrics import record_control_metrics
from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.coordinator import leases
from swarm_app.coordinator.models import Lease, WorkerNode
from worker.shared import protocol
from worker.shared.campaign import CampaignConfig
from worker.shared.config import AgentConfig
from worker.shared.paired import control_stream, extra_refs, round_refs
from worker.shared.protocol import ErrorCode, ProtocolError

# A control's lease is never reissued to another node: its deadline is out of any sweep's reach.
LEASE_NEVER_LAPSES = timedelta(days=3650)


def agent_config(config: CampaignConfig, node: WorkerNode) -> AgentConfig:
    """The control's learner settings: its arm's I, J, B and over-generation cap."""
    run = _run(node)
    return config.control_agent_config(node.tier, run.seed, node.arm)


def _run(node: WorkerNode) -> ControlRun:
    if node.control_run_id is None:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "this node is not a campaign's control")
    return node.control_run  # type: ignore[return-value]


def main_refs(config: CampaignConfig, node: WorkerNode, round: int) -> list[dict[str, Any]]:
    """The round's first B questions of the control's paired stream, as a lease stores them."""
    run = _run(node)
    count = agent_config(config, node).questions_per_round
    return [ref.to_json() for ref in round_refs(config.mix, control_stream(run.seed), round, count)]


def _running_campaign(node: WorkerNode, round: int) -> CampaignConfig:
    """The campaign's settings, or the error a lease request gets (as leases.issue_lease's)."""
    campaign = Campaign.objects.only("name", "state", "config").get(pk=node.campaign_id)
    state = (
        WorkerNode.objects.filter(pk=node.pk).values("state", "token__revoked_at", "token__banned_at").get()
    )
    if state["state"] == WorkerNode.State.BANNED or state["token__banned_at"] is not None:
        raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
    if state["token__revoked_at"] is not None:
        raise ProtocolError(ErrorCode.TOKEN_REVOKED, "this control's token was revoked")
    if campaign.state != Campaign.State.RUNNING:
        raise ProtocolError(ErrorCode.CAMPAIGN_NOT_RUNNING, f"campaign {campaign.name!r} is {campaign.state}")
    config = campaign.settings
    if round >= config.rounds:
        raise ProtocolError(
            ErrorCode.CAMPAIGN_NOT_RUNNING,
            f"this campaign runs {config.rounds} rounds per node; round {round} is past it",
        )
    return config


def _lease(
    node: WorkerNode, config: CampaignConfig, round: int, refs: list[dict[str, Any]]
) -> protocol.Lease:
    """The node's active lease of ``round`` with exactly these questions, or a new one."""
    now = timezone.now()
    with transaction.atomic():
        held = (
            Lease.objects.select_for_update()
            .filter(node_id=node.pk, round=round, state=Lease.State.ACTIVE)
            .order_by("-id")
        )
        lease = next((lease for lease in held if lease.questions == refs), None)
        if lease is None:
            lease = Lease.objects.create(
                lease_id=uuid.uuid4().hex,
                campaign_id=node.campaign_id,
                node=node,
                round=round,
                questions=refs,
                deadline=now + LEASE_NEVER_LAPSES,
            )
    return leases.issued_message(node, config, lease.lease_id, round, lease.deadline, refs)


def issue_lease(node: WorkerNode, round: int) -> protocol.Lease:
    """The control's lease of ``round``: its paired questions (held, or on a new lease)."""
    config = _running_campaign(node, round)
    return _lease(node, config, round, main_refs(config, node, round))


def issue_extra_lease(node: WorkerNode, round: int, start: int, count: int) -> protocol.Lease:
    """Over-generation's questions ``start .. start + count - 1`` of ``round`` (``dyn`` only),
    within the arm's cap: B + extra <= max_questions."""
    config = _running_campaign(node, round)
    arm = agent_config(config, node)
    extra = arm.max_questions - arm.questions_per_round
    if extra <= 0:
        raise ProtocolError(
            ErrorCode.INVALID_MESSAGE, f"extra_lease_request: the {node.arm} arm does not over-generate"
        )
    if start + count > extra:
        raise ProtocolError(
            ErrorCode.INVALID_MESSAGE,
            f"extra_lease_request: questions {start}..{start + count - 1} are past this arm's "
            f"{extra} extra questions a round",
        )
    if not Lease.objects.filter(
        node_id=node.pk, round=round, questions=main_refs(config, node, round)
    ).exists():
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"extra_lease_request: no lease of round {round} yet")
    run = _run(node)
    refs = [ref.to_json() for ref in extra_refs(config.mix, control_stream(run.seed), round, start, count)]
    return _lease(node, config, round, refs)


def store_submission(
    node: WorkerNode, lease_id: str, round: int, submission_id: str, ack: dict[str, Any]
) -> bool:
    """Claim the lease with the submission's ack (the verified rewards), where the submission's
    first checks pass (as Store.store_submission's); False when it could not be claimed."""
    now = timezone.now()
    with transaction.atomic():
        used = (
            Lease.objects.filter(node_id=node.pk, submission_id=submission_id)
            .exclude(submission_id="")
            .exists()
        )
        banned = (
            WorkerNode.objects.filter(pk=node.pk)
            .filter(Q(state=WorkerNode.State.BANNED) | Q(token__banned_at__isnull=False))
            .exists()
        )
        if used or banned:
            return False
        claimed = Lease.objects.filter(
            lease_id=lease_id, node_id=node.pk, round=round, state=Lease.State.ACTIVE, deadline__gte=now
        ).update(state=Lease.State.SUBMITTED, submission_id=submission_id, ack=ack)
        if not claimed:
            return False
        WorkerNode.objects.filter(pk=node.pk).update(accepted_submissions=F("accepted_submissions") + 1)
    return True


def verified_reward(node: WorkerNode, config: CampaignConfig, round: int) -> float | None:
    """The mean verified reward of the round's first B questions, from the last submission of
    the round's paired questions; None when there is none."""
    refs = main_refs(config, node, round)
    submitted = (
        Lease.objects.filter(node_id=node.pk, round=round, state=Lease.State.SUBMITTED)
        .order_by("-id")
        .values_list("questions", "ack")
    )
    for questions, ack in submitted:
        if questions == refs and ack:
            groups = ack["verified_rewards"]
            return sum(sum(group) / len(group) for group in groups) / len(groups)
    return None


def record_metrics(node: WorkerNode, round: int, metrics: dict[str, Any]) -> RoundMetrics:
    """The control's report of ``round``: its metrics with the coordinator's reward, pushed to
    the dashboards (campaigns/metrics.py); the node and its control run move on (the run is
    completed with its last round)."""
    run = _run(node)
    config = Campaign.objects.only("config").get(pk=node.campaign_id).settings
    reward = verified_reward(node, config, round)
    if reward is None:
        raise ProtocolError(
            ErrorCode.INVALID_MESSAGE,
            f"metrics for round {round}: no verified rollouts of this node in that round",
        )
    with transaction.atomic():
        row = record_control_metrics(run, round, metrics, reward=reward, node_id=node.pk)
        WorkerNode.objects.filter(pk=node.pk).update(round=Greatest("round", round + 1), last_reward=reward)
        if round + 1 >= config.rounds:
            ControlRun.objects.filter(pk=run.pk).update(state=ControlRun.State.COMPLETED)
    return row
