"""The campaign form: every setting of worker.shared.campaign.CampaignConfig an organizer chooses.

The settings' fields are built from their declarations (worker/shared/declaration.py): label,
help text, bounds and choices, so the form and the coordinator refuse the same values. Validation
reports every problem at once, each next to its field:

1. each field against its declaration (G >= 2, a learning rate above 0 and at most 1e-2, ...);
2. checks only the web side can make: custom task lines, and model tiers no worker can run
   (this machine, for local workers; the workers seen lately, otherwise);
3. ``CampaignConfig.check()``, the rules between settings the coordinator applies everywhere,
   each reported at its setting's field unless it reads a field that is already invalid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from functools import lru_cache
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import BaseValidator
from django.utils import timezone
from django.utils.html import conditional_escape

from swarm_app.coordinator.assignment import fits
from swarm_app.coordinator.models import WorkerNode, WorkerToken
from swarm_app.web.sizing import Design, design
from worker.shared.campaign import (
    CAMPAIGN_PRESETS,
    GRPO_DEFAULTS,
    SETTINGS,
    CampaignConfig,
    ConfigError,
)
from worker.shared.declaration import Setting
from worker.shared.hardware import cpu_host
from worker.shared.questions import PRESETS as TASK_PRESETS
from worker.shared.questions import TaskError, TaskMix
from worker.shared.tiers import TIERS

CUSTOM = "custom"
SEEN_DAYS = 7  # workers seen this recently count as "workers that could run a tier"
# The form's field for each setting it offers (worker.shared.campaign.SETTINGS' paths), in the
# page's order (templates/campaigns/new.html).
FORM_SETTINGS = {
    "group_size": "group_size",
    "questions_per_round": "questions_per_round",
    "num_local": "num_local",
    "num_external": "num_external",
    "local_strategy": "local_strategy",
    "external_strategy": "external_strategy",
    "batch_rule": "batch_rule",
    "decay_rounds": "decay_rounds",
    "rounds": "rounds",
    "seed": "seed",
    "replicates": "replicates",
    "pool_retention": "pool_retention",
    "controls_isolated": "controls.isolated",
    "controls_self_replay": "controls.self_replay",
    "controls_over_generation": "controls.over_generation",
    "controls_filtered": "controls.filtered",
    "controls_reference": "controls.reference",
    "control_seeds": "controls.seeds",
    "learning_rate": "grpo.learning_rate",
    "eps_low": "grpo.eps_low",
    "eps_high": "grpo.eps_high",
    "num_iterations": "grpo.num_iterations",
    "max_new_tokens": "max_new_tokens",
    "temperature": "grpo.temperature",
    "external_is_correction": "grpo.external_importance_sampling_correction",
}
FORM_FIELDS = {path: name for name, path in FORM_SETTINGS.items()}
# Settings a form may leave blank for their default: the tier's learning rate; the preset's pool
# retention (a form posted without it, by an older client). A blank headline control is a
# choice: automatic.
OPTIONAL = {"grpo.learning_rate", "pool_retention"}
# How a choice reads in the form (a value not named here reads as itself, "_" as a space).
CHOICE_LABELS = {
    "batch_rule": {
        "fixed": "fixed: I own + J external groups",
        "backfill": "backfill: every informative own group, then external ones up to B",
        "decay": "decay: J falls to 0 over the decay rounds, own groups take its slots",
    },
    "pool_retention": {"archive": "archive: kept compressed, downloadable", "delete": "delete"},
    "controls.reference": {
        "": "automatic: the first control the campaign runs",
        "isolated": "plain isolated",
        "filtered": "filtered isolated (sanity arm)",
        "self": "self-replay",
        "dyn": "over-generation",
    },
}
# Fields a link may prefill on top of a preset (the launch page's arm links: ?num_local=6&num_external=2).
PREFILL_FIELDS = (
    "num_local",
    "num_external",
    "questions_per_round",
    "batch_rule",
    "decay_rounds",
    "external_is_correction",
    "controls_self_replay",
)
PRESET_CHOICES = [("", "none (defaults)")] + [(name, name) for name in CAMPAIGN_PRESETS]
TIER_CHOICES = [
    (name, f"{name} ({spec.params / 1e6:,.0f}M params{'' if spec.cpu_ok else ', GPU'})")
    for name, spec in TIERS.items()
]


class Above(BaseValidator):
    """An exclusive lower bound (Django's own are inclusive): a learning rate of 0 trains nothing."""

    message = "must be above %(limit_value)s"
    code = "min_value"

    def compare(self, value: float, limit: float) -> bool:
        return not value > limit


class Below(BaseValidator):
    message = "must be below %(limit_value)s"
    code = "max_value"

    def compare(self, value: float, limit: float) -> bool:
        return not value < limit


def setting_field(setting: Setting) -> forms.Field:
    """The form field of a declared setting: its title, its help and bounds, its choices."""
    bounds = setting.bounds()
    help_text = conditional_escape(setting.description + (f" ({bounds})" if bounds else ""))
    common = {
        "label": setting.title,
        "help_text": help_text,
        "required": setting.path not in OPTIONAL and "" not in setting.choices,
    }
    if setting.kind is bool:
        return forms.BooleanField(**{**common, "required": False})
    if setting.choices:
        labels = CHOICE_LABELS.get(setting.path, {})
        choices = [(value, labels.get(value, value.replace("_", " "))) for value in setting.choices]
        return forms.ChoiceField(choices=choices, **common)
    field = forms.IntegerField if setting.kind is int else forms.FloatField
    validators = [Above(setting.gt)] if setting.gt is not None else []
    validators += [Below(setting.lt)] if setting.lt is not None else []
    return field(min_value=setting.ge, max_value=setting.le, validators=validators, **common)


def tasks_to_text(tasks: list[dict[str, Any]]) -> str:
    """Task mix as editable lines: ``name weight key=value ...``."""
    lines = []
    for task in tasks:
        settings_text = " ".join(
            f"{key}={json.dumps(value)}" for key, value in (task.get("config") or {}).items()
        )
        lines.append(f"{task['name']} {task.get('weight', 1.0):g} {settings_text}".strip())
    return "\n".join(lines)


def parse_tasks(text: str) -> list[dict[str, Any]]:
    """Lines ``name [weight] [key=value ...]`` -> task mix JSON; ValueError names the line."""
    from reasoning_gym.factory import DATASETS

    tasks = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *rest = line.split()
        if name not in DATASETS:
            raise ValueError(f"line {number}: unknown reasoning-gym task {name!r}")
        weight = 1.0
        if rest and "=" not in rest[0]:
            try:
                weight = float(rest.pop(0))
            except ValueError:
                raise ValueError(f"line {number}: the weight after {name!r} must be a number") from None
        config: dict[str, Any] = {}
        for item in rest:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"line {number}: expected key=value, got {item!r}")
            try:
                config[key] = json.loads(value)
            except json.JSONDecodeError:
                config[key] = value
        tasks.append({"name": name, "weight": weight, "config": config})
    if not tasks:
        raise ValueError("give at least one task, one per line")
    return tasks


