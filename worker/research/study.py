"""The SAPO table at CPU scale (issues #8 and #18): the study's design, settings and results file.

Does sharing rollouts beat training alone, or is 4/4's gain batch curation and reuse of
slightly older data? The study runs the SAPO paper's arms (8/0, 6/2, 4/4, 2/6; I local / J
external rollouts trained on per round, zero-advantage groups dropped as in the paper's SAPO
arms), 4/4-unfiltered, the sanity arm 8/0-filtered (it cannot differ much from 8/0: with B = I
it can only delete groups that gave no gradient), and the two controls of issue #18
(worker/shared/arms.py): **4/4-self** (4 own + 4 from the agent's *own* recent window: same
batch, same staleness, no other agent) and **8/0-dyn** (over-generation until 8 informative
groups, at most 16 questions: same batch, more generation). N agents, 8 questions per agent per
round, in the in-process simulator (worker/research/simulate.py).

**Pre-registered** (fixed here before the study's data): the primary comparison
4/4 - 4/4-self (sharing against self-replay at the same curation and staleness) and two
secondary ones, 4/4 - 8/0-dyn (sharing against curation by over-generation) and
4/4-self - 8/0 (curation plus reuse against the paper's baseline). Holm's adjustment runs over
this family of three only (:data:`FAMILY`); every other comparison of the report is
exploratory and shown unadjusted.

A **cell** is one (arm, seed). The seed fixes every agent's question stream and generation
seeds, and is the same across arms, so the arms of one seed see the same questions in round 1
and differences between arms pair by seed. The :data:`REQUIRED_ARMS` run on every seed; the
others on the first ``other_seeds`` seeds (all when None).

Results (``docs/experiments/sapo-table-cpu.json`` by default)::

    {"config": {settings, "seeds": [...], "rounds": R, "elapsed_seconds": ..., "versions": ...},
     "arms":   {"8/0": [cumulative reward of seed s for s in config.seeds], ...},
     "curves": {"8/0": {"<seed>": [per-round mean reward over the agents, R values]}, ...},
     "mechanism": {"8/0": {"<seed>": {metric: [per-round mean over the agents, R values]}}, ...}}

``arms[a][i]`` belongs to ``config["seeds"][i]`` and is null while that cell has not run.
``mechanism`` holds the per-round curves of :data:`MECHANISM_METRICS` (absent in files of the
old design, issue #8).

**Cumulative reward** of a cell = sum over rounds r of the per-round mean reward
m_r = (1/N) sum_n reward_{n,r}, where reward_{n,r} is agent n's mean verified reward over its
own first B x G completions of round r (8/0-dyn's extra questions excluded, so every arm is
measured on the same questions). This is the paper's measure (its 561.79 for 8/0 over 2000
rounds is 0.28 per round: a mean over agents, not a sum).

``swarm-worker study`` runs it (worker/research/study_runner.py); ``swarm-worker study-report``
analyses the results file (worker/research/study_analysis.py) and writes the markdown report
and its PNG plots (worker/research/study_report.py; matplotlib, the ``study`` extra).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from worker.shared.arms import Arm, pool_share_window, sapo_table_arms

# The paper's Table (8 agents, Qwen2.5-0.5B, 2000 rounds, G = 8, one run).
PAPER_CUMULATIVE = {"8/0": 561.79, "6/2": 854.43, "4/4": 1093.31, "2/6": 945.87}
QUESTIONS_PER_ROUND = 8  # the (and paper's) B; the arms are named for I + J = 8
ARM_NAMES = [arm.name for arm in sapo_table_arms(QUESTIONS_PER_ROUND)]
ARM_ORDER = ["8/0", "6/2", "4/4", "2/6", "8/0-filtered", "4/4-unfiltered", "4/4-self", "8/0-dyn"]
# At full strength (every seed); the others run on the first StudyConfig.other_seeds seeds.
REQUIRED_ARMS = ["8/0", "4/4", "4/4-self", "8/0-dyn"]
# What `swarm-worker study` runs by default: the required arms and the paper's 6/2 and 2/6 (the
# budget, docs/experiments/README.md); 8/0-filtered and 4/4-unfiltered with --arms.
DEFAULT_ARMS = ["8/0", "6/2", "4/4", "2/6", "4/4-self", "8/0-dyn"]
BASELINE = "8/0"
# Pre-registered before the data (issue #18): (a, b) means a - b.
PRIMARY = ("4/4", "4/4-self")  # sharing vs self-replay: same curation, batch and staleness
SECONDARY = [
    ("4/4", "8/0-dyn"),  # sharing vs curation by over-generation (same batch, more generation)
    ("4/4-self", "8/0"),  # curation + reuse vs the paper's baseline
]
FAMILY = [PRIMARY, *SECONDARY]  # Holm's adjustment runs over these only
# Exploratory (unadjusted p): the paper's table and the controls of issue #8.
EXPLORATORY = [
    ("4/4", "8/0"),
    ("6/2", "8/0"),
    ("2/6", "8/0"),
    ("8/0-dyn", "8/0"),
    ("4/4", "8/0-filtered"),
    ("8/0-filtered", "8/0"),
    ("4/4", "4/4-unfiltered"),
    ("4/4-unfiltered", "8/0"),
]
COMPARISONS = FAMILY + EXPLORATORY
# The old design's (issue #8) primary and comparisons (its Holm family: all of them), to read
# its results file as its report did.
OLD_PRIMARY = ("4/4", "8/0-filtered")
OLD_COMPARISONS = [
    OLD_PRIMARY,
    ("4/4", "4/4-unfiltered"),
    ("6/2", "8/0-filtered"),
    ("2/6", "8/0-filtered"),
    ("4/4", "8/0"),
    ("6/2", "8/0"),
    ("2/6", "8/0"),
    ("8/0-filtered", "8/0"),
    ("4/4-unfiltered", "8/0"),
]
# Per-round means over the agents kept for each cell: what shows the mechanism (agent metrics,
# worker/engine/agent.py and trainer.py).
MECHANISM_METRICS = [
    "batch/informative_groups",
    "batch/local_used",
    "batch/external_used",
    "batch/external_from_others",
    "batch/external_age",
    "advantages/local_abs_mean",
    "advantages/external_abs_mean",
    "batch/local_reward_std",
    "batch/external_reward_std",
    "frac_reward_zero_std",
    "grad_norm",
    "grad_norm_clipped",
    "generation/questions",
    "completions/mean_length",
]
DEFAULT_OUT = Path("docs/experiments/sapo-table-cpu.json")
QUICK_OUT = Path(tempfile.gettempdir()) / "swarm-study-quick" / "sapo-table-cpu.json"
CUMULATIVE_DEFINITION = (
    "sum over rounds of the per-round mean reward over the agents (each agent's reward: mean verified "
    "reward of its own first B x G completions of the round); the SAPO paper's measure"
)
CURVE_DEFINITION = "per-round mean reward over the agents of one cell (arm, seed), rounds 1..R"

# Chosen from a measurement on the 2-core development machine (docs/experiments/README.md,
# "Budget"): the four required arms on 10 seeds and the four others on 6, 8 agents, 45 rounds.
# 10 seeds: the exact sign-flip test's smallest p is 2/2^n, and Holm over the family of 3
# multiplies the smallest p by 3, so n >= 7 is needed before anything can be significant; 10
# tolerates one contrary seed of half the others' size (p = 4/1024, Holm 0.012).
DEFAULT_ROUNDS = 45
DEFAULT_SEEDS = 10
DEFAULT_OTHER_SEEDS = 6


class StudyError(RuntimeError):
    """A study that cannot run or resume as asked (e.g. a results file of other settings)."""


@dataclass
class StudyConfig:
    """The settings of a study; all but ``seeds``/``arms`` must match to resume a results file."""

    agents: int = 8
    rounds: int = DEFAULT_ROUNDS
    seeds: list[int] = field(default_factory=lambda: list(range(DEFAULT_SEEDS)))
    group_size: int = 8  # G
    max_new_tokens: int = 16
    tier: str = "tiny-1m"
    tasks: str = "cpu"  # task preset (worker/shared/questions.py)
    learning_rate: float | None = None  # None: the tier's
    num_iterations: int = 1
    temperature: float = 1.0
    beta: float = 0.0
    pool_window: int = 256
    arms: list[str] = field(default_factory=lambda: list(DEFAULT_ARMS))
    quick: bool = False
    questions_per_round: int = QUESTIONS_PER_ROUND
    # seeds of the arms outside REQUIRED_ARMS: the first other_seeds of ``seeds`` (None: all)
    other_seeds: int | None = DEFAULT_OTHER_SEEDS
    # 4/4-self's window in groups: the pool's window over the agents (same age of rollouts)
    self_window: int | None = None
    max_questions: int = 2 * QUESTIONS_PER_ROUND  # 8/0-dyn's cap

    @classmethod
    def quick_config(cls) -> StudyConfig:
        """A smoke test: 2 agents, 2 rounds, 2 seeds, G = 2, 4 tokens (about 10-20 s)."""
        return cls(
            agents=2,
            rounds=2,
            seeds=[0, 1],
            group_size=2,
            max_new_tokens=4,
            quick=True,
            other_seeds=None,
            arms=list(ARM_ORDER),
        )

    def __post_init__(self) -> None:
        unknown = [name for name in self.arms if name not in ARM_NAMES]
        if unknown:
            raise StudyError(f"unknown arms {unknown}; arms: {', '.join(ARM_NAMES)}")
        if self.questions_per_round != QUESTIONS_PER_ROUND:
            # 8/0-dyn generates up to max_questions; the arms' names and batches are for B = 8
            raise StudyError("the study's arms are defined for 8 questions per agent per round")
        if self.self_window is None:
            self.self_window = pool_share_window(self.pool_window, self.agents)
        if self.max_questions <= self.questions_per_round:
            raise StudyError(f"max_questions must exceed {self.questions_per_round} (8/0-dyn over-generates)")
        if self.other_seeds is not None and self.other_seeds < 1:
            raise StudyError("other_seeds must be >= 1 (or None: every seed)")
        if self.learning_rate is None:
            from worker.shared.tiers import tier

            self.learning_rate = tier(self.tier).learning_rate
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise StudyError(f"seeds must be distinct and at least one, got {self.seeds}")

    def settings(self) -> dict[str, Any]:
        """What defines the experiment: a results file resumes only with equal settings."""
        data = asdict(self)
        del data["seeds"], data["arms"]
        return data

    def seeds_of(self, arm: str) -> list[int]:
        """The seeds ``arm`` runs on: all for the required arms, the first other_seeds otherwise."""
        if arm in REQUIRED_ARMS or self.other_seeds is None:
            return list(self.seeds)
        return list(self.seeds[: self.other_seeds])

    def agent_rounds(self) -> int:
        return sum(len(self.seeds_of(a)) for a in self.arms) * self.agents * self.rounds


def arm_by_name(self_window: int | None = None, max_questions: int | None = None) -> dict[str, Arm]:
    """The study's arms by name (4/4-self's window and 8/0-dyn's cap as the study sets them)."""
    from worker.shared.arms import DEFAULT_SELF_WINDOW, over_generation_arm

    arms = {arm.name: arm for arm in sapo_table_arms(QUESTIONS_PER_ROUND, self_window or DEFAULT_SELF_WINDOW)}
    if max_questions is not None:
        arms["8/0-dyn"] = over_generation_arm(QUESTIONS_PER_ROUND, max_questions)
    return arms


