"""The SAPO table study (issue #8): its statistics on inputs with known answers, the retired
designs' reports (issue #51) and the study's batches on synthetic results, and the quick study
end to end through the real CLI (results after every cell, resume without recomputing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from swarm_lab.study import (
    ARM_ORDER,
    FAMILY,
    MECHANISM_METRICS,
    REQUIRED_ARMS,
    V3_FAMILY,
    V4_FAMILY,
    StudyConfig,
    StudyError,
    campaign_overrides,
)
from swarm_lab.study_report import RETIRED_AT, RetiredDesign, write_report
from swarm_lab.study_runner import _open_results
from worker.shared import stats

# --- statistics with known answers ---------------------------------------------------------------


def test_identical_arms_give_p_one_and_an_interval_of_zero():
    a = [3.1, 2.7, 4.4, 3.9, 2.2, 3.3]
    assert stats.sign_flip_test(a, a).p_value == 1.0
    assert stats.paired_bootstrap_interval(a, a) == (0.0, 0.0)
    assert stats.paired_ratio_interval(a, a) == (0.0, 0.0)


def test_a_constant_shift_gives_exactly_that_shift():
    # Dyadic values, so a_i + 0.25 - a_i is exactly 0.25 in floating point.
    b = [1.5, 2.25, 3.0, 0.75, 5.5]
    a = [x + 0.25 for x in b]
    assert stats.paired_bootstrap_interval(a, b) == (0.25, 0.25)
    assert stats.paired_ratio_interval([2 * x for x in b], b) == (1.0, 1.0)  # a = 2b: gain exactly +100%
    # All five differences positive: only the identity and the all-flipped pattern reach |mean|.
    result = stats.sign_flip_test(a, b)
    assert result.exact and result.p_value == 2 / 32 == result.min_p_value


def test_exact_sign_flip_p_values_computed_by_hand():
    # d = (1, 2, 3): the 8 signed sums are +-6, +-4, +-2, 0, 0; |sum| >= 6 for 2 of them.
    assert stats.sign_flip_test([1, 2, 3], [0, 0, 0]).p_value == pytest.approx(2 / 8)
    # d = (3, -1, 2, 1), |d| sums to 7, observed |sum| = 5. Negating a subset of sum N gives
    # |7 - 2N| >= 5 iff N <= 1 or N >= 6: {}, {1}, {1'} and their complements, 6 of 16.
    assert stats.sign_flip_test([3, -1, 2, 1], [0, 0, 0, 0]).p_value == pytest.approx(6 / 16)
    assert stats.sign_flip_test([5.0], [1.0]).p_value == 1.0  # one pair can never reject


def test_monte_carlo_sign_flip_is_seeded_and_close_to_exact():
    d = [1.0, 2.0, 3.0, -0.5, 1.5]
    exact = stats.sign_flip_test(d, [0.0] * 5).p_value
    mc = stats.sign_flip_test(d, [0.0] * 5, resamples=20_000, exact_max_n=0)
    assert not mc.exact and mc.p_value == pytest.approx(exact, abs=0.01)
    assert stats.sign_flip_test(d, [0.0] * 5, resamples=20_000, exact_max_n=0) == mc


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_data():
    rng = np.random.default_rng(3)
    small, large = rng.normal(5.0, 1.0, 10), rng.normal(5.0, 1.0, 1000)
    lo_s, hi_s = stats.bootstrap_interval(small)
    lo_l, hi_l = stats.bootstrap_interval(large)
    assert lo_s < small.mean() < hi_s and lo_l < large.mean() < hi_l
    assert (hi_l - lo_l) < (hi_s - lo_s) / 5  # width ~ 1/sqrt(n): 10x narrower for 100x data
    assert stats.bootstrap_interval(small) == (lo_s, hi_s)  # seeded
    assert stats.bootstrap_interval([]) is None and stats.bootstrap_interval([2.0]) == (2.0, 2.0)


def test_bootstrap_interval_depends_on_its_seed_scales_with_the_data_and_covers():
    # 2000 resamples, the dashboard's count; with many more, the discrete quantiles of 8 values
    # no longer depend on the seed.
    values = [0.2, 0.4, 0.35, 0.5, 0.3, 0.45, 0.25, 0.6]
    low, high = stats.bootstrap_interval(values, 2000)
    assert low < np.mean(values) < high
    assert stats.bootstrap_interval(values, 2000) == (low, high)  # same seed, same interval
    assert stats.bootstrap_interval(values, 2000, seed=1) != (low, high)
    wide = stats.bootstrap_interval([v * 3 for v in values], 2000)
    assert wide[1] - wide[0] > (high - low) * 2.5
    # Coverage, roughly: a 95% interval from 30 normal draws covers the true mean most times.
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(100):
        draw = rng.normal(1.0, 1.0, 30)
        lo, hi = stats.bootstrap_interval(draw, resamples=500)
        covered += lo <= 1.0 <= hi
    assert covered >= 85


def test_holm_adjustment():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


# --- reports and batches on synthetic results ---------------------------------------------------


def synthetic(
    shift: float,
    seeds: int,
    noise: float = 0.02,
    rounds: int = 12,
    shifted: tuple[str, ...] = ("4/4", "6/2"),
    design: str = "v2",
) -> dict:
    """Results in the study's shape: the ``shifted`` arms exceed every other arm by ``shift`` per
    round."""
    rng = np.random.default_rng(11)
    names = ARM_ORDER[:12] if design == "v3" else ARM_ORDER[:8]
    base = {s: 0.2 + 0.01 * np.arange(rounds) + rng.normal(0, noise, rounds) for s in range(seeds)}
    curves = {
        name: {
            str(s): [round(float(v), 6) for v in base[s] + (shift if name in shifted else 0.0)]
            for s in range(seeds)
        }
        for name in names
    }
    config = {
        **StudyConfig(rounds=rounds, seeds=list(range(seeds)), design=design).settings(),
        "seeds": list(range(seeds)),
        "arms": list(names),
        "cumulative_reward": "sum over rounds of the per-round mean reward over the agents",
        "complete": True,
        "cells_done": seeds * len(names),
        "cells_total": seeds * len(names),
        "cells": {},
    }
    family = V3_FAMILY if design == "v3" else FAMILY
    config["preregistered"] = {"primary": list(family[0]), "family": [list(p) for p in family]}
    arms = {name: [round(sum(curves[name][str(s)]), 6) for s in range(seeds)] for name in names}
    return {"config": config, "arms": arms, "curves": curves}


def test_planning_with_the_exact_test():
    # 2/2^n <= alpha / m: n = 6 alone, 7 under Holm over 3, 9 over the old table's 9 rows
    assert [stats.sign_flip_min_seeds(0.05, m) for m in (1, 3, 9)] == [6, 7, 9]
    assert stats.sign_flip_power(1.0, 0.01, 5) == 0.0  # 2/32 > 0.05: never, however clear
    assert stats.sign_flip_power(1.0, 0.01, 6) == 1.0  # 2/64: always, all signs agree
    assert stats.sign_flip_power(0.0, 1.0, 10, draws=2000) < 0.08  # about alpha under H0
    assert stats.minimum_detectable_effect(1.0, 5) is None
    mde = stats.minimum_detectable_effect(1.0, 12)
    assert 0.5 < mde < 1.5 and stats.sign_flip_power(mde, 1.0, 12) >= 0.8
    assert stats.seeds_for_power(1.0, 0.01) == 6 and stats.seeds_for_power(1.0, 0.01, alpha=0.05 / 3) == 7


def test_a_retired_designs_report_is_its_committed_file(tmp_path: Path, capsys):
    """The report generators of designs v1 to v3 are retired (issue #51): `study-report` on their
    results files says so in one line, names the committed report, which stays, and exits 2."""
    from worker.cli import main

    root = Path(__file__).parents[3]
    for stem, design in (
        ("issue-8/sapo-table-cpu", "v1"),
        ("sapo-table-cpu", "v2"),
        ("self-replay-age-matched", "v2"),
        ("sapo-table-cpu-v3", "v3"),
    ):
        results = root / f"docs/experiments/{stem}.json"
        assert main(["study-report", str(results), "--out", str(tmp_path / "r.md")]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and not (tmp_path / "r.md").exists()
        assert captured.err == (
            f"swarm-worker study-report: {results} is a study of design {design}, whose report generator "
            f"is retired (issue #51): its report is the committed {results.with_suffix('.md')}; commit "
            f"{RETIRED_AT} generates it\n"
        )
        assert "## " in results.with_suffix(".md").read_text()
    # a retired design's own run (a quick one) has no committed report
    quick = tmp_path / "v3.json"
    quick.write_text(json.dumps(synthetic(0.0, 2, rounds=2, design="v3")))
    with pytest.raises(
        RetiredDesign, match=r"v3, whose report generator is retired .*no report was committed"
    ):
        write_report(quick)


def test_campaign_preset_runs_the_same_arms():
    """Each study arm is a `sapo-table` campaign's swarm arm or one of its controls."""
    from swarm_lab.study import arm_by_name
    from worker.shared.campaign import sapo_table_config

    for name, arm in arm_by_name().items():
        if name in ("4/0@B4", "backfill-self"):  # issue #49's simulator-only controls
            with pytest.raises(StudyError, match="simulator only"):
                campaign_overrides(name)
            continue
        config = sapo_table_config(**campaign_overrides(name)).validate()
        assert config.pool_window == (arm.pool_window or 256), name
        swarm = config.agent_config(config.tiers[0], seed=0)
        as_run = (swarm.num_local, swarm.num_external, swarm.local_strategy, swarm.external_strategy)
        wanted = (arm.num_local, arm.num_external, arm.local_strategy, arm.external_strategy)
        if arm.shares:
            assert as_run == wanted, name
            if name != "4/4":
                assert config.control_kinds() == [], name  # the 4/4 campaign runs the controls
        else:
            assert config.control_kinds() == ["isolated", "filtered", "self", "dyn"]
            controls = {
                config.control_arm(kind).name: config.control_arm(kind) for kind in config.control_kinds()
            }
            assert controls[name] == arm, name
            # and the control's agent runs exactly that arm
            agent = config.control_agent_config(config.tiers[0], 0, arm.kind)
            assert {key: getattr(agent, key) for key in arm.agent_overrides()} == arm.agent_overrides()


def test_required_arms_run_on_every_seed_and_the_others_on_fewer(tmp_path: Path):
    from swarm_lab.study_runner import pending_cells

    config = StudyConfig(seeds=list(range(10)), arms=list(ARM_ORDER[:8]), other_seeds=6, design="v2")
    assert config.seeds_of("4/4-self") == list(range(10)) and config.seeds_of("6/2") == list(range(6))
    todo = pending_cells(_open_results(tmp_path / "r.json", config), config)
    assert len(todo) == 4 * 10 + 4 * 6
    assert {seed for name, seed in todo if name in REQUIRED_ARMS} == set(range(10))
    assert todo[:8] == [(name, 0) for name in ARM_ORDER[:8]]  # seed by seed: complete pairs
    assert config.agent_rounds() == (40 + 24) * config.agents * config.rounds
    assert config.self_window == 256 // 8
    defaults = StudyConfig()
    assert (
        defaults.rounds >= 45
        and len(defaults.seeds) >= 10
        and defaults.agents == 8
        and defaults.group_size == 8
    )
    assert set(REQUIRED_ARMS) <= set(StudyConfig(design="v2").arms) and defaults.other_seeds >= 6
    # v4 (the default): every arm on every seed, the pre-registered family's arms among them
    assert defaults.design == "v4" and set(defaults.required_arms) == set(defaults.arms)
    assert {a for pair in V4_FAMILY for a in pair} <= set(defaults.arms)
    v3 = StudyConfig(design="v3")
    assert set(v3.required_arms) == {a for pair in V3_FAMILY for a in pair}
    assert {"8/0", "4/4", "4/4-self", "8/0-dyn", "4/4@B4", "backfill", "4/4-decay", "4/4-is"} == set(v3.arms)


# --- the quick study end to end ------------------------------------------------------------------


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWARM_MODEL_CACHE": str(cache), "SWARM_TEST_TORCH_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_self_replay_window_is_chosen_on_the_command_line(tiny_1m_dir: Path, tmp_path: Path):
    out = tmp_path / "window.json"
    done = run_cli(
        "study",
        "--quick",
        "--arms",
        "4/4-self",
        "--self-window",
        "3",
        "--out",
        str(out),
        cache=tiny_1m_dir.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads(out.read_text())["config"]
    assert config["self_window"] == 3 and config["arms"] == ["4/4-self"]


@pytest.mark.slow
def test_quick_study_runs_resumes_and_reports(tiny_1m_dir: Path, tmp_path: Path):
    out = tmp_path / "quick" / "sapo-table-cpu.json"
    v3_arms = ARM_ORDER[:12]
    first = run_cli("study", "--quick", "--design", "v3", "--out", str(out), cache=tiny_1m_dir.parent)
    assert first.returncode == 0, first.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results) == {"config", "arms", "curves", "mechanism"}
    config = results["config"]
    assert config["quick"] and config["complete"] and config["seeds"] == [0, 1]
    assert config["rounds"] == 2 and config["elapsed_seconds"] > 0 and config["versions"]["torch"]
    assert list(results["arms"]) == v3_arms == list(results["curves"])
    for name in v3_arms:
        assert len(results["arms"][name]) == 2
        for seed, cumulative in zip(config["seeds"], results["arms"][name], strict=True):
            curve = results["curves"][name][str(seed)]
            assert len(curve) == 2 and all(0 <= r <= 1 for r in curve)
            assert cumulative == pytest.approx(sum(curve))
            mechanism = results["mechanism"][name][str(seed)]
            assert set(mechanism) == set(MECHANISM_METRICS) and len(mechanism["grad_norm"]) == 2
            cell = config["cells"][f"{name}|{seed}"]
            assert {"informative_groups", "questions_generated", "grad_norm_clipped"} <= set(cell)
    assert all(v == 0 for v in results["mechanism"]["4/4-self"]["0"]["batch/external_from_others"])
    assert config["cells"]["8/0-dyn|0"]["questions_generated"] >= 8

    # Resume: drop one finished cell; a rerun computes only that one and keeps the others.
    removed = results["curves"]["2/6"].pop("1")
    del results["config"]["cells"]["2/6|1"]
    out.write_text(json.dumps(results))
    second = run_cli("study", "--quick", "--design", "v3", "--out", str(out), cache=tiny_1m_dir.parent)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"{2 * len(v3_arms) - 1} cells done, 1 to run" in second.stdout
    assert second.stdout.count(" seed ") == 1 and "2/6 seed 1" in second.stdout
    resumed = json.loads(out.read_text())
    for key, cell in results["config"]["cells"].items():
        assert resumed["config"]["cells"][key] == cell  # not recomputed (same measured seconds)
    assert resumed["curves"]["2/6"]["1"] == removed  # seeded: the rerun cell is the same cell
    assert resumed["config"]["complete"]

    # v3's report generator is retired (issue #51): its run says so and writes no report
    report = run_cli("study-report", str(out), "--resamples", "500", cache=tiny_1m_dir.parent)
    assert report.returncode == 2 and "design v3, whose report generator is retired" in report.stderr
    assert not out.with_suffix(".md").exists()


def test_resume_refuses_other_settings_and_quick_runs_never_write_the_docs(tmp_path: Path):
    out = tmp_path / "r.json"
    quick = StudyConfig.quick_config()
    out.write_text(json.dumps(_open_results(out, quick)))
    with pytest.raises(StudyError, match="rounds"):
        _open_results(out, StudyConfig(**{**quick.__dict__, "rounds": 3}))
    # More seeds extend a study; they never drop what it holds.
    extended = _open_results(out, StudyConfig(**{**quick.__dict__, "seeds": [0, 1, 2]}))
    assert extended["config"]["seeds"] == [0, 1, 2]

    from worker.cli import main

    assert main(["study", "--quick", "--out", "docs/experiments/sapo-table-cpu.json"]) == 2
    assert main(["study", "--quick", "--out", "docs/experiments/sapo-table-cpu-v3.json"]) == 2


# --- design v3 (issue #29) -----------------------------------------------------------------------


def test_the_study_accepts_any_b_and_records_every_arms_b(tmp_path: Path):
    """B != 8: the study's B for arms without their own, <arm>@B<n> for any arm; an arm that
    cannot run at a B is refused by name; each arm's B and semantics are in the results file."""
    config = StudyConfig(
        arms=["8/0@B16", "4/4", "4/4@B4", "backfill", "8/0-dyn"], questions_per_round=12, design="v3"
    )
    assert config.max_questions == 24  # 8/0-dyn's cap follows B
    cfg = _open_results(tmp_path / "r.json", config)["config"]
    assert cfg["design"] == "v3" and cfg["preregistered"]["family"] == [list(p) for p in V3_FAMILY]
    assert cfg["arm_questions"] == {"4/4": 12, "8/0-dyn": 12, "4/4@B4": 4, "backfill": 12, "8/0@B16": 16}
    assert cfg["arm_definitions"]["4/4@B4"]["questions_per_round"] == 4
    assert cfg["arm_definitions"]["backfill"]["batch_rule"] == "backfill"
    assert cfg["arm_semantics"]["8/0@B16"] == "generates 16; trains on 8 own"
    with pytest.raises(StudyError, match="arm 8/0 at B = 4: I = 8 exceeds"):
        StudyConfig(arms=["8/0"], questions_per_round=4)
    with pytest.raises(StudyError, match="unknown arm '9/9'"):
        StudyConfig(arms=["9/9"])
    # a v2 study keeps the v2 file's settings (it still resumes) and its family
    v2 = StudyConfig(design="v2")
    assert "design" not in v2.settings() and v2.arms == ["8/0", "6/2", "4/4", "2/6", "4/4-self", "8/0-dyn"]
    committed = json.loads((Path(__file__).parents[3] / "docs/experiments/sapo-table-cpu.json").read_text())
    assert {k: committed["config"][k] for k in v2.settings()} == v2.settings()


def test_campaign_settings_run_the_study_arms_of_issue_29():
    """The sapo-table preset with campaign_overrides(arm) builds exactly the AgentConfig the study
    runs for 4/4@B4, backfill, 4/4-decay and 4/4-is (B, I, J, rule, T, correction)."""
    from swarm_lab.study import resolve_arm
    from worker.shared.campaign import sapo_table_config

    for name in ("4/4@B4", "backfill", "4/4-decay", "4/4-is"):
        arm = resolve_arm(name)
        config = sapo_table_config(**campaign_overrides(name)).validate()
        agent = config.agent_config(config.tiers[0], seed=0)
        assert agent.to_json() == arm.apply(agent).to_json(), name  # the campaign runs the arm as is
        assert config.swarm_arm() == arm and config.control_kinds() == [], name


def test_the_heterogeneous_report_regenerates_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`study-report` on the heterogeneous swarm's file writes exactly the committed report (v4's:
    tests/worker/research/test_study_v4_report.py)."""
    root = Path(__file__).parents[3]
    monkeypatch.chdir(root)
    out = write_report(Path("docs/experiments/heterogeneous-cpu.json"), tmp_path / "heterogeneous-cpu.md")
    assert out.read_text() == (root / "docs/experiments/heterogeneous-cpu.md").read_text()


def test_study_batches_prints_what_each_arm_generated_and_trained_on(tmp_path: Path, capsys):
    from worker.cli import main

    results = synthetic(0.0, 2, rounds=2, design="v3")
    keys = ("generation/questions", "batch/local_used", "batch/external_used", "batch/external_requested")
    results["mechanism"] = {
        "4/4@B4": {
            s: dict(zip(keys, ([4.0, 4.0], [2.5, 3.0], [4.0, 4.0], [4.0, 4.0]), strict=True)) for s in "01"
        },
        "backfill": {
            s: dict(zip(keys, ([8.0, 8.0], [5.0, 6.0], [3.0, 2.0], [3.0, 2.0]), strict=True)) for s in "01"
        },
    }
    results["config"]["arm_questions"] = {"4/4@B4": 4, "backfill": 8}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(results))
    assert main(["study-batches", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  4/4@B4: B = 4" in out and "| 4/4@B4 | 1 | 4.00 | 3.00 | 4.00 | 4.00 | - |" in out
    assert "| backfill | 0 | 8.00 | 5.00 | 3.00 | 3.00 | - |" in out and "| 8/0 |" not in out


def test_simulate_runs_study_arms_by_name_and_refuses_one_that_cannot_run(tmp_path: Path, capsys):
    from worker.cli import main

    out = tmp_path / "sim.json"
    assert main(["simulate", "--arms", "8/0", "--questions", "4", "--quiet", "--out", str(out)]) == 2
    assert "arm 8/0: I = 8 exceeds the 4 questions per round" in capsys.readouterr().err
    assert main(["simulate", "--arms", "5/5", "--quiet", "--out", str(out)]) == 2
    assert "unknown arm '5/5'" in capsys.readouterr().err and not out.exists()
