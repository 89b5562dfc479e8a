"""The settings of one node's learner and round loop, shared by the engine (which runs them),
the campaign config (which derives them) and the coordinator (which validates them).

Names follow TRL's GRPOConfig where the idea is the same (``num_iterations`` = mu,
``epsilon``/``epsilon_high`` as ``eps_low``/``eps_high``, ``scale_rewards``,
``mask_truncated_completions``).
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from typing import Annotated, Literal

try:
    from msgspec import Meta
except ImportError:  # the GPU machine's bare Python (bench/gpu_check.py's learner parts): the
    # bounds are declarations only there; the campaign config that checks them needs msgspec.

    class Meta:  # type: ignore[no-redef]
        def __init__(self, **constraints: object) -> None:
            self.__dict__.update(constraints)


from worker.shared.rules import grpo_rules, rules_of

# Rollouts a pool's draw reaches: a campaign's default, and the simulator's and the studies'.
DEFAULT_POOL_WINDOW = 256

# TRL's vllm_importance_sampling_mode values (worker/engine/loss.py computes them).
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

# Fine-tuning Adam's learning rate: the tiers' defaults are 1e-5 (Qwen) to 1e-4 (tiny); 1e-2 is
# 100x the largest and 5x the rate the tiny tiers are pretrained from scratch at
# (worker/engine/tiny.py: 2e-3). Adam moves every weight by about lr per step, so at 1e-2 a
# weight of the usual scale (0.02) changes by half in one step: more is a typo (1e6 was stored).
MAX_LEARNING_RATE = 1e-2
# Importance-sampling caps: TRL's default is 3 (a token's weight at most 3x); 100 is as good as
# no cap, which is what an organizer wanting none means.
MAX_CLIP = 100.0


# The bounds of a campaign's GRPO settings (the ``grpo`` dict), each defended in its description.
Rate = Annotated[
    float,
    Meta(
        gt=0,
        le=MAX_LEARNING_RATE,
        title="Learning rate",
        description="Adam's; a campaign that leaves it out gets each tier's default (1e-4 for the "
        "tiny tiers, 1e-5 for Qwen). At most 1e-2: 100x the largest default, more than the tiny "
        "tiers are pretrained at; Adam moves each weight by about this much per step",
    ),
]
Beta = Annotated[
    float, Meta(ge=0, lt=1, description="Adam's moment decay: below 1, or the moments never forget")
]


@dataclass
class GRPOConfig:
    learning_rate: Rate = 1e-5  # the reference code's Adam lr for Qwen2.5-0.5B
    adam_betas: tuple[Beta, Beta] = (0.9, 0.999)
    weight_decay: Annotated[
        float,
        Meta(
            ge=0, le=1, description="AdamW's decoupled decay (lr x this per step); 1 is 100x the usual 0.01"
        ),
    ] = 0.0
    eps_low: Annotated[
        float,
        Meta(
            ge=0,
            le=0.99,
            title="Clip ε low",
            description="PPO-style clip of the probability ratio below 1 - ε low (default 0.2); "
            "below 1, or the lower clip is gone",
        ),
    ] = 0.2
    eps_high: Annotated[
        float,
        Meta(
            ge=0,
            le=10,
            title="Clip ε high",
            description="clip above 1 + ε high, at least ε low (default 0.28, DAPO's clip-higher); "
            "at 10 a ratio of 11 passes, as good as unclipped",
        ),
    ] = 0.28
    # KL coefficient; > 0 keeps a frozen copy of the initial model as reference
    beta: Annotated[
        float,
        Meta(
            ge=0,
            le=1,
            description="KL coefficient (TRL's was 0.04); above 1 the KL term outweighs advantages of about ±1",
        ),
    ] = 0.0
    num_iterations: Annotated[
        int,
        Meta(
            ge=1,
            le=16,
            title="GRPO iterations per batch (μ)",
            description="optimizer passes over each round's batch (default 1); 16 passes over one "
            "batch is far past where its clipped ratios stop it from teaching anything",
        ),
    ] = 1
    max_grad_norm: Annotated[
        float,
        Meta(gt=0, le=1000, description="gradient clipping norm (default 1); 1000 is as good as no clipping"),
    ] = 1.0
    # the sampling temperature; logits are divided by it when scoring
    temperature: Annotated[
        float,
        Meta(
            ge=0.01,
            le=10,
            title="Sampling temperature",
            description="of the completions (default 1.0): lower is less varied, fewer groups with "
            "an advantage; below 0.01 sampling is greedy (a group's G completions are the same, "
            "no advantage), at 10 it is noise",
        ),
    ] = 1.0
    scale_rewards: Literal["group", "none"] = "group"  # "group" (GRPO) or "none" (Dr. GRPO)
    mask_truncated_completions: bool = False  # truncated completions count for nothing when True
    # at most this many sequences per forward pass (memory may allow fewer)
    micro_batch_size: Annotated[
        int,
        Meta(ge=1, le=4096, description="sequences per forward pass at most; 4096 = G x B at their bounds"),
    ] = 32
    # "auto": on when the device's memory needs it (worker/engine/memory.py); "on"; "off"
    gradient_checkpointing: Literal["auto", "on", "off"] = "auto"
    # Sampler/learner mismatch (TRL's names): samples that carry the sampler's log-probs (vLLM's)
    # are weighted by min(exp(old_logp - sampler_logp), clip_max); see worker/engine/loss.py.
    # TRL 1.16 defaults to "sequence_mask"; this truncates per token (TRL's original definition).
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: Literal[IS_MODES] = "token_truncate"
    vllm_importance_sampling_clip_max: Annotated[
        float,
        Meta(gt=0, le=MAX_CLIP, description="cap of a sampled token's weight min(exp(old - sampler), cap)"),
    ] = 3.0
    # Off-policy external rollouts (issue #18, opt-in): an external sample that carries its
    # generator's per-token log-probs (``TrainSample.behaviour_logp``; the in-process simulator
    # only) is weighted per token by min(exp(old_logp - behaviour_logp), clip_max): truncated
    # importance sampling from the generator's policy to this one (worker/engine/loss.py).
    external_importance_sampling_correction: Annotated[
        bool,
        Meta(
            title="Correct external rollouts for being off-policy",
            description="each same-tier external token weighted by min(π_receiver / π_generator, 3), "
            "truncated importance sampling; workers then share their completions' token ids and "
            "log-probs (larger records, workers of this version or later)",
        ),
    ] = False
    external_importance_sampling_clip_max: Annotated[
        float,
        Meta(
            gt=0, le=MAX_CLIP, description="cap of an external token's weight min(exp(old - generator), cap)"
        ),
    ] = 3.0

    def __post_init__(self) -> None:
        """What the engine cannot run without (direct construction: the engine, research, tests);
        a campaign's tighter bounds are the fields' declarations."""
        self.adam_betas = tuple(self.adam_betas)
        if self.num_iterations < 1:
            raise ValueError("num_iterations must be >= 1")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ValueError("need 0 <= eps_low < 1 and eps_high >= 0")
        if broken := grpo_rules(self.eps_low, self.eps_high):
            raise ValueError(f"{broken[0].setting}: {broken[0].message}")
        if not self.learning_rate >= 0:
            raise ValueError("learning_rate must be >= 0")
        if self.scale_rewards not in ("group", "none"):
            raise ValueError("scale_rewards must be 'group' or 'none'")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 (GRPO samples)")
        if self.micro_batch_size < 1:
            raise ValueError("micro_batch_size must be >= 1")
        if self.gradient_checkpointing not in ("auto", "on", "off"):
            raise ValueError("gradient_checkpointing must be 'auto', 'on' or 'off'")
        if self.vllm_importance_sampling_mode not in IS_MODES:
            raise ValueError(f"vllm_importance_sampling_mode must be one of {', '.join(IS_MODES)}")
        if not self.vllm_importance_sampling_clip_max > 0:
            raise ValueError("vllm_importance_sampling_clip_max must be > 0")
        if not self.external_importance_sampling_clip_max > 0:
            raise ValueError("external_importance_sampling_clip_max must be > 0")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RoundDefaults:
    """The default of each setting that a campaign and a node's AgentConfig both have, given
    once: the campaign declares their bounds and help (worker/shared/campaign.py), a node runs
    them (AgentConfig), and both take their defaults from :data:`ROUND`."""

    questions_per_round: int = 8  # B
    group_size: int = 8  # G
    num_local: int = 4  # I
    num_external: int = 4  # J: the paper's 4/4
    local_strategy: str = "nonzero_advantage"
    external_strategy: str = "nonzero_advantage"
    batch_rule: str = "fixed"
    decay_rounds: int = 30
    max_new_tokens: int = 24
    system_prompt: str = "default"
    format_weight: float = 0.0
    seed: int = 0


ROUND = RoundDefaults()

# The CPU study's scale, where it departs from a campaign's defaults (docs/experiments: studies v2
# to v4 and the heterogeneous study ran it): the `cpu-study` campaign preset and the lab's studies
# read it; 45 rounds of 16 new tokens on tiny-1m (docs/experiments/README.md, "Budget").
CPU_STUDY_ROUNDS = 45
CPU_STUDY_MAX_NEW_TOKENS = 16


@dataclass
class AgentConfig:
    """What one node runs each round: a campaign's settings (CampaignConfig.agent_config) with
    an arm's I, J, strategies and batch rule (worker/shared/arms.py, Arm.apply). Its rules
    between settings are worker/shared/rules.py's, the campaign's too."""

    questions_per_round: int = ROUND.questions_per_round  # B: questions generated (and shared) per round
    group_size: int = ROUND.group_size  # G: completions per question
    num_local: int = ROUND.num_local  # I: own rollouts trained on per round
    num_external: int = ROUND.num_external  # J: others' rollouts trained on per round
    local_strategy: str = ROUND.local_strategy
    external_strategy: str = ROUND.external_strategy
    # Where the J rollouts come from (worker/shared/arms.py): "pool" (other agents, through the
    # transport) or "self" (this agent's own last self_window groups, this round's picks excluded)
    replay: str = "pool"
    self_window: int = 0
    # Over-generation (DAPO's dynamic sampling): when > questions_per_round, generate more
    # questions after the first B until I groups qualify for the local strategy or this many
    # questions were generated; 0 = B questions only
    max_questions: int = 0
    # How the round's batch is assembled (worker/shared/sampling.py, batch_request; the rules
    # and their formulas: worker/shared/arms.py): "fixed" (I own + J external), "backfill"
    # (every own group the local strategy accepts, at most I, then external ones up to B groups
    # in all, at most J) or "decay" (J falls linearly to 0 over decay_rounds rounds, its slots
    # going to own groups)
    batch_rule: str = ROUND.batch_rule
    decay_rounds: int = ROUND.decay_rounds  # rounds over which "decay" takes J to 0
    max_new_tokens: int = ROUND.max_new_tokens
    system_prompt: str = ROUND.system_prompt
    format_weight: float = ROUND.format_weight
    seed: int = ROUND.seed
    grpo: GRPOConfig = field(default_factory=GRPOConfig)

    def __post_init__(self) -> None:
        if isinstance(self.grpo, dict):
            self.grpo = GRPOConfig(**self.grpo)
        if self.group_size < 2:
            raise ValueError("GRPO needs a group size G >= 2")
        broken = rules_of(self)
        if broken:
            raise ValueError(broken[0].message)

    def to_json(self) -> dict:
        return asdict(self)


def stable_seed(*parts: object) -> int:
    """A 31-bit seed from any parts, equal across processes (unlike hash())."""
    return zlib.crc32(":".join(map(str, parts)).encode()) & 0x7FFFFFFF