def campaign_overrides(arm_name: str) -> dict[str, Any]:
    """The ``sapo-table`` campaign preset's overrides that run a study arm on the platform.

    A campaign runs one swarm arm (I/J, strategies) plus, per tier and seed, its isolated
    controls (worker.shared.campaign.ControlsConfig): ``isolated`` (8/0), ``filtered``
    (8/0-filtered), ``self`` (4/4-self) and ``dyn`` (8/0-dyn), all four on in the preset. So
    the 4/4 campaign with its controls gives 4/4, 8/0, 8/0-filtered, 4/4-self and 8/0-dyn;
    6/2, 2/6 and 4/4-unfiltered are one campaign each (controls off, since the 4/4 campaign
    already ran them).
    """
    arm = arm_by_name()[arm_name]
    if not arm.shares:
        controls = {"isolated": True, "filtered": True, "self_replay": True, "over_generation": True}
        return {"num_local": 4, "num_external": 4, "controls": controls}
    overrides: dict[str, Any] = {
        "num_local": arm.num_local,
        "num_external": arm.num_external,
        "local_strategy": arm.local_strategy,
        "external_strategy": arm.external_strategy,
    }
    if arm.name != "4/4":
        overrides["controls"] = {"isolated": False, "filtered": False}
    return overrides


def seed_key(seed: int) -> str:
    """A seed as the key of its curve in the results file (JSON keys are strings)."""
    return str(seed)
