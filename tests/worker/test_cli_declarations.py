"""Settings declared once (issue #51): every command's flag for a campaign setting is built from
the setting's declaration, under the declared name, with the declared type, bounds and default,
and is checked where a campaign is checked."""

from __future__ import annotations

import argparse

import pytest

from worker.cli import campaign, simulate
from worker.cli.declared import flag
from worker.shared.campaign import SETTINGS

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
        assert f"default {setting.default!r}" in words or "default: the tier's" in words


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
