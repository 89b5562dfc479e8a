"""A campaign's configuration: what every node of a swarm trains, and how.

It is long because every campaign setting is declared here once, with its bounds, description
and cross-setting rules (the form, the CLI and the docs' settings table follow from it).

The coordinator stores it (validated) with the campaign and sends it to each worker in the
welcome message; the worker builds its :class:`~worker.shared.config.AgentConfig` from it. It
lives here, without Django, because both sides need it.

Each setting is declared once, with its type, bounds, default, title and help text (msgspec
``Annotated[..., Meta(...)]``; GRPOConfig's fields, which a campaign sets in its ``grpo`` dict,
in worker/shared/config.py): :meth:`CampaignConfig.from_json` refuses what a declaration refuses
while decoding, :meth:`CampaignConfig.problems` lists every problem, the rules between settings
included, and :meth:`CampaignConfig.validate` raises the first as a :class:`ConfigError` naming
the setting. The campaign form and the command line build their fields from the declarations.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from worker.shared import validation
from worker.shared.arms import (
    Arm,
    backfill_arm,
    control_arm,
    decay_arm,
    importance_sampled_arm,
    sharing_arm,
    with_questions,
)
from worker.shared.campaign_controls import ControlsConfig
from worker.shared.config import (
    CPU_STUDY_MAX_NEW_TOKENS,
    CPU_STUDY_ROUNDS,
    DEFAULT_POOL_WINDOW,
    ROUND,
    AgentConfig,
    GRPOConfig,
)
from worker.shared.declaration import declared, setting_problems, settings_table
from worker.shared.evaluation import MAX_EVAL_QUESTIONS
from worker.shared.prompts import system_prompt
from worker.shared.questions import PRESETS, TaskError, TaskMix
from worker.shared.rules import Broken, grpo_rules, rules_of
from worker.shared.sampling import BATCH_RULES, STRATEGIES
from worker.shared.tiers import TIERS


class ConfigError(ValueError):
    """Invalid campaign settings. ``path`` names the setting (``num_local``, ``controls.seeds``,
    ``grpo.eps_high``), ``field`` its top-level setting; ``reads`` are the settings the broken
    rule reads (for a problem of one setting, that setting); ``problems``: every problem found,
    this one first (CampaignConfig.validate raises the first and carries them all)."""

    def __init__(self, path: str, message: str, reads: tuple[str, ...] = ()) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.field = path.split(".", 1)[0]
        self.message = message
        self.reads = reads or (path,)
        self.problems = [self]


# Agents a campaign's self-replay window is sized for: the window holds pool_window //
# SELF_WINDOW_AGENTS groups (at least MIN_SELF_WINDOW), the share of the pool one of that many
# agents contributes, so a replayed group is about as old as a pooled one. A campaign's real
# node count is unknown at launch (volunteers come and go); 8 is the study's and the paper's.
SELF_WINDOW_AGENTS = 8
MIN_SELF_WINDOW = 8
# Bounds, each defended where it is used below. A round generates G x B completions: 64 x 64 =
# 4096 sequences is the most one volunteer's round should hold (the paper's is 8 x 8).
MAX_GROUP = 64
MAX_REPLICATES = 64
MAX_NEW_TOKENS = 8192  # the longest completion a campaign may ask for
MAX_ROUNDS = 100_000
SAPO_QUESTIONS_PER_ROUND = 8  # the paper's (and the study's) B: arms at another B are named <arm>@B<n>
# What the coordinator does with rollouts past the pool's window (CampaignConfig.pool_retention).
POOL_RETENTIONS = ("archive", "delete")


class CampaignConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, dict=True):
    """Every campaign setting, declared once: its type, bounds, default, title and help text
    (the campaign form's fields and swarm-worker campaign-config's flags are built from them)."""

    tasks: Annotated[
        list[dict[str, Any]],
        Meta(description="the task mix: reasoning-gym tasks, their weights and settings (questions.py)"),
    ] = msgspec.field(default_factory=lambda: PRESETS["cpu"].to_json())
    system_prompt: Annotated[str, Meta(description="reasoning-gym's system prompt, by name")] = (
        ROUND.system_prompt
    )
    tiers: Annotated[
        list[str],
        Meta(
            title="Model tiers",
            description="one model size per tier: each tier's nodes train their own copy; the "
            "swarm is compared with the isolated controls tier by tier",
        ),
    ] = msgspec.field(default_factory=lambda: ["tiny-1m"])
    # G >= 2: an advantage is a completion's reward against its group's mean.
    group_size: Annotated[
        int,
        Meta(
            ge=2,
            le=MAX_GROUP,
            title="G (completions per question)",
            description="GRPO's group: a question's advantages are its completions' rewards against their mean "
            "(one completion has none)",
        ),
    ] = ROUND.group_size
    questions_per_round: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_GROUP,
            title="Questions per round",
            description="B: a node's own questions each round; it answers each G times and shares them all",
        ),
    ] = ROUND.questions_per_round
    num_local: Annotated[
        int,
        Meta(
            ge=0,
            le=MAX_GROUP,
            title="I (own rollouts trained on)",
            description="question groups of its own a node trains on per round (at most the questions per round)",
        ),
    ] = ROUND.num_local
    num_external: Annotated[
        int,
        Meta(
            ge=0,
            le=MAX_GROUP,
            title="J (external rollouts trained on)",
            description="question groups drawn from the pool (other nodes' rollouts) a node trains on per round; "
            "J = 0 is isolated training. I + J is at least 1",
        ),
    ] = ROUND.num_external
    local_strategy: Annotated[
        Literal[STRATEGIES],
        Meta(
            title="Sampling of own rollouts",
            description="uniform: any of its groups; nonzero advantage: only groups whose "
            "completions differ in reward (the others teach GRPO nothing)",
        ),
    ] = ROUND.local_strategy
    external_strategy: Annotated[
        Literal[STRATEGIES],
        Meta(
            title="Sampling of external rollouts",
            description="the same choice for the groups drawn from the pool",
        ),
    ] = ROUND.external_strategy
    rounds: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_ROUNDS,
            title="Rounds per node",
            description="a node stops after this many rounds; the campaign completes when nodes and controls have "
            "(sapo-table runs 2,000; 100,000 is 50 times that, a metrics row per agent and round)",
        ),
    ] = 100
    seed: Annotated[
        int,
        Meta(
            ge=0,
            le=2**31 - 1,
            title="Seed",
            description="seeds the question stream and the controls (control k uses seed + k): same seed, same "
            "questions. 31 bits, like every seed derived from it (config.stable_seed)",
        ),
    ] = ROUND.seed
    max_new_tokens: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_NEW_TOKENS,
            title="Max new tokens",
            description="the longest completion; a longer answer is cut and scored as it stands (8192: Qwen2.5's "
            "generation limit)",
        ),
    ] = ROUND.max_new_tokens
    format_weight: Annotated[
        float,
        Meta(
            ge=0,
            le=1,
            description="weight of the format reward (answer tags present) beside a correct "
            "answer's 1: above 1, tags would be worth more than being right",
        ),
    ] = ROUND.format_weight
    grpo: Annotated[
        dict[str, Any],
        Meta(
            description="GRPOConfig's settings that differ from its defaults (config.py declares their bounds)"
        ),
    ] = msgspec.field(default_factory=dict)  # GRPOConfig fields; tier defaults fill lr
    controls: ControlsConfig = msgspec.field(default_factory=ControlsConfig)
    pool_window: Annotated[
        int,
        Meta(
            ge=1,
            le=100_000,
            title="Pool window",
            description="external rollouts are drawn from the pool's most recent N (the draw reads at most this "
            "many rows; 100,000 is 400 times the default)",
        ),
    ] = DEFAULT_POOL_WINDOW
    pool_within_tier: Annotated[
        bool, Meta(description="draw only the node's own tier's rollouts (text crosses tiers by default)")
    ] = False
    # What becomes of rollouts no draw can reach any more (outside pool_window, older than the
    # coordinator's grace): "archive" moves them into the campaign's compressed archive, which
    # the organizer downloads; "delete" drops them (swarm_app/coordinator/archive.py).
    pool_retention: Annotated[
        Literal[POOL_RETENTIONS],
        Meta(
            title="Rollouts past the pool's window",
            description="rollouts no pool draw can reach any more leave the live pool on a "
            "schedule: into the campaign's archive (a compressed JSONL download for organizers) or deleted",
        ),
    ] = "archive"
    # R independent swarms per tier (issue #26): a joining node completes a swarm of one, else
    # joins the tier's swarm with the fewest connected nodes (coordinator/assignment.py), and
    # draws only from its swarm's rollouts. One swarm's
    # nodes share a pool and are not independent: the gain's interval resamples swarms against
    # control seeds, so a campaign with R = 1 shows its gain without an interval.
    replicates: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_REPLICATES,
            title="Independent swarms per tier (R)",
            description="nodes are spread over R swarms that share only among themselves (a swarm needs 2 or more "
            "nodes to share: plan 2R nodes per tier at least); the gain's interval compares swarms "
            "with control seeds (with R = 1 the gain has no interval: one swarm's nodes share a pool "
            "and are not independent)",
        ),
    ] = 1
    lease_seconds: Annotated[
        float,
        Meta(
            ge=5,
            le=86_400,
            description="how long a node holds its questions; 5 s is below any honest round on a "
            "tiny tier, a day the longest a lost lease should block its questions",
        ),
    ] = 120.0
    ban_threshold: Annotated[
        int,
        Meta(
            ge=1,
            le=1000,
            title="Ban threshold",
            description="rejected submissions before a node is banned (1: the first false reward; 1000: never in practice)",
        ),
    ] = 3
    # How a node's round batch is assembled (worker/shared/arms.py, issue #29): "fixed" (I own
    # + J external), "backfill" (every informative own group, then informative external ones up
    # to B groups, at most J: the study's `backfill` arm is I = J = B) or "decay" (J falls
    # linearly to 0 over decay_rounds rounds, its slots going to own groups: `4/4-decay`)
    batch_rule: Annotated[
        Literal[BATCH_RULES],
        Meta(
            title="Batch rule",
            description="how a node assembles its round's batch (worker/shared/arms.py): fixed is "
            "the paper's I/J; backfill (SAPO as backfill) trains on every informative own group "
            "and fills the batch up to B with informative external ones, at most J (set I = J = "
            "B); decay starts at I/J and moves J's slots to own groups over the decay rounds",
        ),
    ] = ROUND.batch_rule
    decay_rounds: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_ROUNDS,
            title="Decay rounds",
            description="for the decay rule: rounds over which J falls linearly to 0 (J_r = round(J · max(0, 1 − "
            "r / decay rounds))); ignored by the other rules",
        ),
    ] = ROUND.decay_rounds
    # Held-out evaluation (worker/shared/evaluation.py, issue #48): after every eval_every-th
    # round and the last, each node and control answers eval_questions fresh questions per task
    # greedily; the coordinator scores them.
    eval_every: Annotated[
        int,
        Meta(
            ge=0,
            le=MAX_ROUNDS,
            title="Evaluate every N rounds",
            description="every node and control is evaluated on held-out questions after every N-th round "
            "and after its last (0: never); the questions are reserved for evaluation, fresh at every "
            "evaluation and the same for every node",
        ),
    ] = 10
    eval_questions: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_EVAL_QUESTIONS,
            title="Evaluation questions per task",
            description="held-out questions of each task at each evaluation, answered once each, greedily "
            f"(at most {MAX_EVAL_QUESTIONS} over all tasks)",
        ),
    ] = 64

    def __post_init__(self) -> None:
        if isinstance(self.controls, dict):  # built in Python from a settings dict: unchecked
            self.controls = ControlsConfig(**self.controls)  # until problems(), like the rest

    @cached_property
    def mix(self) -> TaskMix:
        """``tasks`` as a TaskMix, built once per config (``dict=True`` gives the struct the
        ``__dict__`` this cache lives in; settings are never changed once decoded). Built on every
        access, it cost a coordinator a mix and a canonical JSON of each task's settings per
        question issued or re-scored: 16 a round (docs/coordinator-bench.md)."""
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

    def problems(self) -> list[ConfigError]:
        """Every problem of these settings (:meth:`check`); [] when they are valid."""
        return type(self).check(self.to_json())

    def validate(self) -> CampaignConfig:
        """Raise the first of :meth:`problems` (its ``problems`` carries them all), else self."""
        if problems := self.problems():
            problems[0].problems = problems
            raise problems[0]
        return self

    @classmethod
    def check(cls, data: dict[str, Any]) -> list[ConfigError]:
        """Every problem of settings ``data`` (a dict, as stored): each setting against its
        declaration (type, bounds, choices), then the rules between settings, each rule only
        where the settings it reads are valid (an invalid one is replaced by its default to
        read the others, so no rule reports a value nobody gave)."""
        if not isinstance(data, dict):
            return [ConfigError("config", f"expected an object, got {type(data).__name__}")]
        problems = [ConfigError(path, message) for path, message in setting_problems(SETTINGS, data)]
        bad = {problem.path for problem in problems}
        valid = {key: value for key, value in data.items() if key not in bad}
        for nested in ("controls", "grpo"):
            if isinstance(data.get(nested), dict):
                valid[nested] = {k: v for k, v in data[nested].items() if f"{nested}.{k}" not in bad}
        config = msgspec.convert(valid, cls, strict=True)
        return problems + [rule for rule in config._rules() if not bad.intersection(rule.reads)]

    def _rules(self) -> list[ConfigError]:
        """The rules a declaration cannot say: task and tier names, and those between settings
        (each reported at the setting to change, with the settings it reads)."""
        rules = []
        try:
            self.mix.validate_configs()
        except TaskError as error:
            rules.append(ConfigError("tasks", str(error)))
        try:
            system_prompt(self.system_prompt)
        except ValueError as error:
            rules.append(ConfigError("system_prompt", str(error)))
        if not self.tiers:
            rules.append(ConfigError("tiers", "choose at least one model tier"))
        rules += [
            ConfigError("tiers", f"unknown tier {name!r}; tiers: {', '.join(TIERS)}")
            for name in self.tiers
            if name not in TIERS
        ]
        broken = rules_of(self)
        grpo = {**GRPO_DEFAULTS, **self.grpo}
        broken += [
            Broken(f"grpo.{rule.setting}", rule.message, tuple(f"grpo.{name}" for name in rule.reads))
            for rule in grpo_rules(grpo["eps_low"], grpo["eps_high"])
        ]
        rules += [ConfigError(rule.setting, rule.message, rule.reads) for rule in broken]
        controls = self.controls
        if controls.self_replay and self.num_external < 1:
            rules.append(
                ConfigError(
                    "controls.self_replay",
                    "the self-replay control replays J groups of the node's own: it needs J >= 1 "
                    "(with J = 0 the plain isolated control is the comparison)",
                    ("controls.self_replay", "num_external"),
                )
            )
        if self.batch_rule == "backfill" and controls.self_replay and controls.seeds:
            rules.append(
                ConfigError(
                    "controls.self_replay",
                    "the self-replay control replays a fixed J; a backfill swarm's J varies",
                    ("batch_rule", "controls.self_replay", "controls.seeds"),
                )
            )
        if self.eval_every and self.eval_questions * len(self.tasks) > MAX_EVAL_QUESTIONS:
            rules.append(
                ConfigError(
                    "eval_questions",
                    f"{self.eval_questions} questions of each of {len(self.tasks)} tasks make "
                    f"{self.eval_questions * len(self.tasks)}; an evaluation holds at most {MAX_EVAL_QUESTIONS}",
                    ("eval_questions", "tasks", "eval_every"),
                )
            )
        running = self.control_kinds()  # none: nothing to be the headline's reference
        if controls.reference and running and controls.reference not in running:
            kinds = ("isolated", "filtered", "self_replay", "over_generation", "seeds")
            rules.append(
                ConfigError(
                    "controls.reference",
                    f"the reference control ({controls.reference}) must be one the campaign runs",
                    ("controls.reference", *(f"controls.{kind}" for kind in kinds)),
                )
            )
        return rules

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, data: Any) -> CampaignConfig:
        """Decode settings (a dict, or JSON text/bytes) against the declarations: types, bounds,
        choices and unknown settings, the ``grpo`` dict's included (the rules between settings
        are :meth:`validate`'s). The ConfigError raised names the first problem and carries all."""
        try:
            raw = msgspec.json.decode(data) if isinstance(data, str | bytes) else data
        except msgspec.DecodeError as error:
            raise ConfigError("config", f"not valid JSON: {error}") from None
        try:
            config = msgspec.convert(raw, cls, strict=True)
        except msgspec.ValidationError as error:
            path, what = validation.describe(error)
            config, refusal = None, ConfigError(path or "config", what)
        problems = (
            [ConfigError(*problem) for problem in setting_problems(SETTINGS, raw)]
            if isinstance(raw, dict)
            else []
        )
        if config is not None and not problems:
            return config
        problems = problems or [refusal]
        problems[0].problems = problems
        raise problems[0]


