"""A campaign's configuration: what every node of a swarm trains, and how.

The coordinator stores it (validated) with the campaign and sends it to each worker in the
welcome message; the worker builds its :class:`~worker.shared.config.AgentConfig` from it. It
lives here, without Django, because both sides need it.

Validation has two steps: the declaration (a msgspec Struct: types and unknown settings, checked
by :meth:`CampaignConfig.from_json` while decoding) and :meth:`CampaignConfig.validate` (ranges and
the rules between settings). Both raise :class:`ConfigError` naming the setting.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import msgspec

from worker.shared import validation
from worker.shared.arms import (
    CONTROL_KINDS,
    Arm,
    backfill_arm,
    control_arm,
    decay_arm,
    importance_sampled_arm,
    sharing_arm,
    with_questions,
)
from worker.shared.config import AgentConfig, GRPOConfig
from worker.shared.prompts import system_prompt
from worker.shared.questions import PRESETS, TaskError, TaskMix
from worker.shared.sampling import BATCH_RULES, STRATEGIES
from worker.shared.tiers import TIERS


class ConfigError(ValueError):
    """Invalid campaign settings; ``field`` names the setting (for form errors)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# Agents a campaign's self-replay window is sized for: the window holds pool_window //
# SELF_WINDOW_AGENTS groups (at least MIN_SELF_WINDOW), the share of the pool one of that many
# agents contributes, so a replayed group is about as old as a pooled one. A campaign's real
# node count is unknown at launch (volunteers come and go); 8 is the study's and the paper's.
SELF_WINDOW_AGENTS = 8
MIN_SELF_WINDOW = 8
MAX_REPLICATES = 64
MAX_NEW_TOKENS = 8192  # the longest completion a campaign may ask for
SAPO_QUESTIONS_PER_ROUND = 8  # the paper's (and the study's) B: arms at another B are named <arm>@B<n>


class ControlsConfig(msgspec.Struct, forbid_unknown_fields=True):
    """Which isolated controls a campaign runs per tier and seed, beside its swarm arm I/J
    (worker/shared/arms.py's control kinds; new fields go last: tests build it positionally)."""

    isolated: bool = True  # (I + J)/0, uniform: the paper's 8/0 baseline
    # (I + J)/0 with zero-advantage groups dropped: a sanity arm only, with B = I + J the filter
    # can only delete groups, which give zero gradient anyway (issue #18)
    filtered: bool = True
    seeds: int = 1  # control runs per tier and arm
    # I/J-self: J from the agent's own last self_window groups (separates sharing from reuse)
    self_replay: bool = False
    # (I + J)/0-dyn: over-generation until I + J informative groups, at most 2 (I + J) questions
    over_generation: bool = False
    self_window: int = 0  # groups; 0: max(MIN_SELF_WINDOW, pool_window // SELF_WINDOW_AGENTS)
    # The control the dashboard's headline gain is against (one of CONTROL_KINDS, run by the
    # campaign; "": the first the campaign runs); every other control's gain is beside it.
    reference: str = ""

    def enabled(self) -> dict[str, bool]:
        """{control kind: on} in worker.shared.arms.CONTROL_KINDS order."""
        flags = {
            "isolated": self.isolated,
            "filtered": self.filtered,
            "self": self.self_replay,
            "dyn": self.over_generation,
        }
        return {kind: flags[kind] for kind in CONTROL_KINDS}

    def reference_kind(self) -> str | None:
        """The headline's control: ``reference`` when the campaign runs it, else the first it
        runs (``reference`` left automatic), None without controls."""
        running = [kind for kind, on in self.enabled().items() if on] if self.seeds >= 1 else []
        if self.reference in running:
            return self.reference
        return running[0] if running else None


# What the coordinator does with rollouts past the pool's window (CampaignConfig.pool_retention).
POOL_RETENTIONS = ("archive", "delete")


class CampaignConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    tasks: list[dict[str, Any]] = msgspec.field(default_factory=lambda: PRESETS["cpu"].to_json())
    system_prompt: str = "default"
    tiers: list[str] = msgspec.field(default_factory=lambda: ["tiny-1m"])
    group_size: int = 8  # G
    questions_per_round: int = 8  # B
    num_local: int = 4  # I
    num_external: int = 4  # J
    local_strategy: str = "nonzero_advantage"
    external_strategy: str = "nonzero_advantage"
    rounds: int = 100  # per node
    seed: int = 0  # the question stream and the controls' seeds derive from it
    max_new_tokens: int = 24
    format_weight: float = 0.0
    grpo: dict[str, Any] = msgspec.field(default_factory=dict)  # GRPOConfig fields; tier defaults fill lr
    controls: ControlsConfig = msgspec.field(default_factory=ControlsConfig)
    pool_window: int = 256  # external rollouts are drawn from the pool's most recent N
    pool_within_tier: bool = False  # rollouts are text: by default they cross tiers
    # What becomes of rollouts no draw can reach any more (outside pool_window, older than the
    # coordinator's grace): "archive" moves them into the campaign's compressed archive, which
    # the organizer downloads; "delete" drops them (swarm_app/coordinator/archive.py).
    pool_retention: str = "archive"
    # R independent swarms per tier (issue #26): a joining node completes a swarm of one, else
    # joins the tier's swarm with the fewest connected nodes (coordinator/assignment.py), and
    # draws only from its swarm's rollouts. One swarm's
    # nodes share a pool and are not independent: the gain's interval resamples swarms against
    # control seeds, so a campaign with R = 1 shows its gain without an interval.
    replicates: int = 1
    lease_seconds: float = 120.0
    ban_threshold: int = 3  # rejected submissions before a node is banned
    # How a node's round batch is assembled (worker/shared/arms.py, issue #29): "fixed" (I own
    # + J external), "backfill" (every informative own group, then informative external ones up
    # to B groups, at most J: the study's `backfill` arm is I = J = B) or "decay" (J falls
    # linearly to 0 over decay_rounds rounds, its slots going to own groups: `4/4-decay`)
    batch_rule: str = "fixed"
    decay_rounds: int = 30

    def __post_init__(self) -> None:
        if isinstance(self.controls, dict):  # built in Python from a settings dict
            self.controls = msgspec.convert(self.controls, ControlsConfig)

    @property
    def mix(self) -> TaskMix:
        return TaskMix.from_json(self.tasks)

    def grpo_config(self, tier_name: str) -> GRPOConfig:
        values = {"learning_rate": TIERS[tier_name].learning_rate, **self.grpo}
        return GRPOConfig(**values)

    def control_kinds(self) -> list[str]:
        """The enabled control kinds (``isolated``, ``filtered``, ``self``, ``dyn``), in order;
        none when ``controls.seeds`` is 0."""
        if self.controls.seeds < 1:
            return []
        return [kind for kind, on in self.controls.enabled().items() if on]

    def control_run_count(self) -> int:
        """Control runs a launch creates: tiers x enabled kinds x seeds."""
        return len(self.tiers) * len(self.control_kinds()) * self.controls.seeds

    def self_window(self) -> int:
        """The self-replay control's window in groups (see SELF_WINDOW_AGENTS)."""
        if self.controls.self_window:
            return self.controls.self_window
        return max(MIN_SELF_WINDOW, self.pool_window // SELF_WINDOW_AGENTS)

    def swarm_arm(self) -> Arm:
        """The campaign's swarm arm as the study names it: I/J (fixed), ``backfill`` or I/J-decay
        with the campaign's strategies (the name says the study's arm where the settings are its)."""
        corrected = bool(self.grpo.get("external_importance_sampling_correction"))
        if self.batch_rule == "backfill":
            arm = backfill_arm(self.questions_per_round)
        elif self.batch_rule == "decay":
            arm = decay_arm(self.num_local, self.num_external, self.decay_rounds)
        elif corrected:
            arm = importance_sampled_arm(self.num_local, self.num_external)
        else:
            arm = sharing_arm(self.num_local, self.num_external)
        arm = replace(
            arm,
            num_local=self.num_local,
            num_external=self.num_external,
            local_strategy=self.local_strategy,
            external_strategy=self.external_strategy,
            external_is=corrected,
        )
        # B shows in the name where it is not the study's 8 (4/4@B4: the paper's semantics)
        if self.questions_per_round != SAPO_QUESTIONS_PER_ROUND and self.batch_rule != "backfill":
            arm = with_questions(arm, self.questions_per_round)
        return arm

    def control_arm(self, kind: str) -> Arm:
        """The isolated control of kind ``kind`` for this campaign's swarm arm (its batch: I + J,
        or B for backfill)."""
        swarm = sharing_arm(self.num_local, self.num_external)
        if self.batch_rule == "backfill":
            swarm = self.swarm_arm()
        arm = control_arm(
            kind, swarm, self_window=self.self_window(), questions_per_round=self.questions_per_round
        )
        if kind in ("isolated", "filtered") and arm.num_local > self.questions_per_round:
            # A swarm generating fewer than I + J (4/4@B4: the paper's reference semantics) is
            # compared with the paper's 8/0, which generates the I + J groups it trains on.
            arm = replace(arm, questions_per_round=arm.num_local)
        return arm

    def control_agent_config(self, tier_name: str, seed: int, kind: str) -> AgentConfig:
        """A control's AgentConfig: the campaign's settings with the arm's I, J, strategies,
        replay source and over-generation cap (worker.shared.arms.Arm.apply); a control always
        assembles its batch by the fixed rule."""
        base = AgentConfig(**{**self.agent_config(tier_name, seed).to_json(), "batch_rule": "fixed"})
        return self.control_arm(kind).apply(base)

    def agent_config(
        self,
        tier_name: str,
        seed: int,
        num_local: int | None = None,
        num_external: int | None = None,
        local_strategy: str | None = None,
        external_strategy: str | None = None,
    ) -> AgentConfig:
        return AgentConfig(
            questions_per_round=self.questions_per_round,
            group_size=self.group_size,
            num_local=self.num_local if num_local is None else num_local,
            num_external=self.num_external if num_external is None else num_external,
            local_strategy=local_strategy or self.local_strategy,
            external_strategy=external_strategy or self.external_strategy,
            max_new_tokens=self.max_new_tokens,
            system_prompt=self.system_prompt,
            format_weight=self.format_weight,
            seed=seed,
            grpo=self.grpo_config(tier_name),
            batch_rule=self.batch_rule,
            decay_rounds=self.decay_rounds if self.batch_rule == "decay" else 0,
        )

    def validate(self) -> CampaignConfig:
        """Raise :class:`ConfigError` naming the first invalid setting."""
        try:
            mix = self.mix
            mix.validate_configs()
        except TaskError as error:
            raise ConfigError("tasks", str(error)) from None
        try:
            system_prompt(self.system_prompt)
        except ValueError as error:
            raise ConfigError("system_prompt", str(error)) from None
        if not self.tiers:
            raise ConfigError("tiers", "choose at least one model tier")
        for name in self.tiers:
            if name not in TIERS:
                raise ConfigError("tiers", f"unknown tier {name!r}; tiers: {', '.join(TIERS)}")
        positive = {
            "group_size": 2,
            "questions_per_round": 1,
            "rounds": 1,
            "max_new_tokens": 1,
            "pool_window": 1,
        }
        for name, minimum in positive.items():
            if getattr(self, name) < minimum:
                raise ConfigError(name, f"must be at least {minimum}")
        if self.pool_retention not in POOL_RETENTIONS:
            raise ConfigError("pool_retention", f"choose one of {', '.join(POOL_RETENTIONS)}")
        if not 1 <= self.replicates <= MAX_REPLICATES:
            raise ConfigError("replicates", f"must be between 1 and {MAX_REPLICATES} swarms per tier")
        if self.max_new_tokens > MAX_NEW_TOKENS:
            raise ConfigError("max_new_tokens", f"must be at most {MAX_NEW_TOKENS}")
        if "learning_rate" in self.grpo and not self.grpo["learning_rate"] > 0:
            raise ConfigError("grpo", "learning_rate must be above 0 (leave it out for each tier's default)")
        if self.group_size > 64 or self.questions_per_round > 64:
            raise ConfigError("group_size", "G and questions per round are at most 64")
        if self.num_local < 0 or self.num_external < 0:
            raise ConfigError("num_local", "I and J must not be negative")
        if self.num_local + self.num_external == 0:
            raise ConfigError("num_local", "I + J must be at least 1: a node must train on something")
        if self.num_local > self.questions_per_round:
            raise ConfigError(
                "num_local", f"I cannot exceed the {self.questions_per_round} questions per round"
            )
        if self.num_external > 64:
            raise ConfigError("num_external", "J is at most 64")
        for name in ("local_strategy", "external_strategy"):
            if getattr(self, name) not in STRATEGIES:
                raise ConfigError(name, f"choose one of {', '.join(STRATEGIES)}")
        known = {f.name for f in fields(GRPOConfig)}
        unknown = set(self.grpo) - known
        if unknown:
            raise ConfigError("grpo", f"unknown GRPO settings {sorted(unknown)}")
        try:
            self.grpo_config(self.tiers[0])
        except (TypeError, ValueError) as error:
            raise ConfigError("grpo", str(error)) from None
        if self.controls.seeds < 0 or self.controls.seeds > 16:
            raise ConfigError("controls", "control seeds must be between 0 and 16")
        if not 0 <= self.controls.self_window <= 4096:
            raise ConfigError("controls", "the self-replay window is 0 (automatic) to 4096 groups")
        if self.controls.self_replay and self.num_external < 1:
            raise ConfigError(
                "controls",
                "the self-replay control replays the swarm's J groups from the agent's own "
                "window: it needs J >= 1",
            )
        if self.batch_rule not in BATCH_RULES:
            raise ConfigError("batch_rule", f"choose one of {', '.join(BATCH_RULES)}")
        if self.batch_rule == "backfill":
            if self.num_external < 1:
                raise ConfigError("num_external", "backfill needs J >= 1: the most external groups it adds")
            if self.local_strategy != "nonzero_advantage":
                raise ConfigError(
                    "local_strategy",
                    "backfill fills the batch past the informative own groups: it needs the "
                    "nonzero_advantage local strategy (with uniform every own group counts)",
                )
            if self.controls.self_replay and self.controls.seeds:
                raise ConfigError(
                    "controls", "the self-replay control replays a fixed J; a backfill swarm's J varies"
                )
        if self.batch_rule == "decay":
            if not 1 <= self.decay_rounds <= 100_000:
                raise ConfigError("decay_rounds", "must be between 1 and 100000 rounds")
            if self.num_local + self.num_external > self.questions_per_round:
                raise ConfigError(
                    "num_external",
                    f"the decay rule ends at I + J = {self.num_local + self.num_external} own groups: "
                    f"more than the {self.questions_per_round} questions per round",
                )
        if self.controls.reference not in ("", *CONTROL_KINDS):
            raise ConfigError(
                "controls", f"the reference control is one of {', '.join(CONTROL_KINDS)} or '' (automatic)"
            )
        running = self.control_kinds()  # none: nothing to be the headline's reference
        if self.controls.reference and running and self.controls.reference not in running:
            raise ConfigError(
                "controls", f"the reference control ({self.controls.reference}) must be one the campaign runs"
            )
        if not 5 <= self.lease_seconds <= 86_400:
            raise ConfigError("lease_seconds", "must be between 5 s and one day")
        if self.ban_threshold < 1:
            raise ConfigError("ban_threshold", "must be at least 1")
        return self

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, data: Any) -> CampaignConfig:
        """Decode settings (a dict, or JSON text/bytes) against the declaration."""
        try:
            if isinstance(data, str | bytes):
                return msgspec.json.decode(data, type=cls)
            return msgspec.convert(data, cls, strict=True)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise _config_error(error) from None


