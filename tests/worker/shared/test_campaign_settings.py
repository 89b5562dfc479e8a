"""Rules between campaign settings hold wherever a campaign comes from (the form, the API, the
admin, a management command or a preset all validate with CampaignConfig.validate): the ones
issue #28 found only in the form are in the declaration now."""

from __future__ import annotations

import pytest

from worker.shared.campaign import MAX_NEW_TOKENS, CampaignConfig, ConfigError, cpu_demo_config


@pytest.mark.parametrize(
    ("settings", "field", "fragment"),
    [
        ({"grpo": {"eps_low": 0.3, "eps_high": 0.1}}, "grpo", "eps_high must not be below eps_low"),
        ({"grpo": {"learning_rate": 1e6}}, "grpo", "learning_rate must be between 0 and 1"),
        ({"grpo": {"learning_rate": 0.0}}, "grpo", "learning_rate must be above 0"),
        ({"max_new_tokens": MAX_NEW_TOKENS + 1}, "max_new_tokens", f"at most {MAX_NEW_TOKENS}"),
        ({"replicates": 0}, "replicates", "between 1 and 64"),
    ],
)
def test_settings_the_form_refused_are_refused_by_the_declaration(settings, field, fragment):
    config = CampaignConfig.from_json({**cpu_demo_config().to_json(), **settings})
    with pytest.raises(ConfigError, match=fragment) as error:
        config.validate()
    assert error.value.field == field


def test_the_edges_are_accepted():
    edges = {
        "grpo": {"eps_low": 0.2, "eps_high": 0.2, "learning_rate": 1.0},
        "max_new_tokens": MAX_NEW_TOKENS,
    }
    CampaignConfig.from_json({**cpu_demo_config().to_json(), **edges}).validate()
