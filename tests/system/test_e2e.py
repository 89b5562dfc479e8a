"""The swarm end to end: real worker processes (`swarm-worker join`, tiny-1m) against a real
coordinator, and the faults a volunteer swarm lives with: a worker killed mid-lease, the
coordinator restarted mid-campaign, a worker restarted."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from swarm_app.campaigns.models import Campaign, RoundMetrics
from swarm_app.coordinator.models import Evaluation, Lease, PoolRollout, WorkerNode
from swarm_app.coordinator.presence import FLUSH_SECONDS
from swarm_app.coordinator.tokens import create_token
from tests.factories import tiny_campaign_config
from tests.servers import asgi_server, free_port, stop, worker_process
from worker.shared.evaluation import score_answers
from worker.shared.questions import QuestionRef
from worker.shared.rewards import rewards

pytestmark = pytest.mark.slow

WORKER_TIMEOUT = 420  # seconds; 2 cores shared by 3-4 processes


def make_campaign(rounds: int, **overrides) -> tuple[Campaign, str]:
    config = tiny_campaign_config(rounds, max_new_tokens=12, **overrides)
    campaign = Campaign.objects.create(name="e2e", state=Campaign.State.RUNNING, config=config.to_json())
    return campaign, create_token(campaign, "e2e")[1]


def wait_all(procs: list, logs: list[Path], timeout: float = WORKER_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    for proc, log in zip(procs, logs, strict=True):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except Exception:
            stop(proc)
            pytest.fail(f"worker did not finish in time:\n{log.read_text()[-4000:]}")
        assert proc.returncode == 0, log.read_text()[-4000:]


def requests_answered(url: str) -> dict[str, int]:
    """The requests the coordinator answered, by type, from its /metrics (the ack histogram's
    counts, every campaign and tier together)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    counts: dict[str, int] = {}
    for match in re.finditer(r'^swarm_ack_seconds_count\{[^}]*request="(\w+)"[^}]*\} (\S+)$', text, re.M):
        counts[match[1]] = counts.get(match[1], 0) + int(float(match[2]))
    return counts


def assert_pool_verified(campaign: Campaign) -> None:
    mix = campaign.settings.mix
    for row in PoolRollout.objects.filter(campaign=campaign):
        record = row.record
        ref = QuestionRef.from_json(record["ref"])
        assert record["rewards"] == rewards(mix, ref, record["completions"]), row


def test_three_workers_share_and_train(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=5)
    with asgi_server(tmp_path / "daphne.log") as url:
        logs = [tmp_path / f"worker-{i}.log" for i in range(3)]
        procs = [
            worker_process(url, token, tmp_path / f"w{i}", logs[i], "--max-rounds", "5") for i in range(3)
        ]
        wait_all(procs, logs)
        asked = requests_answered(url)

    # Protocol 2: after each node's first lease, leases came with the metrics' answers and the
    # draws with the submits' answers (the server's own count of what it answered).
    # and each node's held-out evaluation after its last round (issue #48): one set, one answer
    assert asked == {
        "lease_request": 3,
        "submit": 15,
        "metrics": 15,
        "eval_request": 3,
        "eval_submit": 3,
    }, asked
    nodes = list(WorkerNode.objects.filter(campaign=campaign))
    assert len(nodes) == 3
    assert all(n.round == 5 for n in nodes), [(n.node_id, n.round) for n in nodes]
    rows = RoundMetrics.objects.filter(campaign=campaign, arm="swarm")
    assert rows.count() == 15
    assert_pool_verified(campaign)
    assert PoolRollout.objects.filter(campaign=campaign).count() == 3 * 5 * 4
    external_used = [r.metrics["batch/external_used"] for r in rows]
    assert sum(external_used) > 0, external_used
    assert all(r.metrics["batch/external_from_self"] == 0 for r in rows)
    # Workers trained on each other's rollouts: at least two of the three. Not every one: on a
    # loaded machine (CI's two suites side by side) one worker can run its 5 rounds while the
    # others still load their models, and then finds no other node's group to draw (seen once).
    sharing = [
        n for n in nodes if any(r.metrics["batch/external_used"] > 0 for r in rows if r.node_id == n.pk)
    ]
    assert len(sharing) >= 2, [(n.node_id, n.round) for n in nodes]
    # Held-out: every node evaluated after round 4 on the same questions, stored at the score
    # the verifier gives the stored answers.
    evaluations = list(Evaluation.objects.filter(campaign=campaign))
    assert sorted(e.node_id for e in evaluations) == sorted(n.pk for n in nodes)
    config = campaign.settings
    for evaluation in evaluations:
        refs = [QuestionRef.from_json(ref) for ref in evaluation.questions]
        assert evaluation.round == 4 and evaluation.questions == evaluations[0].questions
        score = score_answers(config.mix, refs, evaluation.answers, config.format_weight)
        assert (evaluation.n, evaluation.accuracy) == (len(refs), score.accuracy)


