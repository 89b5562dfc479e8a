"""One settings spine (issue #51): every command's flag for a campaign setting is built from the
setting's declaration, under the declared name, with the declared type, bounds and default, and
is checked where a campaign is checked; and the six configuration classes that describe a
training run give each setting they share one default."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import msgspec
import pytest

from swarm_lab.heterogeneous import HeterogeneousConfig
from swarm_lab.study import StudyConfig
from worker.cli import campaign, simulate
from worker.cli.declared import flag
from worker.research.simulate import SimulationConfig
from worker.shared.campaign import SETTINGS, CampaignConfig
from worker.shared.config import AgentConfig, GRPOConfig
from worker.shared.questions import PRESETS

# Lists and dicts (tiers, tasks, grpo...) have a command's own options (--tiers, --tasks preset).
SCALARS = {path for path, setting in SETTINGS.items() if setting.kind is not None}

# command -> (its parser, the options that are the command's own and no campaign setting)
COMMANDS = {
    "campaign-config": (campaign.build_parser, {"help", "preset", "settings", "tiers"}),
    "simulate": (
        simulate.build_parser,
        {
            "help",
            "agents",
            "tier",
            "tasks",
            "out",
            "controls",
            "control_kinds",
            "preset",
            "arms",
            "checkpoint_dir",
            "checkpoint_every",
            "backend",
            "device",
            "quiet",
        },
    ),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_of_a_setting_is_its_declaration(command: str):
    build, own = COMMANDS[command]
    parser = build()
    declared = [action for action in parser._actions if action.dest in SCALARS]
    assert declared, f"{command} has no flag built from a declaration"
    undeclared = {action.dest for action in parser._actions} - SCALARS - own
    assert undeclared == set(), f"{command}: flags typed by hand for settings: {undeclared}"
    for action in declared:
        setting = SETTINGS[action.dest]
        assert action.option_strings[0] == flag(setting.path)
        assert action.default is None  # left out: the declaration's default, filled in by the check
        if setting.kind is bool:
            assert isinstance(action, argparse.BooleanOptionalAction)
        else:
            assert action.type is setting.kind
        if setting.choices:
            assert action.metavar == "{" + ",".join(map(str, setting.choices)) + "}"
        words = action.help or ""
        assert setting.bounds() in words
        # the declaration's default, or where a command runs another scale (the studies' 45
        # rounds) or a derived one (the tier's learning rate), that one
        assert (
            f"default {setting.default!r}" in words
            or "default: the tier's" in words
            or command
            in (
                "study",
                "heterogeneous",
            )
        )


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--group-size", "1"], "group_size: must be between 2 and 64"),
        (["--questions", "4", "--local", "5"], "num_local: I = 5 exceeds the 4 questions per round"),
        (["--lr", "1"], "grpo.learning_rate: must be above 0 and at most 0.01"),
        (["--batch-rule", "backfill", "--local-strategy", "uniform"], "local_strategy: backfill fills"),
    ],
)
def test_simulate_refuses_settings_as_a_campaign_does(argv, problem, capsys, tmp_path):
    from worker.cli import main

    out = tmp_path / "sim.json"
    assert main(["simulate", *argv, "--quiet", "--out", str(out)]) == 2
    assert f"swarm-worker simulate: {problem}" in capsys.readouterr().err
    assert not out.exists()


def test_older_flag_names_are_aliases_of_the_declared_ones():
    parser = simulate.build_parser()
    old = parser.parse_args(
        ["--questions", "4", "--local", "2", "--external", "1", "--lr", "3e-4", "--external-is"]
    )
    new = parser.parse_args(
        [
            "--questions-per-round", "4", "--num-local", "2", "--num-external", "1",
            "--grpo-learning-rate", "3e-4", "--grpo-external-importance-sampling-correction",
        ]
    )  # fmt: skip
    assert vars(old) == vars(new)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["study", "--rounds", "0"], "swarm-worker study: rounds: must be between 1 and 100000"),
        (["study", "--lr", "5"], "swarm-worker study: grpo.learning_rate: must be above 0 and at most 0.01"),
        (
            ["heterogeneous", "--rounds", "0"],
            "swarm-worker heterogeneous: rounds: must be between 1 and 100000",
        ),
    ],
)
def test_the_studies_refuse_settings_their_declarations_refuse(argv, problem, capsys):
    from worker.cli import main

    assert main(argv) == 2
    assert problem in capsys.readouterr().err


def defaults(cls: type) -> dict[str, Any]:
    """Each field's default (None: derived when the config is built, "the tier's", "the CPU
    study's"; no entry: required)."""
    if issubclass(cls, msgspec.Struct):
        return {path: setting.default for path, setting in SETTINGS.items() if "." not in path}
    found = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            found[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            found[field.name] = field.default_factory()
    return found


SPINE = [CampaignConfig, GRPOConfig, AgentConfig, SimulationConfig, StudyConfig, HeterogeneousConfig]


def test_the_six_configurations_share_one_default_per_setting():
    by_name: dict[str, dict[str, Any]] = {}
    for cls in SPINE:
        for name, default in defaults(cls).items():
            if name == "tasks" and isinstance(default, str):  # the studies name the campaign's mix
                default = PRESETS[default].to_json()
            by_name.setdefault(name, {})[cls.__name__] = default
    shared = {name: seen for name, seen in by_name.items() if len(seen) > 1}
    assert {"group_size", "questions_per_round", "max_new_tokens", "rounds", "pool_window", "seed"} <= set(
        shared
    )
    disagreeing = {
        name: seen
        for name, seen in shared.items()
        if len({repr(default) for default in seen.values() if default is not None}) > 1
    }
    assert disagreeing == {}


def test_the_studies_run_the_cpu_study_presets_scale():
    from worker.shared.campaign import cpu_study_config

    preset = cpu_study_config()
    for config in (StudyConfig(), HeterogeneousConfig()):
        assert (config.rounds, config.max_new_tokens, config.group_size, config.questions_per_round) == (
            preset.rounds,
            preset.max_new_tokens,
            preset.group_size,
            preset.questions_per_round,
        )
        assert config.pool_window == preset.pool_window
