"""Held-out evaluation in a whole campaign (issue #48's acceptance): two real swarm workers
(`swarm-worker join`, tiny-1m) and an isolated control node that a real Celery worker of the
controls queue starts, over 4 rounds with an evaluation every 2: every node, the control too,
is evaluated after rounds 1 and 3 (the cadence), on the same fresh questions per evaluation and
on none twice, and each is stored at an independent re-scoring of its stored answers
(reasoning-gym's own datasets, built here). A node that claims more than its answers earn is
stored at the re-scored value: tests/coordinator/test_evaluations.py sends such claims over the
same protocol; the workers here claim their own verifier's score."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from swarm_app.campaigns.models import ControlRun
from swarm_app.coordinator.models import Evaluation, WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.runs import lifecycle
from swarm_app.web import dashboard
from tests.campaigns.test_controls import campaign_of, control_env, states, wait_for  # noqa: F401 (fixture)
from tests.coordinator.test_evaluations import independent_score
from tests.servers import celery_worker, stop, worker_process
from worker.shared.campaign import ControlsConfig

pytestmark = pytest.mark.slow

ROUNDS, EVERY, PER_TASK = 4, 2, 4  # evaluations after rounds 1 and 3, 4 questions of each task


def test_every_node_and_control_is_evaluated_at_the_cadence_and_stored_rescored(
    coordinator,
    control_env,  # noqa: F811 (the fixture imported above)
    tiny_1m_dir,
    tmp_path: Path,
):
    controls = ControlsConfig(isolated=True, filtered=False, seeds=1)
    campaign = campaign_of(ROUNDS, controls, name="held out", eval_every=EVERY, eval_questions=PER_TASK)
    config = campaign.settings
    lifecycle.launch(campaign)
    token = create_token(campaign, "swarm")[1]
    log = tmp_path / "controls.log"
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    with celery_worker(log, controls=1, **control_env):
        workers = [
            worker_process(
                coordinator, token, tmp_path / f"w{i}", logs[i], SWARM_MODEL_CACHE=str(tiny_1m_dir.parent)
            )
            for i in range(2)
        ]
        try:
            deadline = time.monotonic() + 420
            for worker, worker_log in zip(workers, logs, strict=True):
                worker.wait(timeout=max(1.0, deadline - time.monotonic()))
                assert worker.returncode == 0, worker_log.read_text()[-4000:]
            wait_for(lambda: states(campaign) == {"completed"}, 300, "the control completed", log, *logs)
        finally:
            for worker in workers:
                stop(worker)
    nodes = list(WorkerNode.objects.filter(campaign=campaign))
    control = ControlRun.objects.get(campaign=campaign)
    assert sorted(node.arm for node in nodes) == ["isolated", "swarm", "swarm"]
    assert all(node.round == ROUNDS for node in nodes), [(node.node_id, node.round) for node in nodes]
    rows = list(Evaluation.objects.filter(campaign=campaign).order_by("node_id", "round"))
    # every node, the control too, after each round of the cadence, and no other
    assert sorted((row.node_id, row.round) for row in rows) == sorted(
        (node.pk, number) for node in nodes for number in (1, 3)
    )
    by_round = {number: [row for row in rows if row.round == number] for number in (1, 3)}
    for number, evaluated in by_round.items():
        assert all(row.questions == evaluated[0].questions for row in evaluated), number  # one set
        assert len(evaluated[0].questions) == PER_TASK * len(config.mix.names)
    first = {tuple(ref.values()) for ref in by_round[1][0].questions}
    assert not first & {tuple(ref.values()) for ref in by_round[3][0].questions}  # fresh each time
    for row in rows:
        assert row.submission_id and len(row.answers) == row.n == len(row.questions)
        accuracy, reward = independent_score(row.questions, row.answers, config)
        assert row.accuracy == pytest.approx(accuracy) and row.reward == pytest.approx(reward), row
        assert row.correct == round(accuracy * row.n)
    # the dashboard: one swarm (counted once, 2 nodes) and the control's seed, after round 3
    held = dashboard.dashboard_payload(campaign)["summary"]["tiny-1m"]["held_out"]
    swarm = [row.accuracy for row in by_round[3] if row.node.arm == "swarm"]
    assert (held["swarm"]["round"], held["swarm"]["n"], held["swarm"]["nodes"]) == (3, 1, 2)
    assert held["swarm"]["accuracy"] == pytest.approx(sum(swarm) / 2) and held["swarm"]["missing"] == 0
    mine = Evaluation.objects.get(node__control_run=control, round=3)
    assert (held["isolated"]["accuracy"], held["isolated"]["n"]) == (pytest.approx(mine.accuracy), 1)
