"""Study v4 (issue #49): its controls differ from their arms as designed, observing a cell for
held-out accuracy leaves its training bit for bit unchanged, and every cell's provenance is
recorded and survives a resume."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swarm_lab.study import (
    V4_DEFAULT_ARMS,
    V4_FAMILY,
    V4_NEW_ARMS,
    StudyConfig,
    StudyError,
    resolve_arm,
)
from swarm_lab.study_runner import _open_results, pending_cells, run_cell, run_study, tree_state
from tests.worker.research.test_study import run_cli


def test_each_v4_control_differs_from_its_arm_in_one_thing():
    b4, b4_age = resolve_arm("4/4@B4"), resolve_arm("4/4@B4-age")
    # 4/4 (B = 8) keeps 256 rollouts = 4 rounds of 8 agents; 4/4@B4 generates half: 128 = 4 rounds
    assert b4.pool_window is None and b4_age.pool_window == 128
    assert b4_age.to_json() | {"name": b4.name, "pool_window": None} == b4.to_json()
    own = resolve_arm("4/0@B4")
    assert (own.num_local, own.num_external, own.questions_per_round) == (4, 0, 4)
    assert (own.local_strategy, own.batch_rule) == (b4.local_strategy, b4.batch_rule)
    backfill, self_fill = resolve_arm("backfill"), resolve_arm("backfill-self")
    assert (self_fill.replay, self_fill.self_window) == ("self", 20)
    assert (
        self_fill.to_json() | {"name": "backfill", "replay": "pool", "self_window": 0} == backfill.to_json()
    )
    assert not self_fill.shares and b4_age.shares
    assert {a for pair in V4_FAMILY for a in pair} <= set(V4_DEFAULT_ARMS)


def test_v4_runs_its_new_cells_first_then_its_reruns_of_v3(tmp_path: Path):
    config = StudyConfig(seeds=list(range(10)))
    todo = pending_cells(_open_results(tmp_path / "r.json", config), config)
    assert len(todo) == 70
    new = [(a, s) for a in V4_NEW_ARMS for s in range(10)] + [("4/4-is", s) for s in range(6, 10)]
    assert sorted(todo[:34]) == sorted(new)
    assert todo[:4] == [("4/0@B4", 0), ("4/4@B4-age", 0), ("backfill-self", 0), ("4/0@B4", 1)]
    assert ("4/4-is", 0) in todo[34:] and ("8/0", 9) in todo[34:]


def test_observing_a_cell_leaves_its_training_unchanged(tiny_1m_dir: Path):
    quick = StudyConfig(
        agents=2, rounds=3, seeds=[0], group_size=4, max_new_tokens=8, held_out_per_task=4, quick=True
    )
    plain = {**quick.settings(), "held_out_points": None}
    watched = run_cell(quick.settings(), "4/4@B4-age", 0)
    alone = run_cell(plain, "4/4@B4-age", 0)
    assert watched["curve"] == alone["curve"] and "held_out" not in alone
    held = watched["held_out"]
    assert held["rounds"] == [0, 1, 2, 3] and held["n"] == quick.agents * held["questions"] == 2 * 8
    first = held["agent_accuracy"][0]
    assert first == [first[0]] * quick.agents  # every agent starts from the same weights
    assert held["divergence"][0] == 0.0 and held["drift"][0] == 0.0
    assert all(0.0 <= a <= 1.0 for a in held["accuracy"]) and held["divergence"][-1] > 0.0


def test_a_resume_keeps_every_earlier_cells_record(tiny_1m_dir: Path, tmp_path: Path):
    out = tmp_path / "v4.json"
    args = ("study", "--quick", "--arms", "4/0@B4,backfill-self", "--out", str(out))
    first = run_cli(*args, cache=tiny_1m_dir.parent)
    assert first.returncode == 0, first.stderr[-3000:]
    results = json.loads(out.read_text())
    cells = results["config"]["cells"]
    assert set(cells) == {"4/0@B4|0", "4/0@B4|1", "backfill-self|0", "backfill-self|1"}
    for cell in cells.values():
        provenance = cell["provenance"]
        assert len(provenance["commit"]) == 40 and len(provenance["model_sha256"]) == 64
        assert provenance["started"] <= provenance["ended"]
    assert set(results["held_out"]["backfill-self"]) == {"0", "1"}
    mechanism = results["mechanism"]
    assert all(v == 0 for v in mechanism["backfill-self"]["0"]["batch/external_from_others"])
    assert mechanism["4/0@B4"]["0"]["generation/questions"] == [4.0, 4.0]
    assert mechanism["4/0@B4"]["0"]["batch/external_used"] == [0.0, 0.0]

    del results["curves"]["backfill-self"]["1"], results["config"]["cells"]["backfill-self|1"]
    out.write_text(json.dumps(results))
    second = run_cli(*args, cache=tiny_1m_dir.parent)
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = json.loads(out.read_text())
    for key, cell in results["config"]["cells"].items():
        assert resumed["config"]["cells"][key] == cell
    assert resumed["config"]["versions"] == results["config"]["versions"]
    runs = resumed["config"]["runs"]
    assert len(runs) == 2 and runs[0] == results["config"]["runs"][0] and runs[1]["cells_before"] == 3
    assert resumed["config"]["cells"]["backfill-self|1"]["provenance"]["started"] >= runs[1]["started"]


def test_a_full_run_refuses_a_tree_with_uncommitted_changes(tmp_path: Path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    (repo / "results.json").write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    clean = tree_state(repo / "results.json", root=repo)
    assert len(clean["commit"]) == 40 and clean["diff_sha256"] is None
    (repo / "results.json").write_text('{"cells": 1}\n')  # the run's own output does not count
    assert tree_state(repo / "results.json", root=repo)["diff_sha256"] is None
    (repo / "code.py").write_text("x = 2\n")
    dirty = tree_state(repo / "results.json", root=repo)
    assert dirty["commit"] == clean["commit"] and len(dirty["diff_sha256"]) == 64

    import swarm_lab.study_runner as runner

    monkeypatch.setattr(runner, "tree_state", lambda out: dirty)
    out = tmp_path / "v4.json"
    with pytest.raises(StudyError, match="uncommitted changes"):
        run_study(StudyConfig(seeds=[0]), out)
    assert not out.exists()  # refused before any cell ran