def _config_error(error: msgspec.ValidationError | msgspec.DecodeError) -> ConfigError:
    if not isinstance(error, msgspec.ValidationError):  # ValidationError is a DecodeError too
        return ConfigError("config", f"not valid JSON: {error}")
    path, what = validation.describe(error)
    if what.startswith("unknown fields ["):
        return ConfigError(what.removeprefix("unknown fields [").strip("']"), "unknown campaign setting")
    setting = path.split(".", 1)[0].split("[", 1)[0]
    return ConfigError(setting or "config", f"{path}: {what}" if path else what)


def cpu_demo_config(**overrides: Any) -> CampaignConfig:
    """The `cpu-demo` preset: two CPU tiers that learn visibly within minutes on 2 cores, each
    two swarms sharing within their tier beside 3 seeds of plain isolated and of self-replay,
    the reference (measured timing: README.md)."""
    base = CampaignConfig(
        tiers=["tiny-1m", "tiny-5m"],
        group_size=8,
        questions_per_round=8,
        num_local=4,
        num_external=4,
        rounds=40,
        max_new_tokens=16,
        grpo={"num_iterations": 2},
        # Plain isolated and self-replay (issue #26): self-replay costs what isolated costs and
        # is the control that can falsify "sharing" (same curation, batch and staleness, no
        # other agent): the headline's reference. The filtered sanity arm stays in the form.
        controls=ControlsConfig(seeds=3, filtered=False, self_replay=True, reference="self"),
        # Two swarms of 2 nodes per tier (the demo's 4 nodes, so no more compute): the gain has an
        # interval over independent swarms, not over one swarm's coupled nodes.
        replicates=2,
        # Per model size: swarm vs isolated compares like with like, and a tier's swarm trains
        # on its own tier's rollouts (tiny-1m's would dominate tiny-5m's pool: it runs faster).
        pool_within_tier=True,
    )
    return CampaignConfig.from_json({**base.to_json(), **overrides})


def sapo_table_config(**overrides: Any) -> CampaignConfig:
    """The `sapo-table` preset: the paper's shape (G = 8, 8 questions, 4 local / 4 external), 3
    independent swarms and 3 seeds of each control."""
    base = CampaignConfig(
        tasks=PRESETS["rgym9"].to_json(),
        tiers=["qwen2.5-0.5b"],
        group_size=8,
        questions_per_round=8,
        num_local=4,
        num_external=4,
        rounds=2000,
        max_new_tokens=256,
        # The falsifier's controls (issue #18): 4/4-self and 8/0-dyn beside 8/0 (and the
        # 8/0-filtered sanity arm); the headline is against 8/0, the paper's comparison.
        # 3 seeds per control against 3 independent swarms: the gain's interval resamples both.
        controls=ControlsConfig(seeds=3, self_replay=True, over_generation=True, reference="isolated"),
        replicates=3,
    )
    return CampaignConfig.from_json({**base.to_json(), **overrides})


CAMPAIGN_PRESETS = {"cpu-demo": cpu_demo_config, "sapo-table": sapo_table_config}
