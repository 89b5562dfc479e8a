"""The validation campaign (swarm_app/demo/validation.py, which may not import the lab)
builds its settings from v3's results file: they must be StudyConfig's design v3, and its swarm
node and control node must run the study's 4/4 and 8/0 agents."""

from __future__ import annotations

import json

from swarm_app.demo import validation
from swarm_lab.study import StudyConfig
from tests.servers import ROOT


def test_the_validation_campaign_runs_study_v3s_agents():
    v3 = json.loads((ROOT / "docs/experiments/sapo-table-cpu-v3.json").read_text())["config"]
    study = StudyConfig(design="v3")
    settings = study.settings()
    for key in (
        "agents",
        "rounds",
        "group_size",
        "max_new_tokens",
        "tier",
        "tasks",
        "learning_rate",
        "num_iterations",
        "temperature",
        "beta",
        "pool_window",
        "questions_per_round",
    ):
        assert v3[key] == settings[key], key
    config = validation.campaign_settings(v3, swarms=5, control_seeds=5)
    base = study.agent_base()
    for arm, agent in (
        ("4/4", config.agent_config(config.tiers[0], seed=0)),
        ("8/0", config.control_agent_config(config.tiers[0], 0, validation.CONTROL_KIND)),
    ):
        wanted = study.arm(arm).apply(base)
        for key in (
            "questions_per_round",
            "group_size",
            "num_local",
            "num_external",
            "local_strategy",
            "external_strategy",
            "max_new_tokens",
            "batch_rule",
        ):
            assert getattr(agent, key) == getattr(wanted, key), (arm, key)
        assert agent.grpo.learning_rate == study.learning_rate
        assert (agent.grpo.num_iterations, agent.grpo.temperature, agent.grpo.beta) == (1, 1.0, 0.0)