# Every setting by path (controls.seeds; grpo.eps_high: GRPOConfig's fields, which a campaign
# may set in its ``grpo`` dict), read from the declarations (worker/shared/declaration.py).
SETTINGS = {
    **{path: setting for path, setting in declared(CampaignConfig).items() if path != "grpo"},
    **declared(GRPOConfig, "grpo."),
}
GRPO_DEFAULTS = GRPOConfig().to_json()


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
        # Held-out accuracy every 10 rounds on 32 questions per task: 64 of each (the default)
        # cost a node 8.7 % (tiny-1m) and 10.4 % (tiny-5m) of its time, 32 cost 3.4 % and 3.7 %
        # (bench/eval_cost.py, one thread, 2-core machine, 2026-12-07).
        eval_questions=32,
    )
    return CampaignConfig.from_json({**base.to_json(), **overrides}).validate()


def sapo_table_config(**overrides: Any) -> CampaignConfig:
    """The `sapo-table` preset: the paper's shape (G = 8, 8 questions, 4 local / 4 external), 4
    independent swarms and 4 seeds of each control: the smallest design whose exact permutation
    test over swarms and seeds can reach p < 0.05 (2 / C(8, 4) = 0.029; 3 vs 3 cannot: 0.1)."""
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
        # 4 seeds per control against 4 independent swarms (issue #47): a verdict is reachable.
        controls=ControlsConfig(seeds=4, self_replay=True, over_generation=True, reference="isolated"),
        replicates=4,
    )
    return CampaignConfig.from_json({**base.to_json(), **overrides}).validate()


