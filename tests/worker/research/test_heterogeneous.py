"""The heterogeneous swarm (issue #29 item 6) on the real tiny-1m and tiny-5m models: the mixed
pool hands each size the other size's groups, a pool per size never does, 8/0 trains alone;
the study resumes without rerunning a cell, refuses other settings, and its report reads each
size as a study of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm_lab.heterogeneous import HeterogeneousConfig, run_heterogeneous
from swarm_lab.heterogeneous_report import tier_view, write_report
from swarm_lab.study import StudyError
from worker.research.simulate import pool_windows


def test_a_pool_per_size_holds_the_same_share_of_the_window_as_of_the_agents():
    tiers = ["tiny-1m"] * 4 + ["tiny-5m"] * 4
    assert pool_windows(tiers, 256, per_tier=False) == {"": 256}
    assert pool_windows(tiers, 256, per_tier=True) == {"tiny-1m": 128, "tiny-5m": 128}
    assert pool_windows(["tiny-1m"] * 3 + ["tiny-5m"], 256, per_tier=True) == {"tiny-1m": 192, "tiny-5m": 64}


def test_settings_are_checked_before_anything_runs():
    with pytest.raises(StudyError, match="two different tiers"):
        HeterogeneousConfig(tiers=["tiny-1m", "tiny-1m"])
    with pytest.raises(StudyError, match="does not share"):
        HeterogeneousConfig(swarm_arm="8/0")
    with pytest.raises(StudyError, match="unknown model tier"):
        HeterogeneousConfig(tiers=["tiny-1m", "tiny-9m"])


def test_each_arm_trains_on_what_it_is_designed_to_and_the_study_resumes(tiny_1m_dir: Path, tmp_path: Path):
    config = HeterogeneousConfig(
        agents_per_tier=2, rounds=3, seeds=[0], group_size=4, max_new_tokens=4, quick=True
    )
    out = tmp_path / "heterogeneous.json"
    logs: list[str] = []
    results = run_heterogeneous(config, out, jobs=1, log=logs.append)
    cfg = results["config"]
    assert cfg["complete"] and cfg["cells_done"] == 3
    assert cfg["agent_tiers"] == ["tiny-1m", "tiny-1m", "tiny-5m", "tiny-5m"]
    assert cfg["pool_windows"] == {"mixed": {"": 256}, "by-size": {"tiny-1m": 128, "tiny-5m": 128}}
    batches = {key.split("|")[0]: cell["batches_by_tier"] for key, cell in cfg["cells"].items()}
    for size in ("tiny-1m", "tiny-5m"):
        # every size's own groups are the same in the two sharing arms: same questions, same rule
        assert batches["mixed"][size]["batch/local_used"] <= 4
        # a pool per size never hands over the other size's groups; 8/0 takes none at all
        assert batches["by-size"][size]["batch/external_other_tier"] == 0
        assert batches["8/0"][size]["batch/external_used"] == 0
        assert batches["8/0"][size]["batch/local_used"] == 8
    # in the mixed pool, each size trains on groups the other size generated
    assert all(batches["mixed"][size]["batch/external_other_tier"] > 0 for size in ("tiny-1m", "tiny-5m"))
    assert all(batches["by-size"][size]["batch/external_used"] > 0 for size in ("tiny-1m", "tiny-5m"))
    # per size, a curve of R rounds and its cumulative reward
    for arm in ("mixed", "by-size", "8/0"):
        for size in ("tiny-1m", "tiny-5m"):
            curve = results["curves"][arm]["0"][size]
            assert len(curve) == 3
            assert results["arms"][arm][size] == [round(sum(curve), 6)]

    # a rerun finds every cell done and runs none; a larger seed list adds only the new seed's
    again = run_heterogeneous(config, out, jobs=1, log=logs.append)
    assert again["curves"] == results["curves"]
    with pytest.raises(StudyError, match="other settings"):
        run_heterogeneous(
            HeterogeneousConfig(**{**config.__dict__, "rounds": 4}), out, jobs=1, log=logs.append
        )

    report = write_report(out, tmp_path / "report.md", resamples=200).read_text()
    assert "## tiny-1m" in report and "## tiny-5m" in report
    assert "Holm p over the 2 sizes' primaries" in report
    assert "| mixed - by-size |" in report
    view = tier_view(json.loads(out.read_text()), "tiny-5m")
    assert view["arms"]["mixed"] == results["arms"]["mixed"]["tiny-5m"]
    assert (tmp_path / "report-curves.png").stat().st_size > 0