def test_worker_killed_mid_lease_loses_and_doubles_nothing(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=3, lease_seconds=5)
    with asgi_server(tmp_path / "daphne.log") as url:
        victim = worker_process(url, token, tmp_path / "victim", tmp_path / "victim.log")
        deadline = time.monotonic() + WORKER_TIMEOUT
        while not Lease.objects.filter(campaign=campaign, state=Lease.State.ACTIVE).exists():
            assert time.monotonic() < deadline and victim.poll() is None, (
                tmp_path / "victim.log"
            ).read_text()[-3000:]
            time.sleep(0.1)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        orphan = Lease.objects.get(campaign=campaign, state=Lease.State.ACTIVE)
        # Past its deadline the server's sweep marks it expired (every FLUSH_SECONDS): from then
        # on its questions go to the next worker that asks. A worker asking before the sweep
        # gets fresh questions (leases.py), so the rescuer starts once the sweep has run.
        deadline = time.monotonic() + 5 + 3 * FLUSH_SECONDS
        while Lease.objects.get(pk=orphan.pk).state != Lease.State.EXPIRED:
            assert time.monotonic() < deadline, "the overdue lease was not marked expired"
            time.sleep(0.2)

        log = tmp_path / "rescuer.log"
        rescuer = worker_process(url, token, tmp_path / "rescuer", log, "--max-rounds", "3")
        wait_all([rescuer], [log])

    orphan.refresh_from_db()
    assert orphan.state == Lease.State.REISSUED
    reissue = Lease.objects.get(reissue_of=orphan)
    assert reissue.state == Lease.State.SUBMITTED
    assert reissue.questions == orphan.questions
    refs = list(
        PoolRollout.objects.filter(campaign=campaign).values_list("task", "question_seed", "question_index")
    )
    assert len(refs) == len(set(refs)), "a question was counted twice"
    victim_rollouts = PoolRollout.objects.filter(campaign=campaign).exclude(node=reissue.node).count()
    assert len(refs) == 3 * 4 + victim_rollouts  # the rescuer's three rounds hold the orphan's questions
    assert_pool_verified(campaign)


def test_coordinator_restart_and_worker_restart(tiny_1m_dir, transactional_db, tmp_path):
    campaign, token = make_campaign(rounds=6)
    port = free_port()
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    with asgi_server(tmp_path / "daphne-1.log", port=port) as url:
        procs = [
            worker_process(url, token, tmp_path / f"w{i}", logs[i], "--max-rounds", "4") for i in range(2)
        ]
        deadline = time.monotonic() + WORKER_TIMEOUT
        while RoundMetrics.objects.filter(campaign=campaign).count() < 2:
            assert time.monotonic() < deadline, logs[0].read_text()[-3000:]
            time.sleep(0.2)
    # the coordinator is down now; the workers keep retrying until it is back on the same port
    time.sleep(2)
    with asgi_server(tmp_path / "daphne-2.log", port=port) as url:
        wait_all(procs, logs)
        first_ids = set(WorkerNode.objects.filter(campaign=campaign).values_list("node_id", flat=True))
        assert len(first_ids) == 2
        assert all(n.round == 4 for n in WorkerNode.objects.filter(campaign=campaign))

        # a worker restarted on its data directory resumes as the same node, at its round
        again = worker_process(url, token, tmp_path / "w0", logs[0], "--max-rounds", "2")
        wait_all([again], [logs[0]])
    nodes = {n.node_id: n for n in WorkerNode.objects.filter(campaign=campaign)}
    assert set(nodes) == first_ids
    assert sorted(n.round for n in nodes.values()) == [4, 6]
    resumed = max(nodes.values(), key=lambda n: n.round)
    rounds = sorted(RoundMetrics.objects.filter(node=resumed).values_list("round", flat=True))
    assert rounds == list(range(6))
    assert_pool_verified(campaign)


