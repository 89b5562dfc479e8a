"""Held-out evaluation on the coordinator: the set a node asks for, and its answers, scored.

The questions, the cadence and the scoring are worker/shared/evaluation.py's. A node (a
volunteer's or a control, alike) that has reported the metrics of a round of the cadence asks
for that evaluation's set (``eval_request``) and answers every question once (``eval_submit``).
What is checked, and the error each check gives (nothing is stored on any of them):

* the request: a round of the campaign's cadence, and the round whose metrics the node
  reported last (``evaluation_not_due``): a node cannot ask for a later evaluation's questions
  ahead of time, nor evaluate an older round's policy later; a set already answered is
  ``duplicate_submission`` with the stored ack;
* the answers: an evaluation set this process issued (``unknown_lease``), to this node
  (``lease_not_yours``), not answered before (``duplicate_submission``, the stored ack in
  ``data``: a replay, or a second try at the same questions), the node still at that round
  (``evaluation_not_due``), and exactly one answer per question of the set, in its order
  (``evaluation_mismatch``: answers to training questions or to another evaluation's);
  the frame's size and each answer's length are the protocol's (worker/shared/protocol.py).

The score stored is the verifier's, never the node's claim (kept beside it as
``claimed_accuracy``, for audits). Evaluations are rare (every ``eval_every`` rounds), so these
paths use the ORM; the hot path's prepared statements (sql.py, storage/) never see them.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import Evaluation, WorkerNode
from worker.shared import protocol
from worker.shared.campaign import CampaignConfig
from worker.shared.evaluation import eval_index, eval_refs, score_answers
from worker.shared.protocol import ErrorCode, ProtocolError
from worker.shared.questions import QuestionRef, question


def _config(node: WorkerNode) -> CampaignConfig:
    return Campaign.objects.only("config").get(pk=node.campaign_id).settings


def _check_due(node: WorkerNode, config: CampaignConfig, round: int) -> int:
    """The index of the evaluation after ``round``, or ``evaluation_not_due``."""
    index = eval_index(config.eval_every, config.rounds, round)
    if index is None:
        raise ProtocolError(
            ErrorCode.EVALUATION_NOT_DUE,
            f"no evaluation follows round {round}: this campaign evaluates after every "
            f"{config.eval_every}-th of its {config.rounds} rounds and after the last"
            if config.eval_every
            else "this campaign does not evaluate its nodes",
        )
    state = WorkerNode.objects.filter(pk=node.pk).values("state", "round", "token__banned_at").get()
    if state["state"] == WorkerNode.State.BANNED or state["token__banned_at"] is not None:
        raise ProtocolError(ErrorCode.BANNED, "this node was banned for submitting false rewards")
    if state["round"] != round + 1:
        raise ProtocolError(
            ErrorCode.EVALUATION_NOT_DUE,
            f"the evaluation after round {round} is for a node whose last reported round is {round}; "
            f"this node's next round is {state['round']}",
        )
    return index


def _eval_set(config: CampaignConfig, row: Evaluation) -> protocol.EvalSet:
    refs = [QuestionRef.from_json(ref) for ref in row.questions]
    return protocol.EvalSet(
        eval_id=row.eval_id,
        round=row.round,
        questions=[
            protocol.EvalQuestion(ref=ref, question=question(config.mix, ref).question) for ref in refs
        ],
    )


def issue(node: WorkerNode, round: int) -> protocol.EvalSet:
    """The set of the evaluation after ``round`` for ``node``: the one it holds, or a new one."""
    config = _config(node)
    index = _check_due(node, config, round)
    row = Evaluation.objects.filter(node_id=node.pk, round=round).first()
    if row is None:
        refs = [ref.to_json() for ref in eval_refs(config.mix, config.seed, index, config.eval_questions)]
        try:
            with transaction.atomic():
                row = Evaluation.objects.create(
                    campaign_id=node.campaign_id,
                    node=node,
                    round=round,
                    eval_id=uuid.uuid4().hex,
                    questions=refs,
                    n=len(refs),
                )
        except IntegrityError:  # the same request, answered by another thread first
            row = Evaluation.objects.get(node_id=node.pk, round=round)
    if row.submission_id:
        raise _answered(row)
    return _eval_set(config, row)


def _answered(row: Evaluation) -> ProtocolError:
    return ProtocolError(
        ErrorCode.DUPLICATE_SUBMISSION,
        f"the evaluation after round {row.round} was already answered",
        row.ack,
    )


def submit(
    node: WorkerNode,
    submission_id: str,
    eval_id: str,
    answers: list[protocol.EvalAnswer],
    claimed_accuracy: float | None,
) -> protocol.EvalAck:
    """Score ``answers`` to the evaluation set ``eval_id`` with the verifiers and store them once."""
    row = Evaluation.objects.filter(eval_id=eval_id).first()
    if row is None:
        raise ProtocolError(ErrorCode.UNKNOWN_LEASE, f"no evaluation set {eval_id}")
    if row.node_id != node.pk:
        raise ProtocolError(ErrorCode.LEASE_NOT_YOURS, f"evaluation set {eval_id} was issued to another node")
    if row.submission_id:
        raise _answered(row)
    config = _config(node)
    _check_due(node, config, row.round)
    refs = [QuestionRef.from_json(ref) for ref in row.questions]
    if [answer.ref for answer in answers] != refs:
        raise ProtocolError(
            ErrorCode.EVALUATION_MISMATCH,
            f"evaluation set {eval_id} has {len(refs)} questions; the answers must answer each once, "
            f"in the set's order ({len(answers)} answers sent)",
        )
    completions = [answer.completion for answer in answers]
    score = score_answers(config.mix, refs, completions, config.format_weight)
    fields: dict[str, Any] = {
        "submission_id": submission_id,
        "submitted_at": timezone.now(),
        "answers": completions,
        "n": score.n,
        "correct": score.correct,
        "accuracy": score.accuracy,
        "reward": score.reward,
        "claimed_accuracy": claimed_accuracy,
    }
    if not Evaluation.objects.filter(pk=row.pk, submission_id="").update(**fields):
        raise _answered(Evaluation.objects.get(pk=row.pk))  # answered by another thread first
    for name, value in fields.items():
        setattr(row, name, value)
    return protocol.EvalAck(**row.ack)
