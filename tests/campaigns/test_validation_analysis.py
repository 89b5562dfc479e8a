"""The validation campaign's analysis and report (swarm_app/demo/validation.py) on a small
synthetic input: units as the campaign page counts them, the gains, pool ages, the comparison,
and a report that names n, intervals, ages and the command."""

from __future__ import annotations

import json
import math

import pytest

from swarm_app.demo import validation, validation_report
from swarm_app.demo.validation import Row
from tests.servers import ROOT

pytestmark = pytest.mark.engine


def _v3_results() -> dict:
    """A two-round study file: 4/4 on seeds 0-2, 8/0 on seeds 0-3."""
    return {
        "config": {"rounds": 2, "agents": 2},
        "curves": {
            "4/4": {"0": [1.0, 2.0], "1": [1.0, 3.0], "2": [2.0, 2.0]},
            "8/0": {"0": [1.0, 1.0], "1": [1.0, 2.0], "2": [1.0, 1.0], "3": [2.0, 2.0]},
        },
        "mechanism": {
            "4/4": {"0": {"batch/external_age": [0.0, 1.0]}, "1": {"batch/external_age": [0.5, 1.5]}}
        },
    }


def _rows() -> list[Row]:
    rows = []
    # swarm 0: two nodes (rewards per round), swarm 1: two nodes; node b of swarm 1 reached round 2
    for unit, agent, rewards, ages in (
        ("swarm:0", "node:a", [1.0, 2.0], [None, 1.0]),
        ("swarm:0", "node:b", [0.0, 1.0], [None, -1.0]),
        ("swarm:1", "node:c", [2.0, 2.0], [None, 2.0]),
        ("swarm:1", "node:d", [1.0, 1.0, 9.0], [None, 0.0, 3.0]),
    ):
        for r, (reward, age) in enumerate(zip(rewards, ages, strict=True)):
            rows.append(Row("swarm", unit, agent, r, reward, age, None if age is None else age + 1))
    for seed, rewards in ((0, [1.0, 1.0]), (1, [0.0, 2.0]), (2, [1.0, 0.0])):
        for r, reward in enumerate(rewards):
            rows.append(Row("isolated", f"seed:{seed}", f"control:{seed}", r, reward))
    return rows


def test_units_count_a_swarm_once_and_a_control_seed_once_over_the_common_horizon():
    rows = _rows()
    assert validation.horizon_of(rows) == 2  # node d's round 2 lies beyond what every agent reached
    units = validation.platform_units(rows, 2)
    # swarm 0: nodes' means 1.5 and 0.5 -> 1.0 a round -> 2.0 over H = 2; swarm 1: 2.0 and 1.0 -> 3.0
    assert units["swarm"] == {"swarm:0": 2.0, "swarm:1": 3.0}
    assert units["isolated"] == {"seed:0": 2.0, "seed:1": 2.0, "seed:2": 1.0}


def test_gain_is_welchs_difference_with_n_and_an_exact_permutation_p():
    result = validation.gain([2.0, 3.0], [2.0, 2.0, 1.0])
    assert result["difference"] == pytest.approx(2.5 - 5 / 3)
    assert result["n"] == [2, 3]
    se = math.sqrt(0.5 / 2 + (1 / 3) / 3)
    assert result["se"] == pytest.approx(se)
    assert result["low"] < result["difference"] < result["high"]
    assert result["min_p"] == pytest.approx(0.2)  # 2 vs 3 units: the smallest p there is
    assert validation.gain([2.0], [1.0, 2.0])["low"] is None  # one swarm: no interval


def test_the_simulator_side_is_unpaired_over_cells_and_paired_over_common_seeds():
    sim = validation.simulator_gain(_v3_results(), 2)
    assert sim["cells"]["4/4"] == {"0": 3.0, "1": 4.0, "2": 4.0}
    assert sim["unpaired"]["n"] == [3, 4]
    assert sim["unpaired"]["difference"] == pytest.approx(11 / 3 - 11 / 4)
    assert sim["paired"]["n"] == 3 and sim["paired"]["seeds"] == [0, 1, 2]
    assert sim["paired"]["difference"] == pytest.approx((1 + 1 + 2) / 3)
    # over a shorter horizon only the first rounds count (a smoke run's H)
    assert validation.simulator_cells(_v3_results(), "8/0", 1) == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 2.0}


def test_pool_ages_per_draw_per_swarm_round_and_their_distribution():
    ages = validation.platform_ages(_rows(), 2)
    assert sorted(ages["per_draw"]) == [-1.0, 0.0, 1.0, 2.0]  # round 0 drew nothing; round 2 is past H
    assert sorted(ages["per_round_swarm"]) == [0.0, 1.0]
    summary = validation.age_summary(ages["per_draw"])
    assert summary["n"] == 4 and summary["mean"] == pytest.approx(0.5)
    assert summary["below_zero"] == pytest.approx(0.25)
    assert summary["quantiles"]["50"] == pytest.approx(0.5)
    assert summary["histogram"] == {"-1": 1, "0": 1, "1": 1, "2": 1}
    assert validation.simulator_ages(_v3_results(), 2) == [0.0, 1.0, 0.5, 1.5]
    assert validation.age_summary([]) == {"n": 0}


