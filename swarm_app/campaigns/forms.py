"""The campaign form: every setting of worker.shared.campaign.CampaignConfig an organizer chooses.

Validation happens in three layers, each reporting next to the field it is about:

1. the form fields' own bounds (G >= 2, a positive temperature, ...);
2. checks only the web side can make: custom task lines, I + J versus the questions per round
   when controls run, and model tiers no worker can run (this machine, for local workers; the
   workers seen lately, otherwise);
3. ``CampaignConfig.validate()``, the same validation the coordinator applies everywhere,
   whose ``ConfigError.field`` is mapped back to a form field.
"""

from __future__ import annotations

import json
from datetime import timedelta
from functools import lru_cache
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from worker.shared.campaign import CAMPAIGN_PRESETS, CampaignConfig, ConfigError, ControlsConfig
from worker.shared.config import GRPOConfig
from worker.shared.hardware import cpu_host
from worker.shared.questions import PRESETS as TASK_PRESETS
from worker.shared.questions import TaskError, TaskMix
from worker.shared.sampling import STRATEGIES
from worker.shared.tiers import TIERS

CUSTOM = "custom"
SEEN_DAYS = 7  # workers seen this recently count as "workers that could run a tier"
PRESET_CHOICES = [("", "none (defaults)")] + [(name, name) for name in CAMPAIGN_PRESETS]
STRATEGY_CHOICES = [(name, name.replace("_", " ")) for name in STRATEGIES]
TIER_CHOICES = [
    (name, f"{name} ({spec.params / 1e6:,.0f}M params{'' if spec.cpu_ok else ', GPU'})")
    for name, spec in TIERS.items()
]
GRPO_DEFAULTS = GRPOConfig()


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
    from swarm_app.coordinator.assignment import fits
    from swarm_app.coordinator.models import WorkerNode

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
    name = forms.CharField(max_length=120)
    preset = forms.ChoiceField(choices=PRESET_CHOICES, required=False, widget=forms.HiddenInput)
    task_preset = forms.ChoiceField(
        label="Tasks",
        choices=[(name, f"preset: {name}") for name in TASK_PRESETS] + [(CUSTOM, "custom tasks (below)")],
    )
    custom_tasks = forms.CharField(
        label="Custom tasks",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 70}),
        help_text="One reasoning-gym task per line: name, weight, then its difficulty settings, "
        "e.g. <code>chain_sum 1 min_digits=1 max_digits=2</code>.",
    )
    tiers = forms.MultipleChoiceField(
        label="Model tiers", choices=TIER_CHOICES, widget=forms.CheckboxSelectMultiple
    )
    group_size = forms.IntegerField(label="G (completions per question)", min_value=2, max_value=64)
    questions_per_round = forms.IntegerField(label="Questions per round", min_value=1, max_value=64)
    num_local = forms.IntegerField(label="I (own rollouts trained on)", min_value=0, max_value=64)
    num_external = forms.IntegerField(label="J (external rollouts trained on)", min_value=0, max_value=64)
    local_strategy = forms.ChoiceField(label="Sampling of own rollouts", choices=STRATEGY_CHOICES)
    external_strategy = forms.ChoiceField(label="Sampling of external rollouts", choices=STRATEGY_CHOICES)
    rounds = forms.IntegerField(label="Rounds per node", min_value=1, max_value=100_000)
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1)
    controls_isolated = forms.BooleanField(label="Plain isolated control (J = 0)", required=False)
    controls_filtered = forms.BooleanField(
        label="Filtered isolated control (J = 0, zero-advantage groups dropped)", required=False
    )
    control_seeds = forms.IntegerField(label="Control seeds per tier and arm", min_value=0, max_value=16)
    learning_rate = forms.FloatField(
        label="Learning rate", required=False, min_value=0, help_text="blank: each tier's default"
    )
    eps_low = forms.FloatField(label="Clip ε low", min_value=0, max_value=0.99)
    eps_high = forms.FloatField(label="Clip ε high", min_value=0, max_value=10)
    num_iterations = forms.IntegerField(label="GRPO iterations per batch (μ)", min_value=1, max_value=16)
    max_new_tokens = forms.IntegerField(label="Max new tokens", min_value=1, max_value=8192)
    temperature = forms.FloatField(label="Sampling temperature", min_value=0.01, max_value=10)
    public = forms.BooleanField(label="Public page (anyone may watch)", required=False)
    launch_now = forms.BooleanField(label="Launch at once", required=False)
    allow_unseen_tiers = forms.BooleanField(
        label="Allow tiers no worker seen lately can run (volunteers yet to come)", required=False
    )
    local_workers = forms.IntegerField(
        label="Local workers to start on this machine", min_value=0, max_value=16, required=False
    )

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
        grpo = {**GRPO_DEFAULTS.to_json(), **config.grpo}
        initial = {
            "name": f"{preset or 'campaign'} {timezone.now():%Y-%m-%d %H:%M}",
            "preset": preset,
            "task_preset": task_preset,
            "custom_tasks": tasks_to_text(config.tasks),
            "tiers": config.tiers,
            "group_size": config.group_size,
            "questions_per_round": config.questions_per_round,
            "num_local": config.num_local,
            "num_external": config.num_external,
            "local_strategy": config.local_strategy,
            "external_strategy": config.external_strategy,
            "rounds": config.rounds,
            "seed": config.seed,
            "controls_isolated": config.controls.isolated,
            "controls_filtered": config.controls.filtered,
            "control_seeds": config.controls.seeds,
            "learning_rate": config.grpo.get("learning_rate"),
            "eps_low": grpo["eps_low"],
            "eps_high": grpo["eps_high"],
            "num_iterations": grpo["num_iterations"],
            "max_new_tokens": config.max_new_tokens,
            "temperature": grpo["temperature"],
            "public": True,
            "launch_now": preset == "cpu-demo",
            "local_workers": 0,
        }
        initial.update(overrides)
        return initial

    # --- validation -------------------------------------------------------------------------
    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:  # field errors first: the config cannot be built from bad fields
            return data
        # The batch checks of CampaignConfig.validate(), made here too so that they show beside
        # a task error (validate() reports only the first problem it meets).
        if data["num_local"] + data["num_external"] == 0:
            self.add_error("num_local", "I + J must be at least 1: a node must train on something")
        elif data["num_local"] > data["questions_per_round"]:
            self.add_error(
                "num_local", f"I cannot exceed the {data['questions_per_round']} questions per round"
            )
        tasks = self._tasks(data)
        if tasks is None or self.errors:
            return data
        config = self._config(data, tasks)
        if config is None:
            return data
        controls = config.controls
        batch = config.num_local + config.num_external
        if (
            (controls.isolated or controls.filtered)
            and controls.seeds > 0
            and batch > config.questions_per_round
        ):
            self.add_error(
                "num_external",
                f"the isolated controls train on I + J = {batch} of their own rollouts, but a round "
                f"has {config.questions_per_round} questions: lower I + J, raise the questions "
                "per round, or turn the controls off",
            )
            return data
        if data["eps_high"] < data["eps_low"]:
            self.add_error("eps_high", "the upper clip ε must not be below the lower one")
            return data
        local = data.get("local_workers") or 0
        if not data.get("allow_unseen_tiers") or local:
            for problem in tier_problems(data["tiers"], local):
                self.add_error("tiers", problem)
            if self.errors:
                return data
        self.config = config
        return data

    def _tasks(self, data: dict[str, Any]) -> list[dict[str, Any]] | None:
        if data["task_preset"] != CUSTOM:
            return TASK_PRESETS[data["task_preset"]].to_json()
        try:
            tasks = parse_tasks(data.get("custom_tasks", ""))
            TaskMix.from_json(tasks)
        except (ValueError, TaskError) as error:
            self.add_error("custom_tasks", str(error))
            return None
        return tasks

    def _config(self, data: dict[str, Any], tasks: list[dict[str, Any]]) -> CampaignConfig | None:
        preset = data.get("preset") or ""
        base = CAMPAIGN_PRESETS[preset]() if preset in CAMPAIGN_PRESETS else CampaignConfig()
        # Only what differs from GRPOConfig's defaults (or the preset's own) is stored, so a
        # preset posted unchanged is stored exactly as the preset defines it.
        grpo = dict(base.grpo)
        grpo.pop("learning_rate", None)
        for key in ("eps_low", "eps_high", "num_iterations", "temperature"):
            if key in base.grpo or data[key] != getattr(GRPO_DEFAULTS, key):
                grpo[key] = data[key]
        if data.get("learning_rate"):
            grpo["learning_rate"] = data["learning_rate"]
        values = {
            **base.to_json(),
            "tasks": tasks,
            "tiers": list(data["tiers"]),
            "group_size": data["group_size"],
            "questions_per_round": data["questions_per_round"],
            "num_local": data["num_local"],
            "num_external": data["num_external"],
            "local_strategy": data["local_strategy"],
            "external_strategy": data["external_strategy"],
            "rounds": data["rounds"],
            "seed": data["seed"],
            "max_new_tokens": data["max_new_tokens"],
            "grpo": grpo,
            "controls": ControlsConfig(
                isolated=data["controls_isolated"],
                filtered=data["controls_filtered"],
                seeds=data["control_seeds"],
            ),
        }
        try:
            return CampaignConfig.from_json(values).validate()
        except ConfigError as error:
            self.add_error(self._field_for(error), error.message)
            return None

    def _field_for(self, error: ConfigError) -> str | None:
        """The form field a ConfigError is about (None: shown above the form)."""
        if error.field == "tasks":
            return "custom_tasks" if self.cleaned_data.get("task_preset") == CUSTOM else "task_preset"
        if error.field == "controls":
            return "control_seeds"
        if error.field == "grpo":
            for field in ("eps_low", "eps_high", "num_iterations", "temperature", "learning_rate"):
                if field in error.message:
                    return field
            return None
        return error.field if error.field in self.fields else None


class TokenForm(forms.Form):
    label = forms.CharField(max_length=120, required=False, help_text="who or what will use it")
