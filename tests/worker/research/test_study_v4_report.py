"""Study v4's report says only what its pre-registered rows show (issue #49): on synthetic
results with known effects, a shifted comparison is stated with its Holm p, a null one as "not
shown" with the effect it could have detected, exploratory rows never reach the plain words,
v3's cells stand in for reruns not yet run and a rerun that differs from v3 is named."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from swarm_lab.study import V4_DEFAULT_ARMS, StudyConfig
from swarm_lab.study_runner import _open_results
from swarm_lab.study_v4_report import write_report


def synthetic(tmp_path: Path) -> tuple[dict, dict]:
    """v4 results (10 seeds, 12 rounds) where 4/4@B4 beats 4/0@B4 by 0.02 a round and held-out
    accuracy by 0.05; every other arm is the base plus noise; and a v3 file to rerun."""
    config = StudyConfig(rounds=12, seeds=list(range(10)))
    results = _open_results(tmp_path / "none.json", config)
    rng = np.random.default_rng(3)
    base = {s: 0.2 + 0.01 * np.arange(12) for s in range(10)}
    shift = {"4/4@B4": 0.02}
    for arm in V4_DEFAULT_ARMS:
        for s in range(10):
            curve = base[s] + shift.get(arm, 0.0) + rng.normal(0, 0.004, 12)
            results["curves"][arm][str(s)] = [round(float(v), 6) for v in curve]
            accuracy = [0.1, 0.2, 0.3, 0.35 + (0.05 if arm == "4/4@B4" else 0.0) + rng.normal(0, 0.005)]
            results["held_out"][arm][str(s)] = {
                "rounds": [0, 4, 8, 12],
                "accuracy": accuracy,
                "reward": [a + 0.05 for a in accuracy],
                "divergence": [0.0, 0.01, 0.02, 0.03],
                "drift": [0.0, 0.01, 0.02, 0.03],
                "agent_accuracy": [[a] * 8 for a in accuracy],
                "questions": 128,
                "n": 1024,
            }
    results["config"].update(cells_done=70, cells_total=70, complete=True)
    v3 = {
        "curves": {
            arm: copy.deepcopy(results["curves"][arm]) for arm in ("8/0", "4/4@B4", "backfill", "4/4-is")
        }
    }
    return results, v3


def test_the_report_states_what_the_preregistered_rows_show_and_nothing_else(tmp_path: Path, monkeypatch):
    results, v3 = synthetic(tmp_path)
    v3_path = tmp_path / "v3.json"
    v3_path.write_text(json.dumps(v3))
    results["config"]["preregistered"]["reruns_of"] = str(v3_path)  # absolute: REPO / it is it
    # one rerun not yet run (v3's cell stands in), one that differs from v3's
    del results["curves"]["8/0"]["9"]
    results["curves"]["backfill"]["3"][5] += 0.001
    path = tmp_path / "v4.json"
    path.write_text(json.dumps(results))
    text = write_report(path, resamples=500).read_text()
    words = text.split("## In plain words (pre-registered rows only)")[1].split("## Plots")[0]
    assert "**4/4@B4 earns more training reward than 4/0@B4**" in words
    assert "**4/4@B4 earns more held-out accuracy than 4/0@B4**" in words
    assert "- 4/4@B4-age - 8/0 (training reward): not shown at n = 10" in words
    assert (
        "would have been detected with 80% power" in words and "not evidence that the two are equal" in words
    )
    assert "4/4@B4-age - 4/4@B4" not in words and "backfill-self - 8/0" not in words  # exploratory
    assert "| 4/4-is - 8/0 (6 seeds seen in v3) |" in text
    assert "- 8/0: training reward from 9 v4 cell(s) and 1 of v3's (not rerun yet" in text
    assert "**1 differ**: backfill seed 3." in text
    assert "4/4@B4 - 4/0@B4: training +0.23, held-out +0.053: the same sign." in text
    assert (tmp_path / "v4-accuracy.png").stat().st_size > 1000


def test_a_row_short_of_its_seeds_draws_no_conclusion(tmp_path: Path):
    results, _ = synthetic(tmp_path)
    for arm in V4_DEFAULT_ARMS:
        for s in range(6, 10):
            results["curves"][arm].pop(str(s))
            results["held_out"][arm].pop(str(s))
    results["config"]["preregistered"]["reruns_of"] = None
    path = tmp_path / "v4.json"
    path.write_text(json.dumps(results))
    words = write_report(path, resamples=500).read_text().split("## In plain words")[1]
    assert words.count("6 of 10 seeds so far; no conclusion yet.") == 8 and "earns" not in words