def test_the_comparison_holds_zero_when_the_gains_agree_and_not_when_they_differ():
    same = validation.compare(
        {"difference": 1.0, "se": 0.2, "df": 8}, {"difference": 1.1, "se": 0.1, "df": 9}
    )
    assert same["verdict"] == "consistent" and same["low"] < 0 < same["high"]
    apart = validation.compare(
        {"difference": 3.0, "se": 0.2, "df": 8}, {"difference": 1.0, "se": 0.1, "df": 9}
    )
    assert apart["verdict"] == "differs"
    assert (
        validation.compare({"difference": 1.0, "se": None}, {"difference": 1.0, "se": 0.1})["verdict"] is None
    )


def _simulated() -> dict:
    """A `swarm-worker simulate` file of 4/4 with 2 agents and 3 rounds, seed 1."""
    agents = {
        "agent-0": [
            {"reward": 0.5, "batch/external_age": 0.0},
            {"reward": 1.5, "batch/external_age": 1.0},
            {"reward": 9.0},
        ],
        "agent-1": [
            {"reward": 0.5, "batch/external_age": 0.0},
            {"reward": 1.5, "batch/external_age": 2.0},
            {"reward": 9.0},
        ],
    }
    return {"arms": {"4/4": {"agents": agents}}}


def test_a_simulator_rerun_gives_ages_per_draw_and_its_difference_from_v3s_cell():
    rerun = validation.simulator_rerun(_simulated(), 1, _v3_results(), 2)
    assert rerun["per_draw"] == [0.0, 1.0, 0.0, 2.0]
    assert rerun["cumulative"] == pytest.approx(2.0)
    # v3's seed 1 curve is [1.0, 3.0]: 4.0 over two rounds, the rerun differs by 1.5 at most
    assert rerun["v3_cumulative"] == pytest.approx(4.0)
    assert rerun["largest_round_difference"] == pytest.approx(1.5)
    other = validation.simulator_rerun(_simulated(), 1, {**_v3_results(), "config": {"agents": 8}}, 2)
    assert other["v3_cumulative"] is None  # another number of agents: not v3's cell


def test_the_report_shows_both_gains_n_intervals_ages_and_the_command():
    run = {"command": "python manage.py validation_campaign --swarms 2", "deviations": {"rounds": [2, 45]}}
    result = validation.analyse(_rows(), _v3_results(), run, [{"seed": 1, "results": _simulated()}])
    assert result["pool_age"]["simulator_per_draw"]["n"] == 4
    assert result["simulator_reruns"][0]["seed"] == 1 and "per_draw" not in result["simulator_reruns"][0]
    assert result["platform"]["gain"]["n"] == [2, 3]
    assert result["simulator"]["unpaired"]["n"] == [3, 4]
    json.dumps(result)  # the results file is JSON
    report = validation_report.render_markdown(result)
    assert "python manage.py validation_campaign --swarms 2" in report
    assert "2 swarms, 3 seeds" in report and "3 cells, 4 cells" in report
    assert "| platform, per draw (agent-round) | 4 | 0.50 |" in report
    assert "A smoke run, not the validation" in report
    assert "not paired" in report
    assert "| simulator, per draw (agent-round; 4/4 rerun, seeds 1) | 4 | 0.75 |" in report


def test_the_campaign_runs_v3s_arms_and_settings():
    v3 = json.loads((ROOT / "docs/experiments/sapo-table-cpu-v3.json").read_text())["config"]
    config = validation.campaign_settings(v3, swarms=5, control_seeds=5)
    assert validation.arm_problems(config, v3) == []
    assert validation.deviations(config, 8, v3) == {}
    assert config.replicates == 5 and config.controls.seeds == 5 and config.control_kinds() == ["isolated"]
    assert (config.rounds, config.max_new_tokens, config.pool_window, config.eval_every) == (45, 16, 256, 0)
    smoke = validation.campaign_settings(v3, swarms=2, control_seeds=2, rounds=2, tokens=4)
    assert validation.deviations(smoke, 2, v3) == {
        "rounds": [2, 45],
        "max_new_tokens": [4, 16],
        "nodes_per_swarm": [2, 8],
    }
    # a campaign on other arms is refused by name
    other = validation.campaign_settings(
        {
            **v3,
            "arm_definitions": {
                **v3["arm_definitions"],
                "4/4": {**v3["arm_definitions"]["4/4"], "num_local": 6, "num_external": 2},
            },
        },
        swarms=2,
        control_seeds=2,
    )
    assert any(problem.startswith("swarm num_local") for problem in validation.arm_problems(other, v3))
