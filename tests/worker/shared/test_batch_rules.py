"""The batch rules of issue #29 (worker/shared/sampling.py's batch_request, the formulas of
worker/shared/arms.py's docstring) and the settings that carry them (AgentConfig, CampaignConfig)."""

from __future__ import annotations

import itertools

import pytest

from worker.shared.arms import backfill_arm, control_arm, decay_arm, study_v3_arms, with_questions
from worker.shared.campaign import ConfigError, sapo_table_config
from worker.shared.config import AgentConfig
from worker.shared.sampling import batch_request


def test_fixed_backfill_and_decay_ask_for_what_their_formulas_say():
    assert batch_request("fixed", 4, 4, 8, 7, 1) == (4, 4)
    # backfill, I = J = B = 8: J_r = 8 - informative own groups
    assert [batch_request("backfill", 8, 8, 8, 0, q)[1] for q in range(9)] == [8, 7, 6, 5, 4, 3, 2, 1, 0]
    assert batch_request("backfill", 4, 3, 8, 0, 1) == (4, 3)  # capped at J
    assert batch_request("backfill", 4, 8, 8, 0, 6) == (4, 4)  # own capped at I = 4: 8 - 4
    # decay, I = J = 4, T = 30: J_r = floor(4 (1 - r/30) + 1/2), I_r = 8 - J_r
    js = [batch_request("decay", 4, 4, 8, r, 0, 30)[1] for r in range(35)]
    assert js[:4] == [4, 4, 4, 4] and js[4] == 3 and js[11] == 3 and js[12] == 2 and js[30:] == [0] * 5
    assert all(a >= b for a, b in itertools.pairwise(js))  # never rises
    assert all(batch_request("decay", 4, 4, 8, r, 0, 30)[0] + js[r] == 8 for r in range(35))
    assert [batch_request("decay", 4, 4, 8, r, 0, 4)[1] for r in range(5)] == [4, 3, 2, 1, 0]
    with pytest.raises(ValueError, match="decay_rounds"):
        batch_request("decay", 4, 4, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="unknown batch rule"):
        batch_request("sometimes", 4, 4, 8, 0, 0)


def test_arms_name_their_b_and_configs_refuse_what_cannot_run():
    b4, backfill, decay, corrected = study_v3_arms(8)
    assert (b4.name, backfill.name, decay.name, corrected.name) == (
        "4/4@B4",
        "backfill",
        "4/4-decay",
        "4/4-is",
    )
    base = AgentConfig()
    assert (b4.apply(base).questions_per_round, b4.apply(base).num_local) == (4, 4)
    assert backfill.apply(base).batch_rule == "backfill" and decay.apply(base).decay_rounds == 30
    assert corrected.apply(base).grpo.external_importance_sampling_correction
    assert not base.grpo.external_importance_sampling_correction  # the base is not changed
    assert with_questions(b4, 6).name == "4/4@B6" and with_questions(decay, 4).name == "4/4-decay@B4"
    assert [control_arm(k, backfill).name for k in ("isolated", "dyn")] == ["8/0", "8/0-dyn"]
    with pytest.raises(ValueError, match="backfill arm's J varies"):
        control_arm("self", backfill)
    with pytest.raises(ValueError, match="I \\+ J = 8 own groups"):
        decay_arm(4, 4).apply(AgentConfig(questions_per_round=6, num_local=4))
    with pytest.raises(ValueError, match="backfill needs J >= 1"):
        AgentConfig(batch_rule="backfill", num_external=0)
    with pytest.raises(ValueError, match="batch_rule must be one of"):
        AgentConfig(batch_rule="often")
    assert backfill_arm(8).semantics(8).startswith("generates 8; trains on every informative own group")


def test_campaign_settings_carry_the_rules_to_the_agent_and_refuse_what_cannot_run():
    config = sapo_table_config(
        batch_rule="backfill", num_local=8, num_external=8, controls={"over_generation": True}
    ).validate()
    agent = config.agent_config(config.tiers[0], 0)
    assert (agent.batch_rule, agent.num_local, agent.num_external) == ("backfill", 8, 8)
    assert [config.control_arm(k).name for k in config.control_kinds()] == ["8/0", "8/0-filtered", "8/0-dyn"]
    assert all(
        config.control_agent_config(config.tiers[0], 0, k).batch_rule == "fixed"
        for k in config.control_kinds()
    )
    decay = sapo_table_config(batch_rule="decay", decay_rounds=20).validate()
    assert decay.agent_config(decay.tiers[0], 0).decay_rounds == 20 and decay.swarm_arm().name == "4/4-decay"
    assert sapo_table_config(questions_per_round=4).validate().swarm_arm().name == "4/4@B4"
    refused = {
        "local_strategy": dict(batch_rule="backfill", local_strategy="uniform"),
        "controls": dict(batch_rule="backfill"),  # the preset's self-replay control
        "num_external": dict(batch_rule="decay", num_local=6),
        "decay_rounds": dict(batch_rule="decay", decay_rounds=0),
        "batch_rule": dict(batch_rule="sometimes"),
    }
    for setting, overrides in refused.items():
        with pytest.raises(ConfigError) as error:
            sapo_table_config(**overrides).validate()
        assert error.value.field == setting, (setting, error.value)
