"""The engine's Transport over the coordinator's websocket: the round's requests.

:class:`WebsocketTransport` is what the engine's round loop (worker/engine/agent.py) leases,
submits, samples and reports through; the session under it (worker/client/connection.py)
sends each request again after a dropped connection or a missing reply. That is safe for every
request the worker sends: a lease request for the same round returns the same active lease; a
submit carries a ``submission_id`` chosen once per lease and reused on every retry, so a replay
of an accepted submission is answered ``duplicate_submission`` with the original ack, which
counts as success; metrics and releases are idempotent.

A campaign's control node of the ``dyn`` arm also asks for over-generation's extra questions
(``extra_lease_request``, :meth:`WebsocketTransport.lease_extra`).

With protocol 2 (worker/shared/protocol.py) a round is two requests: the submit's answer
carries the round's draw of other nodes' rollouts, kept for :meth:`sample_external`, and the
metrics' answer the next round's lease, kept for :meth:`lease` (and given back by
:meth:`release_active` like any held lease). Either one missing (a replayed submission, a
paused campaign) means the request is sent as in protocol 1.

Held-out evaluation (worker/shared/evaluation.py) is two more requests at the campaign's cadence:
:meth:`WebsocketTransport.eval_set` and :meth:`WebsocketTransport.submit_eval`; an evaluation
the coordinator refuses is logged and skipped (the coordinator shows it as missing), never
retried with other answers.

A lease request waits while the campaign is paused or pending, and ends the run
(:class:`~worker.client.errors.CampaignFinished`) once the campaign is over or the round is past
its rounds. External samples and metrics are optional for a round: an error is logged and the
round goes on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from typing import Any

import msgspec

from worker.client.connection import RUNNING, Connection
from worker.client.errors import (
    LEASE_LOST_CODES,
    REJECTED_CODES,
    CampaignFinished,
    LeaseLost,
    RequestError,
    RoundSubmitted,
    SubmissionRejected,
)
from worker.engine.transport import Lease
from worker.shared import protocol
from worker.shared.evaluation import MAX_EVAL_ANSWER_CHARS
from worker.shared.protocol import ErrorCode
from worker.shared.questions import Question
from worker.shared.rollout import Rollout

log = logging.getLogger(__name__)


def _question(item: protocol.LeaseQuestion) -> Question:
    """A leased question (validated by the protocol's parse) as the engine's :class:`Question`."""
    return Question(item.ref, item.question, item.answer, item.metadata)


class WebsocketTransport(Connection):
    """The engine's :class:`~worker.engine.transport.Transport` over the coordinator's websocket.

    :meth:`start`, :meth:`close` and the campaign's state are the :class:`Connection`'s; this
    class adds the round's requests and the lease being worked on.
    """

    def __init__(self, url: str, hello: dict[str, Any], **options: Any) -> None:
        """``options``: the :class:`Connection`'s (timeouts, backoff, retries, ping interval)."""
        super().__init__(url, hello, **options)
        self.active_lease: Lease | None = None  # leased and not yet submitted
        self._submission_ids: dict[str, str] = {}  # lease_id -> submission_id, reused on retries
        # protocol 2: the next round's lease (from a metrics_ack) and a round's draw (submit_ack)
        self._next_lease: Lease | None = None
        self._drawn: dict[int, list[Rollout]] = {}
        self.hold_reports = False
        self.held_report: tuple[int, dict[str, float]] | None = None

    # --- the Transport protocol (main thread) --------------------------------------------------

    def lease(self, agent_id: str, round: int, count: int) -> Lease:
        """This node's questions for ``round``; waits while the campaign is paused.

        Raises :class:`CampaignFinished` when the campaign ended or ``round`` is past its rounds,
        :class:`RoundSubmitted` when this node already submitted ``round``.
        """
        held, self._next_lease = self._next_lease, None
        if held is not None and held.round == round and self.campaign_state == RUNNING:
            return held  # the metrics' answer carried it (protocol 2); it is the active lease
        try:
            message = self._call(self._lease(round))
        except RequestError as error:
            if error.code == ErrorCode.ROUND_SUBMITTED:
                raise RoundSubmitted(round, error.data) from None
            raise
        return self._hold(message, round, count)

    def _hold(self, message: protocol.Lease, round: int, count: int) -> Lease:
        """``message``, the lease of ``round``, as the engine's lease, now the active one."""
        if message.round != round:
            raise RequestError(
                ErrorCode.INVALID_MESSAGE, f"asked for round {round}, got a lease for {message.round}"
            )
        questions = [_question(item) for item in message.questions]
        if len(questions) != count:
            log.info(
                "round %d: the coordinator leased %d questions (asked for %d)", round, len(questions), count
            )
        lease = Lease(message.lease_id, round, questions)
        self.active_lease = lease
        return lease

    def lease_extra(self, agent_id: str, round: int, count: int, start: int) -> Lease:
        """Over-generation's questions ``start .. start + count - 1`` of ``round`` (a campaign's
        control node of the ``dyn`` arm: the coordinator refuses anyone else), on a lease of
        their own, now the active one."""
        request = protocol.ExtraLeaseRequest(round=round, start=start, count=count)
        return self._hold(self._call(self._request(request)), round, count)

    def submit(self, lease: Lease, rollouts: list[Rollout]) -> list[Rollout]:
        """Share the round's rollouts; returns copies carrying the coordinator's verified rewards.

        Raises :class:`LeaseLost` (redo the round with a new lease) or
        :class:`SubmissionRejected` (the coordinator judged them false: stop).
        """
        submission_id = self._submission_ids.setdefault(lease.lease_id, uuid.uuid4().hex)
        submit = protocol.Submit(submission_id=submission_id, lease_id=lease.lease_id, rollouts=rollouts)
        try:
            ack = self._call(self._request(submit))
        except RequestError as error:
            ack = self._submit_error(lease, error)
        verified = self._apply_ack(lease, rollouts, ack)
        if ack.samples is not msgspec.UNSET:
            self._drawn = {lease.round: ack.samples}
        self._forget(lease)
        return verified

    def sample_external(self, agent_id: str, round: int, count: int, strategy: str) -> list[Rollout]:
        """Up to ``count`` verified rollouts of other nodes; the coordinator applies the campaign's
        strategy. Optional for the round: an error is logged and answered with none."""
        count = max(0, min(count, protocol.MAX_ROLLOUTS_PER_MESSAGE))
        drawn = self._drawn.pop(round, None)
        if drawn is not None:  # the submit's answer carried the round's draw (protocol 2)
            return [r for r in drawn if r.agent_id != agent_id][:count]
        if count == 0:
            return []
        try:
            message = self._call(self._request(protocol.SampleRequest(round=round, count=count)))
        except (RequestError, CampaignFinished) as error:
            log.warning("round %d: no external rollouts (%s)", round, error)
            return []
        return [r for r in message.rollouts if r.agent_id != agent_id]

    def report(self, agent_id: str, round: int, metrics: dict[str, float]) -> None:
        """Send the round's metrics (they also advance the coordinator's resume round); with
        :attr:`hold_reports`, keep them for :meth:`send_held_report` instead (the node
        checkpoints the round before the coordinator moves on: volunteer.py)."""
        if self.hold_reports:
            self.held_report = (round, metrics)
            return
        self.send_report(round, metrics)

    def send_held_report(self) -> None:
        """Send the report :meth:`report` held, if any."""
        held, self.held_report = self.held_report, None
        if held is not None:
            self.send_report(*held)

    def send_report(self, round: int, metrics: dict[str, float]) -> None:
        speed = metrics.get("tokens_per_second")
        if isinstance(speed, int | float) and math.isfinite(speed) and speed > 0:
            self.update_hello(generation_tokens_per_second=float(speed))
        try:
            report = protocol.MetricsReport(round=round, metrics=protocol.clean_metrics(metrics))
            reply = self._call(self._request(report))
        except (RequestError, CampaignFinished) as error:
            log.warning("round %d: metrics not recorded (%s)", round, error)
            return
        if reply.next_lease is not msgspec.UNSET:  # protocol 2: the next round's lease, held
            next_lease = reply.next_lease
            self._next_lease = self._hold(next_lease, next_lease.round, len(next_lease.questions))

    def release_active(self, timeout: float = 5.0) -> bool:
        """Give the active lease back (the worker is stopping); one quick try, never raises."""
        lease = self.active_lease
        if lease is None or self._loop is None:
            return False
        try:
            release = protocol.Release(lease_id=lease.lease_id)
            self._call(self._try_once(release, timeout), timeout=timeout + 1)
        except Exception as error:  # the coordinator reissues it at its deadline anyway
            log.info("could not release lease %s (%s); it expires at its deadline", lease.lease_id, error)
            return False
        self._forget(lease)
        return True

    def eval_set(self, round: int) -> protocol.EvalSet | None:
        """The held-out questions of the evaluation after ``round``; None (logged) when the
        coordinator refuses (not due, already answered, the campaign over)."""
        try:
            return self._call(self._request(protocol.EvalRequest(round=round)))
        except (RequestError, CampaignFinished) as error:
            log.warning("round %d: no evaluation (%s)", round, error)
            return None

    def submit_eval(
        self, eval_set: protocol.EvalSet, completions: list[str], claimed_accuracy: float
    ) -> protocol.EvalAck | None:
        """Answer ``eval_set`` (one completion per question, in order; each cut to its last
        MAX_EVAL_ANSWER_CHARS characters, where the answer is, and shorter where the frame
        would pass the message limit); returns the coordinator's score,
        or None (logged) when it refuses. A retried submission's ``duplicate_submission`` carries
        the stored score, which counts as success."""
        submission_id, keep = uuid.uuid4().hex, MAX_EVAL_ANSWER_CHARS
        while True:  # long multi-byte answers: shorter tails until the frame fits the limit
            answers = [
                protocol.EvalAnswer(ref=item.ref, completion=text[-keep:] if keep else "")
                for item, text in zip(eval_set.questions, completions, strict=True)
            ]
            submit = protocol.EvalSubmit(
                submission_id=submission_id,
                eval_id=eval_set.eval_id,
                answers=answers,
                claimed_accuracy=min(1.0, max(0.0, claimed_accuracy)),
            )
            if keep == 0 or len(protocol.encode(submit).encode()) < protocol.MAX_MESSAGE_BYTES - 1024:
                break
            keep //= 2
        try:
            return self._call(self._request(submit))
        except RequestError as error:
            if error.code == ErrorCode.DUPLICATE_SUBMISSION and error.data:
                with contextlib.suppress(msgspec.ValidationError):
                    return msgspec.convert(error.data, protocol.EvalAck)
            log.warning("evaluation after round %d not stored (%s)", eval_set.round, error)
        except CampaignFinished as error:
            log.warning("evaluation after round %d not stored (%s)", eval_set.round, error)
        return None

    def _campaign_rounds(self) -> int | None:
        return None if self.welcome is None else self.welcome.campaign.config.rounds

    async def _lease(self, round: int) -> protocol.Lease:
        while True:
            await self._wait_running()
            try:
                return await self._request(protocol.LeaseRequest(round=round))
            except RequestError as error:
                if error.code != ErrorCode.CAMPAIGN_NOT_RUNNING:
                    raise
                rounds = self._campaign_rounds()
                if rounds is not None and round >= rounds:
                    raise CampaignFinished(error.message) from None
                # Paused or stopped since the last news: ask, then wait it out (or finish).
                if await self._refresh_state() == RUNNING:
                    await self._sleep(self.heartbeat_seconds)

    # --- submit helpers ------------------------------------------------------------------------

    def _submit_error(self, lease: Lease, error: RequestError) -> protocol.SubmitAck:
        """The ack a failed submit still yields (a replay), or the exception it means."""
        if error.code == ErrorCode.DUPLICATE_SUBMISSION and error.data:
            try:
                ack = msgspec.convert(error.data, protocol.SubmitAck)
            except msgspec.ValidationError as bad:
                log.warning("duplicate_submission with an unreadable ack: %s", bad)
            else:
                log.info("lease %s: submission was already stored (a retried submit)", lease.lease_id)
                return ack
        if error.code in LEASE_LOST_CODES or error.code == ErrorCode.DUPLICATE_SUBMISSION:
            self._forget(lease)
            raise LeaseLost(error.code, f"lease {lease.lease_id}: {error.message}") from None
        if error.code in REJECTED_CODES:
            raise SubmissionRejected(
                error.code,
                f"the coordinator rejected this worker's rollouts: {error.message}. Stopping before "
                "the node is banned; check that worker and coordinator run the same versions",
            ) from None
        raise error

    def _apply_ack(self, lease: Lease, rollouts: list[Rollout], ack: protocol.SubmitAck) -> list[Rollout]:
        ours = [r.rollout_id for r in rollouts]
        verified = ack.verified_rewards
        if ack.lease_id != lease.lease_id or ack.rollout_ids != ours or len(verified) != len(rollouts):
            # An ack for other rollouts (e.g. an earlier process's): its rewards are not for these.
            self._forget(lease)
            raise LeaseLost(
                ErrorCode.DUPLICATE_SUBMISSION, f"lease {lease.lease_id} was submitted by another attempt"
            )
        result = []
        for rollout, rewards in zip(rollouts, verified, strict=True):
            if len(rewards) != rollout.group_size:
                raise RequestError(
                    ErrorCode.INVALID_MESSAGE, "verified rewards do not match the rollouts' groups"
                )
            result.append(msgspec.structs.replace(rollout, rewards=[float(r) for r in rewards]))
        return result

    def _forget(self, lease: Lease) -> None:
        self._submission_ids.pop(lease.lease_id, None)
        if self.active_lease is not None and self.active_lease.lease_id == lease.lease_id:
            self.active_lease = None
