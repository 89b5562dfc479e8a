"""The campaign form, the config loader and the command line refuse the same configs (issue #28
item 2), property-based: hypothesis generates campaign settings (a few of the form's settings
changed from the defaults, each to a value near or past its bounds, a choice that does not
exist, NaN, infinity), each is given to

* the loader: ``CampaignConfig.check`` on the settings dict (what the coordinator applies to a
  stored config, a preset or a management command's),
* the form: a POST of the campaign form (``CampaignForm``, its fields built from the declarations),
* the command line: ``swarm-worker campaign-config --<setting> <value> ...``,

and the three must name the same settings as wrong (the same set of paths; the empty set: all
three accept). The examples are derandomized, so CI runs the same ones every time."""

from __future__ import annotations

import contextlib
import io
import math
from collections import Counter
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm_app.campaigns.models import Campaign
from swarm_app.web.forms import FORM_FIELDS, FORM_SETTINGS, CampaignForm
from worker.cli import main as cli
from worker.cli.campaign import PROG
from worker.cli.declared import flag
from worker.shared.campaign import SETTINGS, CampaignConfig, ConfigError
from worker.shared.declaration import Setting

EXAMPLES = 300


def values_of(setting: Setting) -> st.SearchStrategy[Any]:
    """Values near and past a setting's bounds (and a few that are never valid)."""
    if setting.kind is bool:
        return st.booleans()
    if setting.choices:
        return st.sampled_from([*setting.choices, "bogus"])
    low = setting.ge if setting.ge is not None else setting.gt
    high = setting.le if setting.le is not None else setting.lt
    edges = st.sampled_from([low, high, low - 1, high + 1])
    if setting.kind is int:
        return st.integers(low - 2, min(high, low + 10) + 1) | edges
    span = high - low
    near = st.floats(low - span / 2, high + span / 2, allow_nan=False)
    return near | edges | st.sampled_from([math.nan, math.inf, -math.inf, low + span * 1e-9])


@st.composite
def changes(draw: st.DrawFn) -> dict[str, Any]:
    """{setting path: value} for up to 4 of the form's settings; a learning rate may be None
    (blank: the tier's default)."""
    paths = draw(st.lists(st.sampled_from(sorted(FORM_FIELDS)), max_size=4, unique=True))
    changed = {path: draw(values_of(SETTINGS[path])) for path in paths}
    if "grpo.learning_rate" in changed and draw(st.booleans()):
        changed["grpo.learning_rate"] = None
    return changed


def loader_problems(changed: dict[str, Any]) -> list[ConfigError]:
    values = CampaignConfig().to_json()
    for path, value in changed.items():
        section, _, key = path.rpartition(".")
        target = values[section] if section else values
        if value is not None:
            target[key] = value
    return CampaignConfig.check(values)


def form_verdict(changed: dict[str, Any]) -> set[str]:
    initial = CampaignForm.initial_for("")
    post = {key: value for key, value in initial.items() if value is not None and value is not False}
    post.update({key: "on" for key, value in initial.items() if value is True})
    post["allow_unseen_tiers"] = "on"
    for path, value in changed.items():
        name = FORM_FIELDS[path]
        post.pop(name, None)
        if value is True:
            post[name] = "on"
        elif value is not False:
            post[name] = "" if value is None else repr(value) if isinstance(value, float) else str(value)
    form = CampaignForm(post)
    assert not form.is_valid() or form.config is not None
    unexpected = set(form.errors) - set(FORM_SETTINGS)
    assert not unexpected, form.errors  # only the generated settings may be wrong
    return {FORM_SETTINGS[name] for name in form.errors}


def cli_verdict(changed: dict[str, Any]) -> set[str]:
    argv = ["campaign-config"]
    for path, value in changed.items():
        if isinstance(value, bool):
            argv.append(flag(path) if value else flag(path).replace("--", "--no-", 1))
        elif value is not None:
            argv += [flag(path), repr(value) if isinstance(value, float) else str(value)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(argv)
    lines = err.getvalue().splitlines()
    paths = {line.removeprefix(f"{PROG}: ").split(": ", 1)[0] for line in lines}
    assert (code == 0) == (not paths) and (code == 0) == bool(out.getvalue()), (code, lines)
    return paths


def test_the_form_the_loader_and_the_command_line_refuse_the_same_configs(db):
    verdicts: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(changes())
    def same_verdicts(changed: dict[str, Any]) -> None:
        problems = loader_problems(changed)
        loader = {problem.path for problem in problems}
        assert form_verdict(changed) == loader, changed
        assert cli_verdict(changed) == loader, changed
        verdicts["refused" if loader else "accepted"] += 1
        verdicts.update({f"rule {problem.path}" for problem in problems if len(problem.reads) > 1})

    same_verdicts()
    # Both verdicts were compared, and refusals by rules between settings among them.
    assert verdicts["accepted"] >= 20 and verdicts["refused"] >= 40, verdicts
    assert verdicts["rule num_local"] and verdicts["rule grpo.eps_high"], verdicts
    assert len([key for key in verdicts if key.startswith("rule ")]) >= 3, verdicts


def test_a_campaign_row_is_validated_by_the_declarations(db):
    """The admin and any ModelForm (Model.full_clean) refuse what the form refuses, every problem."""
    config = {**CampaignConfig().to_json(), "group_size": 1, "num_local": 0, "num_external": 0}
    with pytest.raises(ValidationError) as error:
        Campaign(name="bad", config=config).full_clean()
    assert error.value.message_dict["config"] == [
        "group_size: must be between 2 and 64",
        "num_local: I + J must be at least 1: a node must train on something",
    ]
    Campaign(name="good", config=CampaignConfig().to_json()).full_clean()
