"""The SAPO table study (issue #8): its statistics on inputs with known answers, the report's
honesty on synthetic results, and the quick study end to end through the real CLI (results
after every cell, resume without recomputing, report with plots)."""

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
    PAPER_CUMULATIVE,
    PRIMARY,
    REQUIRED_ARMS,
    V3_FAMILY,
    V4_FAMILY,
    StudyConfig,
    StudyError,
    campaign_overrides,
)
from swarm_lab.study_analysis import analyse
from swarm_lab.study_report import answer, write_report
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


# --- analysis and report on synthetic results --------------------------------------------------


def synthetic(
    shift: float,
    seeds: int,
    noise: float = 0.02,
    rounds: int = 12,
    shifted: tuple[str, ...] = ("4/4", "6/2"),
    old_design: bool = False,
    arm_noise: float = 0.0,
    design: str = "v2",
) -> dict:
    """Results in the study's shape: the ``shifted`` arms exceed every other arm by ``shift`` per
    round. ``old_design``: issue #8's file (six arms, no pre-registered family); ``arm_noise``:
    per-round noise of each arm's own, so paired differences spread."""
    rng = np.random.default_rng(11)
    names = ARM_ORDER[:6] if old_design else ARM_ORDER[:12] if design == "v3" else ARM_ORDER[:8]
    base = {s: 0.2 + 0.01 * np.arange(rounds) + rng.normal(0, noise, rounds) for s in range(seeds)}
    curves = {
        name: {
            str(s): [
                round(float(v), 6)
                for v in base[s] + (shift if name in shifted else 0.0) + rng.normal(0, arm_noise, rounds)
            ]
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
    if not old_design:
        family = V3_FAMILY if design == "v3" else FAMILY
        config["preregistered"] = {"primary": list(family[0]), "family": [list(p) for p in family]}
    arms = {name: [round(sum(curves[name][str(s)]), 6) for s in range(seeds)] for name in names}
    return {"config": config, "arms": arms, "curves": curves}


def test_the_old_answer_claims_only_what_the_numbers_support():
    """Issue #8's design (its file is still read): noise only is inconclusive, identical arms are
    said to be identical, a clear shift over 6 seeds is a yes, over 5 it cannot be."""
    results = synthetic(0.0, 6, old_design=True)
    rng = np.random.default_rng(5)
    for name in ("4/4", "6/2"):
        for seed, curve in results["curves"][name].items():
            results["curves"][name][seed] = [r + float(rng.normal(0, 0.02)) for r in curve]
            results["arms"][name][int(seed)] = sum(results["curves"][name][seed])
    text = "\n".join(answer(results, analyse(results, 2000)))
    assert "Inconclusive" in text and "Yes" not in text and "No," not in text
    text = "\n".join(answer(r := synthetic(0.0, 6, old_design=True), analyse(r, 2000)))
    assert "identical cumulative rewards on all 6 seeds" in text
    text = "\n".join(answer(r := synthetic(0.05, 6, old_design=True), analyse(r, 2000)))
    assert text.split("?**")[1].strip().startswith("Yes")
    text = "\n".join(answer(r := synthetic(0.05, 5, old_design=True), analyse(r, 2000)))
    assert "Not established" in text and "0.062" in text


def test_holm_runs_over_the_preregistered_family_only():
    analysis = analyse(synthetic(0.05, 10, shifted=("4/4",)), 2000)
    family = [(c.a, c.b) for c in analysis.comparisons if c.preregistered]
    assert family == FAMILY and analysis.family_size == 3 and analysis.primary == PRIMARY
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    assert by_pair[PRIMARY].holm_p == pytest.approx(min(1.0, 3 * by_pair[PRIMARY].p_value))
    exploratory = by_pair[("4/4", "8/0")]
    assert not exploratory.preregistered and np.isnan(exploratory.holm_p)
    # The old design's file: its primary and its nine-row family, as its report had them.
    old = analyse(synthetic(0.05, 6, old_design=True), 2000)
    assert old.old_design and old.primary == ("4/4", "8/0-filtered") and old.family_size == 9


def test_the_answer_names_the_mechanism_the_numbers_support():
    # 4/4 above everything, 10 seeds all agreeing: sharing (p = 2/1024, Holm 3x that).
    text = "\n".join(answer(r := synthetic(0.05, 10, shifted=("4/4",)), analyse(r, 2000)))
    assert "**Sharing**" in text and "Holm p = 0.006" in text
    # 4/4 and 4/4-self equal, both above 8/0 and 8/0-dyn: curation and reuse, not sharing.
    text = "\n".join(answer(r := synthetic(0.05, 10, shifted=("4/4", "4/4-self")), analyse(r, 2000)))
    assert "**Curation/reuse, not shown to be sharing**" in text and "reuse may be part of it" in text
    # ... and with 8/0-dyn up too: curation.
    text = "\n".join(
        answer(r := synthetic(0.05, 10, shifted=("4/4", "4/4-self", "8/0-dyn")), analyse(r, 2000))
    )
    assert "The data point to curation:" in text
    # 6 seeds: after Holm over 3 the exact test cannot reject (3 x 2/64 > 0.05): cannot tell.
    text = "\n".join(answer(r := synthetic(0.05, 6, shifted=("4/4",), arm_noise=0.02), analyse(r, 2000)))
    assert (
        "**Cannot tell**" in text and "fewer than 7 seeds" in text and "no difference can be detected" in text
    )


def test_the_answer_says_when_there_is_no_gain_to_explain_and_when_the_j_sides_differ_in_age():
    """This study's own case: 4/4 above its self-replay control but not above 8/0, 8/0-dyn above
    8/0; and the two J sides of the primary not equally old."""
    results = synthetic(0.05, 10, shifted=("8/0", "4/4", "8/0-dyn", "6/2"))
    results["curves"]["8/0-dyn"] = {
        s: [v + 0.05 for v in curve] for s, curve in results["curves"]["8/0-dyn"].items()
    }
    results["arms"]["8/0-dyn"] = [round(sum(results["curves"]["8/0-dyn"][str(s)]), 6) for s in range(10)]
    results["mechanism"] = {
        "4/4": {str(s): {"batch/external_age": [1.4, 1.4]} for s in range(10)},
        "4/4-self": {str(s): {"batch/external_age": [1.7, 1.7]} for s in range(10)},
    }
    text = "\n".join(answer(results, analyse(results, 2000)))
    # 4/4 above 4/4-self (the pre-registered primary), but the question asks about a gain of 4/4
    # that is not there: no one-word "Sharing" (issue #29 item 7); the headline says so instead
    assert "**Sharing**" not in text and "**There is no gain of 4/4 over 8/0 to explain**" in text
    assert "4/4 beat its self-replay control 4/4-self" in text
    assert "4/4-self, which replays its own, is below 8/0" in text
    assert "Curation of fresh groups is what helps here" in text
    assert "4/4-self's J-side groups were older (1.70 rounds for 4/4-self against 1.40 for 4/4" in text
    # A 4/4 that does beat 8/0 (and J sides of one age) gets neither sentence.
    plain = synthetic(0.05, 10, shifted=("4/4",))
    plain["mechanism"] = {arm: {"0": {"batch/external_age": [1.4]}} for arm in ("4/4", "4/4-self")}
    text = "\n".join(answer(plain, analyse(plain, 2000)))
    assert "no gain" not in text and "were older" not in text


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


def test_the_old_results_file_still_reports(tmp_path: Path):
    """docs/experiments/issue-8/sapo-table-cpu.json (issue #8's design) is read and labelled old."""
    path = Path(__file__).parents[3] / "docs/experiments/issue-8/sapo-table-cpu.json"
    results = json.loads(path.read_text())
    path = tmp_path / "old.json"
    path.write_text(json.dumps(results))
    text = write_report(path, resamples=500).read_text()
    assert "**Old design (issue #8).**" in text and "| 4/4 - 8/0-filtered |" in text
    assert "normal approximation" not in text and "fewer than 9 seeds" in text


def test_report_has_the_table_the_tests_and_the_plots(tmp_path: Path):
    results = tmp_path / "study.json"
    results.write_text(json.dumps(synthetic(0.03, 4)))
    report = write_report(results, resamples=2000)
    text = report.read_text()
    assert "| 4/4 |" in text and f"{PAPER_CUMULATIVE['4/4']:.2f}" in text and "+94.6%" in text
    assert "| 4/4 - 4/4-self (*pre-registered*) |" in text and "## Answer" in text
    assert "| 4/4 - 8/0 |" in text and "Old design" not in text
    for name in ("curves", "cumulative", "differences"):
        png = tmp_path / f"study-{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png.name})" in text


def test_a_follow_up_run_is_labelled_as_not_pre_registered(tmp_path: Path):
    plain, follow = tmp_path / "plain.json", tmp_path / "follow.json"
    plain.write_text(json.dumps(synthetic(0.03, 10)))  # 10 seeds: the primary can be significant
    results = synthetic(0.03, 10)
    results["config"]["follow_up"] = "4/4-self with a 27-group window, chosen to match the pool's age."
    follow.write_text(json.dumps(results))
    before = write_report(plain, resamples=200).read_text()
    after = write_report(follow, resamples=200).read_text()
    assert "pre-registered in worker/research/study.py before the data" in before
    assert "Follow-up, not pre-registered" not in before
    assert "pre-registered in worker/research/study.py before the data" not in after
    assert "> **Follow-up, not pre-registered.** 4/4-self with a 27-group window" in after
    # 4/4-self's window is not called the pool's equal (issue #29 item 7): only the agent's own
    assert (
        "from its own last 32 groups (as many as the pool holds per agent, 256 over 8 agents; the pool also offers 4/4 the other agents' 224, and up to 4 of each round's 8 own groups"
        in before
    )
    assert "of the same size" not in before
    results["config"]["self_window"] = 27
    follow.write_text(json.dumps(results))
    resized = write_report(follow, resamples=200).read_text()
    assert (
        "from its own last 27 groups (the pool holds 32 per agent; the pool also offers 4/4 the other agents' 224"
        in resized
    )


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

    report = run_cli("study-report", str(out), "--resamples", "500", cache=tiny_1m_dir.parent)
    assert report.returncode == 0, report.stderr[-3000:]
    text = out.with_suffix(".md").read_text()
    assert "| arm | cumulative reward" in text and "| 4/4@B4 - 8/0 (*pre-registered*) |" in text
    assert "| 4/4@B4 | 4 | generates 4; trains on 4 informative own" in text  # the semantics table
    assert "## Compute" in text
    assert "## What each arm trained on" in text
    assert "Quick smoke-test run" in text
    for name in ("curves", "cumulative", "differences"):
        assert (out.parent / f"sapo-table-cpu-{name}.png").stat().st_size > 1000


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


def test_v3_holm_runs_over_its_own_preregistered_family_and_the_report_says_each_arms_semantics(
    tmp_path: Path,
):
    """A v3 file: 4/4@B4 - 8/0 primary, backfill - 8/0 and backfill - 8/0-dyn secondary, Holm over
    those three; the report's setup tables B and the meaning of I/J per arm."""
    results = synthetic(0.05, 10, shifted=("4/4@B4", "backfill"), design="v3")
    results["mechanism"] = {
        arm: {
            str(s): {"generation/completions": [b * 8.0] * 12, "generation/tokens": [b * 30.0] * 12}
            for s in range(10)
        }
        for arm, b in (("8/0", 8), ("4/4@B4", 4), ("backfill", 8))
    }
    analysis = analyse(results, 2000)
    assert analysis.design == "v3" and analysis.primary == ("4/4@B4", "8/0")
    assert [(c.a, c.b) for c in analysis.family] == V3_FAMILY and analysis.family_size == 3
    by_pair = {(c.a, c.b): c for c in analysis.comparisons}
    assert by_pair[("4/4@B4", "8/0")].holm_p == pytest.approx(3 * 2 / 1024)
    assert not by_pair[("4/4", "4/4-self")].preregistered  # v2's primary is exploratory here
    path = tmp_path / "v3.json"
    path.write_text(json.dumps(results))
    text = write_report(path, resamples=300).read_text()
    assert "Issue #29 (design v3)" in text and "| 4/4@B4 - 8/0 (*pre-registered*) |" in text
    assert "| backfill - 8/0-dyn (*pre-registered*) |" in text and "| 4/4 - 4/4-self |" in text
    assert "| 4/4@B4 | 4 | generates 4; trains on 4 informative own + 4 informative external" in text
    assert "| 4/4 | 8 | generates 8; trains on 4 informative own" in text and "v2's: I of the 8" in text
    assert "the paper's (rl-swarm): I = questions generated" in text
    assert "backfill: J = B - informative own groups" in text
    assert "**Yes for 4/4@B4**" in text
    # compute: per agent-round, and reward against generated tokens
    assert "## Compute" in text and "| 4/4@B4 | 32.0 [32.0, 32.0] | 120.0 [120.0, 120.0] |" in text
    assert (tmp_path / "v3-compute.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](v3-compute.png)" in text
    # the paper's 4/4 sits beside 4/4@B4 (its semantics), not beside v2's 4/4
    paper = f"| {PAPER_CUMULATIVE['4/4']:.2f} |"
    assert [line for line in text.splitlines() if line.startswith("| 4/4@B4 |") and paper in line]
    assert not [line for line in text.splitlines() if line.startswith("| 4/4 |") and paper in line]


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


def test_the_v2_reports_regenerate_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """v3 is a new design beside v2: `study-report` on v2's file (and the follow-up's, v3's own
    and the heterogeneous swarm's) writes exactly the committed report. The committed reports were regenerated deliberately with issue
    #29's wording (items 4 and 7: time course, no one-word "Sharing" without a gain, "still
    rising" and "possibly lower" only where both intervals agree, a follow-up's Holm scope and
    compute without its reused cells); this test keeps them in step with the generator."""
    root = Path(__file__).parents[3]
    monkeypatch.chdir(root)
    for stem in ("sapo-table-cpu", "self-replay-age-matched", "sapo-table-cpu-v3", "heterogeneous-cpu"):
        out = write_report(Path(f"docs/experiments/{stem}.json"), tmp_path / f"{stem}.md")
        assert out.read_text() == (root / f"docs/experiments/{stem}.md").read_text(), stem
    committed = (root / "docs/experiments/sapo-table-cpu.md").read_text()
    assert "4/4 - 8/0 **crosses over** (from above to below 0)" in committed
    assert "2/6 - 8/0 **crosses over**" in committed and "| 4/4 - 8/0 |" in committed
    assert "**Sharing**" not in committed and "possibly lower" not in committed
    assert "still rising" not in committed and "about flat (its intervals include 0)" in committed
    follow = (root / "docs/experiments/self-replay-age-matched.md").read_text()
    assert "over the pre-registered family" not in follow and "10 reused cells" in follow


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