def node_ids_of(data_dir: Path, nodes: int) -> list[str]:
    """The node ids a ``--nodes`` process created in its data directory (worker/client/volunteer.py)."""
    from worker.client.identity import load_identity
    from worker.client.volunteer import node_data_dirs

    return [load_identity(path).node_id for path in node_data_dirs(data_dir, nodes)]


def test_two_multi_node_processes_share_keep_their_checkpoints_and_resume_after_kill_9(
    tiny_1m_dir, transactional_db, tmp_path
):
    rounds = 4
    campaign, token = make_campaign(rounds=rounds)
    dirs = [tmp_path / "p0", tmp_path / "p1"]
    logs = [tmp_path / "p0.log", tmp_path / "p1.log"]
    with asgi_server(tmp_path / "daphne.log") as url:
        procs = [worker_process(url, token, dirs[i], logs[i], "--nodes", "2") for i in range(2)]
        # kill -9 the first process once each of its nodes has checkpointed a round (a round is
        # reported before its checkpoint is written: waiting for the report alone races it)
        deadline = time.monotonic() + WORKER_TIMEOUT
        while True:
            assert time.monotonic() < deadline and procs[0].poll() is None, logs[0].read_text()[-3000:]
            if (dirs[0] / "nodes" / "node-1" / "node.json").exists():
                victims = node_ids_of(dirs[0], 2)
                paths = node_data_dirs_checkpoints(dirs[0], campaign.pk, victims)
                if all(path.exists() for path in paths):
                    break
            time.sleep(0.05)
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        killed_at = {
            node: RoundMetrics.objects.filter(campaign=campaign, node__node_id=node).count()
            for node in victims
        }
        procs[0] = worker_process(url, token, dirs[0], logs[0], "--nodes", "2")
        wait_all(procs, logs)

    nodes = {n.node_id: n for n in WorkerNode.objects.filter(campaign=campaign)}
    assert set(nodes) == set(victims) | set(node_ids_of(dirs[1], 2))  # 4 ordinary nodes, none new
    from worker.shared.hardware import total_ram_bytes

    for node in nodes.values():
        # each node said hello with its share of the machine (the tier assigned must fit that)
        assert node.hardware["ram_bytes"] == total_ram_bytes() // 2, node.hardware
        reported = sorted(RoundMetrics.objects.filter(node=node).values_list("round", flat=True))
        assert reported == list(range(rounds)), (node.node_id, reported)
        submitted = sorted(Lease.objects.filter(node=node, state="submitted").values_list("round", flat=True))
        assert submitted == list(range(rounds)), (node.node_id, submitted)
        rows = RoundMetrics.objects.filter(node=node)
        # trained on other nodes' rollouts (its process's other node, or the other process's)
        assert any(r.metrics["external_fraction"] > 0 for r in rows), node.node_id
        assert all(r.metrics["batch/external_from_self"] == 0 for r in rows), node.node_id
    text = logs[0].read_text()
    for node, path in zip(victims, node_data_dirs_checkpoints(dirs[0], campaign.pk, victims), strict=True):
        assert path.is_file(), path  # each node's own checkpoint, in its own data directory
        assert f"resumed from {path}" in text, (node, killed_at, text[-3000:])
    import torch

    weights = [
        torch.load(path, weights_only=False)["model"]
        for path in node_data_dirs_checkpoints(dirs[0], campaign.pk, victims)
    ]
    name = next(iter(weights[0]))
    assert not torch.equal(weights[0][name], weights[1][name])  # two policies, not one shared
    assert_pool_verified(campaign)


def node_data_dirs_checkpoints(data_dir: Path, campaign_id: int, node_ids: list[str]) -> list[Path]:
    from worker.client.identity import checkpoint_path
    from worker.client.volunteer import node_data_dirs

    return [
        checkpoint_path(path, campaign_id, node)
        for path, node in zip(node_data_dirs(data_dir, len(node_ids)), node_ids, strict=True)
    ]
