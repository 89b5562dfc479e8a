"""Every campaign setting is declared once, with its bounds (issue #28 item 2): the rules that
were only in the form hold wherever a campaign comes from (the form, a management command, a
preset, a stored config), and every problem of a config is reported, not only the first."""

from __future__ import annotations

import math

import pytest

from worker.shared.campaign import (
    MAX_NEW_TOKENS,
    SETTINGS,
    CampaignConfig,
    ConfigError,
    cpu_demo_config,
)


@pytest.mark.parametrize(
    ("settings", "path", "fragment"),
    [
        ({"grpo": {"learning_rate": 1e6}}, "grpo.learning_rate", "above 0 and at most 0.01"),
        ({"grpo": {"learning_rate": 0.0}}, "grpo.learning_rate", "above 0 and at most 0.01"),
        ({"grpo": {"beta": 2.0}}, "grpo.beta", "between 0 and 1"),
        ({"grpo": {"temperature": "hot"}}, "grpo.temperature", "expected `float`, got `str`"),
        ({"grpo": {"eps": 0.2}}, "grpo.eps", "unknown setting"),
        ({"max_new_tokens": MAX_NEW_TOKENS + 1}, "max_new_tokens", f"between 1 and {MAX_NEW_TOKENS}"),
        ({"replicates": 0}, "replicates", "between 1 and 64"),
        ({"rounds": 100_001}, "rounds", "between 1 and 100000"),
        ({"controls": {"seeds": 17}}, "controls.seeds", "between 0 and 16"),
        ({"batch_rule": "sideways"}, "batch_rule", "choose one of 'fixed', 'backfill', 'decay'"),
    ],
)
def test_what_the_form_refused_the_declaration_refuses(settings, path, fragment):
    values = {**cpu_demo_config().to_json(), **settings}
    with pytest.raises(ConfigError, match=fragment) as error:
        CampaignConfig.from_json(values)  # decoding a stored config refuses it
    assert error.value.path == path and error.value.field == path.split(".")[0]
    assert [(p.path, p.message) for p in CampaignConfig.check(values)] == [(path, error.value.message)]


def test_a_rule_between_settings_is_the_validation_s():
    """Decoding checks each setting; the rules between settings are validate()'s (a stored config
    that a newer rule refuses still loads)."""
    config = CampaignConfig.from_json(
        {**cpu_demo_config().to_json(), "grpo": {"eps_low": 0.3, "eps_high": 0.1}}
    )
    with pytest.raises(
        ConfigError, match=r"grpo\.eps_high: the upper clip ε must not be below the lower one"
    ):
        config.validate()


def test_the_edges_are_accepted():
    edges = {
        "grpo": {"eps_low": 0.2, "eps_high": 0.2, "learning_rate": 1e-2, "beta": 1.0},
        "max_new_tokens": MAX_NEW_TOKENS,
        "rounds": 100_000,
    }
    CampaignConfig.from_json({**cpu_demo_config().to_json(), **edges}).validate()


def test_every_problem_is_reported_at_once():
    """Bounds, a rule between settings and a GRPO rule together; a rule reading a setting that
    is itself invalid is not reported (I > B is not news when B is out of bounds)."""
    config = CampaignConfig(
        group_size=1,
        questions_per_round=0,
        num_local=0,
        num_external=0,
        grpo={"eps_low": 0.3, "eps_high": 0.1},
        controls={"seeds": -1, "self_replay": True},
    )
    problems = [problem.path for problem in config.problems()]
    assert problems == [
        "group_size",
        "questions_per_round",
        "controls.seeds",
        "num_local",  # I + J = 0
        "grpo.eps_high",
        "controls.self_replay",  # needs J >= 1
    ]
    with pytest.raises(ConfigError) as error:
        config.validate()
    assert error.value.path == "group_size" and len(error.value.problems) == 6


def test_every_numeric_setting_has_both_bounds_and_help():
    """A reviewer can read each bound (and its defence) in the declaration: no number unbounded."""
    numbers = {path: s for path, s in SETTINGS.items() if s.kind in (int, float)}
    assert len(numbers) >= 25
    unbounded = [
        path
        for path, s in numbers.items()
        if (s.ge is None and s.gt is None) or (s.le is None and s.lt is None) or not s.description
    ]
    assert not unbounded
    # every default is inside its own bounds
    defaults = {path: s.default for path, s in SETTINGS.items()}
    assert all(SETTINGS[path].problem(value) is None for path, value in defaults.items())
    assert SETTINGS["grpo.learning_rate"].problem(math.nan) == "must be above 0 and at most 0.01"


def test_the_settings_reference_in_docs_is_generated_from_the_declarations():
    from pathlib import Path

    from worker.shared.declaration import settings_table

    doc = (Path(__file__).resolve().parents[3] / "docs" / "web.md").read_text()
    assert settings_table(SETTINGS) in doc, (
        "regenerate: python -m worker.shared.campaign, then paste into docs/web.md"
    )
