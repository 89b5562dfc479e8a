"""The campaign form: every setting of worker.shared.campaign.CampaignConfig an organizer chooses.

Validation happens in three layers, each reporting next to the field it is about:

1. the form fields' own bounds (G >= 2, a positive temperature, ...);
2. checks only the web side can make: custom task lines, and model tiers no worker can run
   (this machine, for local workers; the workers seen lately, otherwise);
3. ``CampaignConfig.validate()``, the same validation the coordinator applies everywhere,
   whose ``ConfigError.field`` is mapped back to a form field.
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
from django.utils import timezone

from swarm_app.coordinator.models import WorkerToken
from worker.shared.arms import CONTROL_KINDS
from worker.shared.campaign import (
    CAMPAIGN_PRESETS,
    MAX_NEW_TOKENS,
    MAX_REPLICATES,
    CampaignConfig,
    ConfigError,
    ControlsConfig,
)
from worker.shared.config import MAX_LEARNING_RATE, GRPOConfig
from worker.shared.hardware import cpu_host
from worker.shared.questions import PRESETS as TASK_PRESETS
from worker.shared.questions import TaskError, TaskMix
from worker.shared.sampling import STRATEGIES
from worker.shared.tiers import TIERS

CUSTOM = "custom"
SEEN_DAYS = 7  # workers seen this recently count as "workers that could run a tier"
CONTROL_KIND_LABELS = {
    "isolated": "plain isolated",
    "filtered": "filtered isolated (sanity arm)",
    "self": "self-replay",
    "dyn": "over-generation",
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
BATCH_RULE_CHOICES = [
    ("fixed", "fixed: I own + J external groups"),
    ("backfill", "backfill: every informative own group, then external ones up to B"),
    ("decay", "decay: J falls to 0 over the decay rounds, own groups take its slots"),
]
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


def positive(value: float | None) -> None:
    """A learning rate of 0 would train nothing: refused, not read as "the tier's default"."""
    if value is not None and not value > 0:
        raise forms.ValidationError("must be above 0 (leave it blank for each tier's default)")


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
        label="Model tiers",
        choices=TIER_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        help_text="one model size per tier: each tier's nodes train their own copy; the swarm is "
        "compared with the isolated controls tier by tier",
    )
    group_size = forms.IntegerField(
        label="G (completions per question)",
        min_value=2,
        max_value=64,
        help_text="GRPO's group: a question's advantages are its completions' rewards against their mean",
    )
    questions_per_round = forms.IntegerField(
        label="Questions per round",
        min_value=1,
        max_value=64,
        help_text="a node's own questions each round; it answers each G times and shares them all",
    )
    num_local = forms.IntegerField(
        label="I (own rollouts trained on)",
        min_value=0,
        max_value=64,
        help_text="question groups of its own a node trains on per round (at most the questions per round)",
    )
    num_external = forms.IntegerField(
        label="J (external rollouts trained on)",
        min_value=0,
        max_value=64,
        help_text="question groups drawn from the pool (other nodes' rollouts) a node trains on per "
        "round; J = 0 is isolated training. I + J is at least 1",
    )
    batch_rule = forms.ChoiceField(
        label="Batch rule",
        choices=BATCH_RULE_CHOICES,
        help_text="how a node assembles its round's batch (worker/shared/arms.py): fixed is the "
        "paper's I/J; backfill (SAPO as backfill) trains on every informative own group and fills "
        "the batch up to B with informative external ones, at most J (set I = J = B); decay "
        "starts at I/J and moves J's slots to own groups over the decay rounds",
    )
    decay_rounds = forms.IntegerField(
        label="Decay rounds",
        min_value=1,
        max_value=100_000,
        help_text="for the decay rule: rounds over which J falls linearly to 0 (J_r = round(J · "
        "max(0, 1 − r / decay rounds))); ignored by the other rules",
    )
    local_strategy = forms.ChoiceField(
        label="Sampling of own rollouts",
        choices=STRATEGY_CHOICES,
        help_text="uniform: any of its groups; nonzero advantage: only groups whose completions "
        "differ in reward (the others teach GRPO nothing)",
    )
    external_strategy = forms.ChoiceField(
        label="Sampling of external rollouts",
        choices=STRATEGY_CHOICES,
        help_text="the same choice for the groups drawn from the pool",
    )
    rounds = forms.IntegerField(
        label="Rounds per node",
        min_value=1,
        max_value=100_000,
        help_text="a node stops after this many rounds; the campaign completes when nodes and controls have",
    )
    seed = forms.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        help_text="seeds the question stream and the controls (control k uses seed + k): same seed, same questions",
    )
    replicates = forms.IntegerField(
        label="Independent swarms per tier (R)",
        min_value=1,
        max_value=MAX_REPLICATES,
        help_text="nodes are spread over R swarms that share only among themselves (a swarm needs "
        "2 or more nodes to share: plan 2R nodes per tier at least); the gain's interval compares "
        "swarms with control seeds (with R = 1 the gain has no interval: one swarm's nodes share "
        "a pool and are not independent)",
    )
    pool_retention = forms.ChoiceField(
        label="Rollouts past the pool's window",
        choices=[("archive", "archive: kept compressed, downloadable"), ("delete", "delete")],
        required=False,  # a form posted without it (older clients): archive, the default
        help_text="rollouts no pool draw can reach any more leave the live pool on a schedule: into "
        "the campaign's archive (a compressed JSONL download for organizers) or deleted",
    )
    controls_isolated = forms.BooleanField(
        label="Plain isolated control (I + J)/0",
        required=False,
        help_text="per tier, a node trained alone on I + J of its own groups, uniformly sampled (the "
        "paper's 8/0 arm): controls for sharing as a whole",
    )
    controls_filtered = forms.BooleanField(
        label="Filtered isolated control (I + J)/0-filtered: a sanity arm",
        required=False,
        help_text="the same, zero-advantage groups dropped. A sanity check only: with I + J of its "
        "own I + J groups the filter can only delete groups that give no gradient anyway, so it "
        "cannot differ much from the plain control",
    )
    controls_self_replay = forms.BooleanField(
        label="Self-replay control I/J-self",
        required=False,
        help_text="I own groups of the round plus J replayed from the node's own recent groups (a "
        "window as old as the pool's), both filtered: the same batch, curation and staleness as the "
        "swarm without any other node; controls for curation plus reuse (needs J >= 1)",
    )
    controls_over_generation = forms.BooleanField(
        label="Over-generation control (I + J)/0-dyn",
        required=False,
        help_text="alone, generating more questions (up to 2 (I + J)) until it has I + J groups with "
        "an advantage (DAPO's dynamic sampling): the swarm's informative batch bought with more "
        "generation; the dashboard shows its questions per round beside its reward",
    )
    controls_reference = forms.ChoiceField(
        label="Headline control",
        choices=[("", "automatic: the first control the campaign runs")]
        + [(kind, CONTROL_KIND_LABELS[kind]) for kind in CONTROL_KINDS],
        required=False,
        help_text="the control the dashboard's headline gain is measured against (one the campaign "
        "runs); the gain over every other control is shown beside it",
    )
    control_seeds = forms.IntegerField(
        label="Control seeds per tier and arm",
        min_value=0,
        max_value=16,
        help_text="independent runs of each control, for an interval; each is a Celery task for the whole campaign",
    )
    learning_rate = forms.FloatField(
        label="Learning rate",
        required=False,
        max_value=MAX_LEARNING_RATE,
        validators=[positive],
        help_text="above 0; blank: each tier's default (1e-4 for the tiny tiers, 1e-5 for Qwen)",
    )
    eps_low = forms.FloatField(
        label="Clip ε low",
        min_value=0,
        max_value=0.99,
        help_text="PPO-style clip of the probability ratio below 1 - ε low (default 0.2)",
    )
    eps_high = forms.FloatField(
        label="Clip ε high",
        min_value=0,
        max_value=10,
        help_text="clip above 1 + ε high, at least ε low (default 0.28, DAPO's clip-higher)",
    )
    num_iterations = forms.IntegerField(
        label="GRPO iterations per batch (μ)",
        min_value=1,
        max_value=16,
        help_text="optimizer passes over each round's batch (default 1)",
    )
    max_new_tokens = forms.IntegerField(
        label="Max new tokens",
        min_value=1,
        max_value=MAX_NEW_TOKENS,
        help_text="the longest completion; a longer answer is cut and scored as it stands",
    )
    temperature = forms.FloatField(
        label="Sampling temperature",
        min_value=0.01,
        max_value=10,
        help_text="of the completions (default 1.0): lower is less varied, fewer groups with an advantage",
    )
    external_is_correction = forms.BooleanField(
        label="Correct external rollouts for being off-policy",
        required=False,
        help_text="each same-tier external token weighted by min(π_receiver / π_generator, 3), truncated "
        "importance sampling; workers then share their completions' token ids and log-probs (larger "
        "records, workers of this version or later)",
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
            "batch_rule": config.batch_rule,
            "decay_rounds": config.decay_rounds,
            "rounds": config.rounds,
            "seed": config.seed,
            "replicates": config.replicates,
            "pool_retention": config.pool_retention,
            "controls_isolated": config.controls.isolated,
            "controls_filtered": config.controls.filtered,
            "controls_self_replay": config.controls.self_replay,
            "controls_over_generation": config.controls.over_generation,
            "controls_reference": config.controls.reference,
            "control_seeds": config.controls.seeds,
            "learning_rate": config.grpo.get("learning_rate"),
            "eps_low": grpo["eps_low"],
            "eps_high": grpo["eps_high"],
            "num_iterations": grpo["num_iterations"],
            "max_new_tokens": config.max_new_tokens,
            "temperature": grpo["temperature"],
            "external_is_correction": grpo["external_importance_sampling_correction"],
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

    # --- validation -------------------------------------------------------------------------
    def clean(self) -> dict[str, Any]:
        """Every check whose fields are valid runs, so that all problems show at once, each next
        to its field; CampaignConfig.validate() (which reports the first problem it meets) runs
        last, on what passed the rest."""
        data = super().clean()
        for field, message in self._cross_field_errors(data):
            self.add_error(field, message)
        tasks = self._tasks(data) if "task_preset" in data else None
        local = data.get("local_workers") or 0
        if "tiers" in data and (not data.get("allow_unseen_tiers") or local):
            for problem in tier_problems(data["tiers"], local):
                self.add_error("tiers", problem)
        if tasks is not None and not self.errors:
            self.config = self._config(data, tasks)
        return data

    @staticmethod
    def _cross_field_errors(data: dict[str, Any]) -> list[tuple[str, str]]:
        """(field, message) for each rule between settings that the valid fields break."""

        def have(*names: str) -> bool:
            return all(data.get(name) is not None for name in names)

        errors = []
        if have("num_local", "num_external") and data["num_local"] + data["num_external"] == 0:
            errors.append(("num_local", "I + J must be at least 1: a node must train on something"))
        if have("num_local", "questions_per_round") and data["num_local"] > data["questions_per_round"]:
            errors.append(
                ("num_local", f"I cannot exceed the {data['questions_per_round']} questions per round")
            )
        seeds = data.get("control_seeds")
        if data.get("controls_self_replay") and seeds and have("num_external") and data["num_external"] < 1:
            errors.append(
                (
                    "controls_self_replay",
                    "the self-replay control replays J groups of the node's own: it needs J >= 1 "
                    "(with J = 0 the plain isolated control is the comparison)",
                )
            )
        if have("eps_low", "eps_high") and data["eps_high"] < data["eps_low"]:
            errors.append(("eps_high", "the upper clip ε must not be below the lower one"))
        return errors

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
        if data.get("learning_rate") is not None:
            grpo["learning_rate"] = data["learning_rate"]
        correction = "external_importance_sampling_correction"
        if correction in base.grpo or data["external_is_correction"]:
            grpo[correction] = data["external_is_correction"]
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
            "batch_rule": data["batch_rule"],
            "decay_rounds": data["decay_rounds"],
            "rounds": data["rounds"],
            "seed": data["seed"],
            "replicates": data["replicates"],
            "pool_retention": data.get("pool_retention") or base.pool_retention,
            "max_new_tokens": data["max_new_tokens"],
            "grpo": grpo,
            "controls": ControlsConfig(
                isolated=data["controls_isolated"],
                filtered=data["controls_filtered"],
                seeds=data["control_seeds"],
                self_replay=data["controls_self_replay"],
                over_generation=data["controls_over_generation"],
                self_window=base.controls.self_window,
                reference=data["controls_reference"],
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
            if "reference" in error.message:
                return "controls_reference"
            return "controls_self_replay" if "self-replay" in error.message else "control_seeds"
        if error.field == "grpo":
            for field in ("eps_low", "eps_high", "num_iterations", "temperature", "learning_rate"):
                if field in error.message:
                    return field
            return None
        return error.field if error.field in self.fields else None


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