@lru_cache(maxsize=1)
def local_hardware() -> dict[str, Any]:
    """This machine, as a local worker on its CPU would report it in its hello (a tier that fits
    the CPU fits any device; torch is not imported to look for a GPU)."""
    return cpu_host(settings.DATA_DIR).to_json()


def tier_problems(tiers: list[str], local_workers: int) -> list[str]:
    """Tiers no worker can run: on this machine (local workers) or on any worker seen lately."""

    if local_workers:
        hardware = local_hardware()
        return [
            f"{reason}: the local workers run on this machine"
            for name in tiers
            for ok, reason in [fits(TIERS[name], hardware)]
            if not ok
        ]
    since = timezone.now() - timedelta(days=SEEN_DAYS)
    seen = list(WorkerNode.objects.filter(last_seen__gte=since).values_list("hardware", flat=True)[:2000])
    if not seen:
        return []  # nobody known yet: no basis to refuse
    problems = []
    for name in tiers:
        verdicts = [fits(TIERS[name], hardware or {}) for hardware in seen]
        if not any(ok for ok, _ in verdicts):
            problems.append(f"no worker seen in the last {SEEN_DAYS} days can run {name} ({verdicts[0][1]})")
    return problems


class CampaignForm(forms.Form):
    name = forms.CharField(max_length=120, help_text="shown on the status page and the campaign's page")
    preset = forms.ChoiceField(choices=PRESET_CHOICES, required=False, widget=forms.HiddenInput)
    task_preset = forms.ChoiceField(
        label="Tasks",
        choices=[(name, f"preset: {name}") for name in TASK_PRESETS] + [(CUSTOM, "custom tasks (below)")],
        help_text="a preset fills the task lines below; editing them makes the tasks custom",
    )
    custom_tasks = forms.CharField(
        label="Task lines",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 70}),
        help_text="One reasoning-gym task per line: name, weight, then its difficulty settings, "
        "e.g. <code>chain_sum 1 min_digits=1 max_digits=2</code>. A setting may be at most 10x "
        "reasoning-gym's default for it. What is typed here is what is stored.",
    )
    tiers = forms.MultipleChoiceField(
        label=SETTINGS["tiers"].title,
        choices=TIER_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        help_text=SETTINGS["tiers"].description,
    )
    public = forms.BooleanField(
        label="Public page (anyone may watch)",
        required=False,
        help_text="off: only staff see the campaign; its page, API and socket are a 404 for others",
    )
    launch_now = forms.BooleanField(
        label="Launch at once",
        required=False,
        help_text="otherwise it waits, pending, for the Launch button",
    )
    allow_unseen_tiers = forms.BooleanField(
        label="Allow tiers no worker seen lately can run (volunteers yet to come)",
        required=False,
        help_text="without it, a tier that none of the workers seen in the last 7 days can run is refused",
    )
    local_workers = forms.IntegerField(
        label="Local workers to start on this machine",
        min_value=0,
        max_value=16,
        required=False,
        help_text="swarm-worker processes for this campaign on the coordinator's machine (demo coordinators)",
    )

    # The page's order (the settings' fields, built below, go between tiers and public): the
    # summary of problems lists them in this order, so its first is the first on the page.
    field_order = [
        "name",
        "public",
        "task_preset",
        "custom_tasks",
        "tiers",
        "allow_unseen_tiers",
        *FORM_SETTINGS,
        "launch_now",
        "local_workers",
    ]

    def __init__(self, *args: Any, allow_local_workers: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allow_local_workers = allow_local_workers
        if not allow_local_workers:
            del self.fields["local_workers"]
        self.config: CampaignConfig | None = None

    # --- initial values ---------------------------------------------------------------------
    @classmethod
    def initial_for(cls, preset: str = "", **overrides: Any) -> dict[str, Any]:
        """Form values from a preset (or the defaults), for a GET of the form."""
        config = CAMPAIGN_PRESETS[preset]() if preset in CAMPAIGN_PRESETS else CampaignConfig()
        task_preset = next(
            (name for name, mix in TASK_PRESETS.items() if mix.to_json() == config.tasks), CUSTOM
        )
        values = config.to_json()
        values["grpo"] = {**GRPO_DEFAULTS, **config.grpo}
        if "learning_rate" not in config.grpo:
            values["grpo"]["learning_rate"] = None  # blank: each tier's default
        initial = {
            "name": f"{preset or 'campaign'} {timezone.now():%Y-%m-%d %H:%M}",
            "preset": preset,
            "task_preset": task_preset,
            "custom_tasks": tasks_to_text(config.tasks),
            "tiers": config.tiers,
            **{name: _get(values, path) for name, path in FORM_SETTINGS.items()},
            "public": True,
            "launch_now": preset == "cpu-demo",
            "local_workers": 0,
        }
        initial.update(overrides)
        return initial

    @classmethod
    def prefill(cls, query: Mapping[str, str]) -> dict[str, Any]:
        """The PREFILL_FIELDS a link's query carries, each parsed and bounded by its own form field
        (a hand-rolled ``isdigit`` then ``int`` took "²" and failed); a value its field refuses
        is left out, so the preset's value shows."""
        values: dict[str, Any] = {}
        for name in PREFILL_FIELDS:
            if name in query:
                try:
                    values[name] = cls.base_fields[name].clean(query[name])
                except ValidationError:
                    continue
        return values

    # --- sizing ------------------------------------------------------------------------------
    def sizing(self) -> Design:
        """What the chosen swarms per size and control seeds can show (sizing.design): from the
        values the page shows (posted ones, else the initial ones), each bounded by its field; a
        value its field refuses counts as the field's initial value."""

        def number(name: str) -> int:
            field = self.fields[name]
            try:
                return int(field.clean(self[name].value()))
            except (TypeError, ValueError, ValidationError):
                return int(self.initial.get(name) or field.initial or 1)

        tiers = self["tiers"].value() or []
        return sizing_of(number("replicates"), number("control_seeds"), len(tiers))

    # --- validation -------------------------------------------------------------------------
    def clean(self) -> dict[str, Any]:
        """Every problem at once, each next to its field: the fields' own (their declarations),
        the task lines, the tiers no worker can run, and CampaignConfig.check()'s rules between
        settings, each where the fields it reads are valid (an invalid one keeps the preset's
        value meanwhile, so that the others are still checked)."""
        data = super().clean()
        tasks = self._tasks(data) if "task_preset" in data else None
        local = data.get("local_workers") or 0
        if "tiers" in data and (not data.get("allow_unseen_tiers") or local):
            for problem in tier_problems(data["tiers"], local):
                self.add_error("tiers", problem)
        preset = data.get("preset") or ""
        base = CAMPAIGN_PRESETS[preset]() if preset in CAMPAIGN_PRESETS else CampaignConfig()
        values = base.to_json()
        invalid = {path for name, path in FORM_SETTINGS.items() if name in self.errors}
        invalid |= {"tasks"} if tasks is None else set()
        invalid |= {"tiers"} if "tiers" not in data else set()
        if tasks is not None:
            values["tasks"] = tasks
        if "tiers" in data:
            values["tiers"] = list(data["tiers"])
        for name, path in FORM_SETTINGS.items():
            if path not in invalid:
                _store(values, path, data.get(name), base)
        for problem in CampaignConfig.check(values):
            if not invalid.intersection(problem.reads):
                self.add_error(self._field_for(problem), problem.message)
        if not self.errors:
            self.config = CampaignConfig.from_json(values)
        return data

    def _tasks(self, data: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The task mix: the textarea is the one source of truth. With a preset chosen and its
        lines left as they were, the preset's own tasks; lines that differ are custom tasks,
        stored as typed (``task_preset`` becomes custom), never silently replaced."""
        text = data.get("custom_tasks", "")
        if data["task_preset"] != CUSTOM:
            preset_tasks = TASK_PRESETS[data["task_preset"]].to_json()
            if not text.strip() or text.strip() == tasks_to_text(preset_tasks):
                return preset_tasks
        try:
            tasks = parse_tasks(text)
            normalized = TaskMix.from_json(tasks).to_json()
        except (ValueError, TaskError) as error:
            self.add_error("custom_tasks", str(error))
            return None
        if data["task_preset"] != CUSTOM and normalized == TASK_PRESETS[data["task_preset"]].to_json():
            return normalized
        data["task_preset"] = CUSTOM
        return tasks

    def _field_for(self, error: ConfigError) -> str | None:
        """The form field a problem is about (None: shown above the form)."""
        if error.path == "tasks":
            return "custom_tasks" if self.cleaned_data.get("task_preset") == CUSTOM else "task_preset"
        if error.path == "tiers":
            return "tiers"
        return FORM_FIELDS.get(error.path)


# The settings' fields, each built from its declaration.
CampaignForm.base_fields.update({name: setting_field(SETTINGS[path]) for name, path in FORM_SETTINGS.items()})


def sizing_of(swarms: int, seeds: int, tiers: int) -> Design:
    """sizing.design with each count within its setting's bounds (at least 1 model size)."""
    replicates, control_seeds = SETTINGS["replicates"], SETTINGS["controls.seeds"]
    swarms = min(max(swarms, replicates.ge or 1), replicates.le or swarms)
    seeds = min(max(seeds, control_seeds.ge or 0), control_seeds.le or seeds)
    return design(swarms, seeds, max(1, min(tiers, len(TIERS))))


def _get(values: dict[str, Any], path: str) -> Any:
    """The setting at ``path`` (``controls.seeds``) of settings ``values``."""
    for key in path.split("."):
        values = values[key]
    return values


def _store(values: dict[str, Any], path: str, value: Any, base: CampaignConfig) -> None:
    """Set the setting at ``path`` of ``values`` to a form's value. Of GRPO's, only what differs
    from GRPOConfig's defaults (or what the preset sets itself) is stored, so a preset posted
    unchanged is stored exactly as the preset defines it; a blank optional field keeps the
    default (the tier's learning rate, the preset's pool retention)."""
    section, _, key = path.rpartition(".")
    target = values[section] if section else values
    if value is None or (value == "" and path in OPTIONAL):
        if section == "grpo":
            target.pop(key, None)
        return
    if section != "grpo" or key in base.grpo or value != GRPO_DEFAULTS[key]:
        target[key] = value


class TokenForm(forms.Form):
    label = forms.CharField(max_length=120, required=False, help_text="who or what will use it")
    ban_scope = forms.TypedChoiceField(
        label="A ban of one of its nodes bans",
        choices=WorkerToken.BanScope.choices,
        initial=WorkerToken.BanScope.TOKEN,
        required=False,
        empty_value=WorkerToken.BanScope.TOKEN,
        help_text="a node that submits false rewards too often is banned; for a token given to one "
        "volunteer, ban the token too (they cannot come back under a new node id); for a token shared "
        "by several volunteers, only the node that lied",
    )
