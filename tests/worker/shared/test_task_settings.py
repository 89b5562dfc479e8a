"""Task settings a campaign may give (issue #27): each reasoning-gym dataset's allow-list, built
by introspecting its config dataclass. Settings that name a file are refused, found the same
way in every dataset of ``reasoning_gym.factory.DATASETS``; legitimate settings (every allowed
setting at reasoning-gym's own default, the presets, choices, lists) still pass. Real
reasoning-gym datasets throughout."""

from __future__ import annotations

import dataclasses
import enum
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import reasoning_gym
from reasoning_gym.factory import DATASETS

from worker.shared.questions import PRESETS, TaskError, TaskMix, TaskSpec, check_settings, task_settings

PATH_SETTINGS = [(name, key) for name in sorted(DATASETS) for key in task_settings(name).paths]


def as_json(value: Any) -> Any:
    """A default as a campaign's JSON gives it: tuples as lists, enum members as their values."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [as_json(item) for item in value]
    return value


def test_introspection_finds_every_setting_that_names_a_shipped_file():
    """Independently of the name heuristic: a text setting whose default is a file reasoning-gym
    ships is a path setting (today: spell_backward's word list)."""
    data = resources.files("reasoning_gym.data")
    shipped = {
        (name, item.name)
        for name, (_, config_class) in DATASETS.items()
        for item in dataclasses.fields(config_class)
        if isinstance(item.default, str) and item.default and data.joinpath(item.default).is_file()
    }
    assert ("spell_backward", "data_file") in shipped
    assert shipped <= set(PATH_SETTINGS)


@pytest.mark.parametrize(("name", "key"), PATH_SETTINGS)
def test_every_path_setting_is_refused_with_a_clear_error(name, key, tmp_path):
    """The threat is real: reasoning-gym itself reads any file it is given. Through a campaign's
    task mix the setting is refused, for a file of the coordinator's disk, a path that climbs
    out of reasoning-gym's data directory, and even the file it ships."""
    secret = tmp_path / "secret.txt"
    secret.write_text("sesame\n")
    if (name, key) == ("spell_backward", "data_file"):
        leaked = reasoning_gym.create_dataset(name, seed=0, size=1, **{key: str(secret)})
        assert leaked[0]["answer"] == "emases"  # the file's word, spelt backward
    data_dir = Path(str(resources.files("reasoning_gym.data")))
    climbing = "/".join([".."] * len(data_dir.parts)) + str(secret)
    default = as_json(dataclasses.asdict(DATASETS[name][1]())[key])
    for value in (str(secret), climbing, default):
        mix = TaskMix((TaskSpec(name, 1.0, {key: value}),))
        with pytest.raises(
            TaskError, match=f"task '{name}': invalid config: {key} names a file on the coordinator"
        ):
            mix.validate_configs()


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_allowed_setting_at_its_default_passes_the_allow_list(name):
    """No legitimate setting is refused: each allowed setting at reasoning-gym's own default."""
    defaults = dataclasses.asdict(DATASETS[name][1]()) if DATASETS[name][1] is not None else {}
    config = {
        key: as_json(defaults[key])
        for key in task_settings(name).allowed
        if key in defaults and defaults[key] is not None
    }
    check_settings(TaskSpec(name, 1.0, config))


def test_presets_and_legitimate_settings_still_build_their_questions():
    for mix in PRESETS.values():
        mix.validate_configs()
    TaskMix(
        (
            TaskSpec("basic_arithmetic", 1.0, {"format_style": "natural", "operators": ["+", "/"]}),
            TaskSpec("figlet_font", 1.0, {"static_word": "HELLO", "static_font": None}),
            TaskSpec("intermediate_integration", 1.0, {"symbols": ["x", "X"]}),
            TaskSpec("fraction_simplification", 1.0, {"styles": ["plain"]}),
        )
    ).validate_configs()


@pytest.mark.parametrize(
    ("task", "config", "words"),
    [
        (
            "chain_sum",
            {"no_such_setting": 3},
            "invalid config: 'no_such_setting' is not a setting of this task",
        ),
        ("chain_sum", {"min_terms": "many"}, "invalid config: min_terms: expected a number, got 'many'"),
        ("chain_sum", {"min_terms": True}, "invalid config: min_terms: expected a number, got True"),
        ("chain_sum", {"size": 5}, "size is chosen by the coordinator"),
        (
            "basic_arithmetic",
            {"format_style": "fancy"},
            "format_style: expected one of ['simple', 'natural']",
        ),
        ("basic_arithmetic", {"operators": "+"}, "operators: expected a list, got '+'"),
        ("arc_agi", {"board_format_opts": {"col_delimiter": ","}}, "board_format_opts cannot be set"),
        ("time_intervals", {"min_date": "1900-01-01"}, "min_date cannot be set"),
        # A composite would nest a path setting of another task: its dataset specs are refused.
        (
            "composite",
            {"datasets": [{"name": "spell_backward", "weight": 1, "config": {"data_file": "/etc/passwd"}}]},
            "datasets: expected a list of numbers, texts or lists of numbers",
        ),
        ("rearc", {"rng_difficulty_ranges": [[0.0, 1e9]]}, "holds a number above 10000"),
    ],
)
def test_settings_off_the_allow_list_are_refused_with_the_reason(task, config, words):
    with pytest.raises(TaskError, match=re.escape(words)):
        TaskMix((TaskSpec(task, 1.0, config),)).validate_configs()