def cpu_study_config(**overrides: Any) -> CampaignConfig:
    """The `cpu-study` preset: the CPU study's settings as a campaign (docs/experiments/README.md,
    studies v2 to v4, and the heterogeneous study): tiny-1m on the cpu tasks, B = G = 8, 4/4, 16
    new tokens, 45 rounds, the default pool window; 5 independent swarms against 5 seeds of the
    isolated 8/0, the paper's reference (the platform's validation campaign, issue #50). The
    lab's studies run the same rounds and tokens (config.CPU_STUDY_ROUNDS, CPU_STUDY_MAX_NEW_TOKENS)."""
    base = CampaignConfig(
        tiers=["tiny-1m"],
        group_size=8,
        questions_per_round=8,
        num_local=4,
        num_external=4,
        rounds=CPU_STUDY_ROUNDS,
        max_new_tokens=CPU_STUDY_MAX_NEW_TOKENS,
        controls=ControlsConfig(seeds=5, filtered=False, reference="isolated"),
        replicates=5,
        # held-out accuracy at rounds 15, 30 and 45 on 64 questions per task, as study v4's
        eval_every=15,
    )
    return CampaignConfig.from_json({**base.to_json(), **overrides}).validate()


CAMPAIGN_PRESETS = {
    "cpu-demo": cpu_demo_config,
    "sapo-table": sapo_table_config,
    "cpu-study": cpu_study_config,
}

if __name__ == "__main__":  # docs/web.md's reference of every setting
    print(settings_table(SETTINGS), end="")
