"""The SAPO table at CPU scale (issues #8, #18, #29 and #49): the study's design, settings and results file.

Long because it holds the pre-registration of four designs (v1 to v4), each fixed in a commit
before its data, and the one settings class the runner, the analysis and the CLI share.

**Design v4 (issue #49, the default; pre-registered here before any of its data).** v3 answered
with comparisons that each changed several things at once. v4 adds one control per question,
each differing from the arm it controls in one thing (worker/shared/arms.py), at v3's settings
(tiny-1m, 8 agents, 45 rounds, B = 8, G = 8, 16 tokens, learning rate 1e-4, pool window 256) on
v3's 10 seeds, paired by seed with v3's cells:

* ``4/0@B4``: 4/4@B4 without its J (generate 4, train on the informative ones of those 4);
* ``4/4@B4-age``: 4/4@B4 with a pool window of 128 rollouts, the 4 rounds that 4/4's 256 span
  (4/4@B4 generates half as much, so 256 rollouts spanned 8 rounds: its external groups were 3.15
  rounds old against 4/4's 1.42 in v3). Predicted age, before the data: about 1.4 rounds;
* ``backfill-self``: backfill filling from the agent's own last 20 groups instead of the pool.
  The window is fixed by arithmetic, before the data: backfill trains on every informative own
  group of the round, so the round's remaining own groups are uninformative and the fill comes
  from earlier rounds; with W own groups in the window (8 a round) the candidates are the
  informative groups of the last (W - 8) / 8 rounds, and W = 20 gives an expected age of
  1 + 4/12 = 1.33 rounds, W = 24 gives 1.5, against backfill's 1.39 in v3 (a pool also offers
  other agents' groups of the same round, which no self-replay can). The measured ages are
  reported beside the comparison;
* ``4/4-is`` on all 10 seeds (v3 ran 6: those 6 were seen, as exploratory data, before this
  design; the report says so beside the row).

**Pre-registered primary family (v4), Holm over these four only** (:data:`V4_FAMILY`), on
cumulative training reward (v3's measure), two-sided exact sign-flip test over 10 seeds:

1. ``4/4@B4 - 4/0@B4``: does sharing add reward at matched generation?
2. ``4/4@B4-age - 8/0``: with its pool as young in rounds as 4/4's, does the paper's 4/4 still
   lose to 8/0 (is v3's primary loss staleness)?
3. ``backfill - backfill-self``: is backfill's gain other agents' data, or filling from any
   recent informative groups?
4. ``4/4-is - 8/0``: confirm or drop v3's exploratory importance-correction gain.

**Pre-registered held-out family (v4), Holm over its four only** (:data:`V4_HELD_OUT_FAMILY`):
the same four comparisons on held-out accuracy (exact-correct share) at the last point (round
45), lab/swarm_lab/held_out.py: a fixed evaluation set of 64 questions per task per seed from
seeds no training stream reaches, greedy answers, at rounds 0, 15, 30 and 45 of every cell; the
report says, per comparison, whether its sign on held-out accuracy agrees with its sign on
training reward. Held-out graded reward is reported beside it, not tested.

**Exploratory (unadjusted; hypotheses, never findings)** (:data:`V4_EXPLORATORY`): 4/4@B4-age -
4/4@B4 (the staleness effect itself), 4/0@B4 - 8/0 (half the generation), backfill-self - 8/0,
4/4@B4 - 8/0 and backfill - 8/0 (v3's family, re-measured), the windows of every comparison; and
the mechanism: divergence between agents' policies and drift from the initial one (mean KL on
the evaluation prompts, held_out.py), the importance weights of 4/4-is
(``sampling/external_importance_sampling_ratio/*``), the informative share of own and external
groups per round.

**Cells.** Every v4 arm runs on every seed (70 cells), each with its held-out evaluation. 8/0,
4/4@B4, backfill and 4/4-is are reruns of v3's cells (needed for held-out accuracy, which v3
did not keep): the simulator is deterministic, so each rerun's training-reward curve must equal
v3's to the last digit, and the report checks every one. New cells run first (4/0@B4,
4/4@B4-age, backfill-self, then 4/4-is on seeds 6-9: the primary family's training reward is
answerable from them and v3's cells), then the reruns. Every cell records its provenance (the
commit, a hash of any uncommitted diff, the model's SHA-256, start and end; kept across resumes).

**Design v3 (issue #29, ``--design v3``; pre-registered here before any of its data).** The v2
study (below) answered a different question from the paper's: every arm generated B = 8
questions a round, so its 4/4 trained on 4 of its own 8 and threw the rest away. In the SAPO
reference code (Gensyn's rl-swarm reasoning-gym experiment) I is the number of questions a node
*generates* (``num_train_samples``) and J the number of groups it takes from the swarm
(``num_transplant_trees``). v3 therefore runs, with B explicit per arm (worker/shared/arms.py):

* ``4/4@B4``: generate 4, train on them (filtered) plus 4 external: the paper's 4/4 under the
  paper's semantics, at half of 8/0's generation;
* ``backfill``: generate 8, train on every informative own group, then fill the batch to 8
  groups with informative external ones (J = 8 minus the informative own groups, per round);
* ``8/0``, ``8/0-dyn``, ``4/4`` (generate 8, train on 4 + 4: the v2 semantics, unchanged name
  and behaviour) and ``4/4-self``, kept so that v2's results can be compared;
* exploratory: ``4/4-is`` (4/4 with the truncated importance-sampling correction of external
  rollouts, which the engine supports: ``GRPOConfig.external_importance_sampling_correction``)
  and ``4/4-decay`` (the schedule that follows v2's crossover: J falls linearly from 4 to 0 by
  round ``decay_rounds`` = 30, its slots going to own groups).

**Pre-registered (v3), fixed before the data:** primary ``4/4@B4 - 8/0`` (the paper's
comparison under the paper's semantics); secondaries ``backfill - 8/0`` and
``backfill - 8/0-dyn`` (sharing as backfill against the paper's baseline, and against curation
by over-generation); Holm's adjustment over these three only (:data:`V3_FAMILY`). Exploratory,
unadjusted: the paired differences per window (thirds of the horizon: rounds 1..R/3, ..,
2R/3..R) of the family's comparisons, 4/4-is against 4/4 and 8/0, 4/4-decay against 8/0 and
4/4, and the v2 comparisons (:data:`V3_EXPLORATORY`). Compute is recorded per agent-round
(generated completions and tokens, trained tokens: :data:`MECHANISM_METRICS`).

**Design v2 (issue #18; ``--design v2``, docs/experiments/sapo-table-cpu.json).** Does sharing
rollouts beat training alone, or is 4/4's gain batch curation and reuse of
slightly older data? The study runs the SAPO paper's arms (8/0, 6/2, 4/4, 2/6; I local / J
external rollouts trained on per round, zero-advantage groups dropped as in the paper's SAPO
arms), 4/4-unfiltered, the sanity arm 8/0-filtered (it cannot differ much from 8/0: with B = I
it can only delete groups that gave no gradient), and the two controls of issue #18
(worker/shared/arms.py): **4/4-self** (4 own + 4 from the agent's *own* recent window: same
batch, same staleness, no other agent) and **8/0-dyn** (over-generation until 8 informative
groups, at most 16 questions: same batch, more generation). N agents, 8 questions per agent per
round, in the in-process simulator (worker/research/simulate.py).

**Pre-registered (v2)** (fixed here before that study's data): the primary comparison
4/4 - 4/4-self (sharing against self-replay at the same curation and staleness) and two
secondary ones, 4/4 - 8/0-dyn (sharing against curation by over-generation) and
4/4-self - 8/0 (curation plus reuse against the paper's baseline). Holm's adjustment runs over
this family of three only (:data:`FAMILY`); every other comparison of the report is
exploratory and shown unadjusted.

A **cell** is one (arm, seed). The seed fixes every agent's question stream and generation
seeds, and is the same across arms, so the arms of one seed see the same questions in round 1
and differences between arms pair by seed. The required arms (:data:`V3_REQUIRED_ARMS`; v2:
:data:`REQUIRED_ARMS`) run on every seed; the
others on the first ``other_seeds`` seeds (all when None).

Results (``docs/experiments/sapo-table-cpu-v3.json`` by default, v2's in
``docs/experiments/sapo-table-cpu.json``)::

    {"config": {settings, "seeds": [...], "rounds": R, "elapsed_seconds": ..., "versions": ...},
     "arms":   {"8/0": [cumulative reward of seed s for s in config.seeds], ...},
     "curves": {"8/0": {"<seed>": [per-round mean reward over the agents, R values]}, ...},
     "mechanism": {"8/0": {"<seed>": {metric: [per-round mean over the agents, R values]}}, ...}}

``arms[a][i]`` belongs to ``config["seeds"][i]`` and is null while that cell has not run.
``mechanism`` holds the per-round curves of :data:`MECHANISM_METRICS` (absent in files of the
old design, issue #8; v2's lack the compute metrics). A v3 file's config also records
``design`` ("v3"), every arm's B (``arm_questions``, and ``questions_per_round`` in each of
``arm_definitions``) and what each arm generates and trains on (``arm_semantics``).

**Cumulative reward** of a cell = sum over rounds r of the per-round mean reward
m_r = (1/N) sum_n reward_{n,r}, where reward_{n,r} is agent n's mean verified reward over its
own first B x G completions of round r (8/0-dyn's extra questions excluded, so every arm is
measured on the same questions). This is the paper's measure (its 561.79 for 8/0 over 2000
rounds is 0.28 per round: a mean over agents, not a sum).

``swarm-worker study`` runs it (lab/swarm_lab/study_runner.py); ``swarm-worker study-report``
writes v4's markdown report and its PNG plots (lab/swarm_lab/study_v4_report.py; matplotlib,
the ``study`` extra). The report generators of v1 to v3 are retired (issue #51): their reports
are the committed files beside their results (docs/experiments/).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from worker.shared.arms import (
    DEFAULT_DECAY_ROUNDS,
    Arm,
    pool_share_window,
    sapo_table_arms,
    study_v3_arms,
    study_v4_arms,
    with_questions,
)
from worker.shared.config import CPU_STUDY_MAX_NEW_TOKENS, CPU_STUDY_ROUNDS, DEFAULT_POOL_WINDOW, ROUND

# The paper's Table (8 agents, Qwen2.5-0.5B, 2000 rounds, G = 8, one run).
PAPER_CUMULATIVE = {"8/0": 561.79, "6/2": 854.43, "4/4": 1093.31, "2/6": 945.87}
# B of the arms that do not fix their own (``@B<n>``); the arms' I/J are named for I + J = 8
QUESTIONS_PER_ROUND = 8
BATCH = 8  # I + J of the table's arms (and backfill's target)
ARM_ORDER = [
    "8/0",
    "6/2",
    "4/4",
    "2/6",
    "8/0-filtered",
    "4/4-unfiltered",
    "4/4-self",
    "8/0-dyn",
    # issue #29 (design v3)
    "4/4@B4",
    "backfill",
    "4/4-decay",
    "4/4-is",
    # issue #49 (design v4)
    "4/0@B4",
    "4/4@B4-age",
    "backfill-self",
]
ARM_NAMES = list(ARM_ORDER)  # and any of them at another B: ``<name>@B<n>``
# v2 (issue #18): at full strength (every seed); the others run on the first other_seeds seeds.
REQUIRED_ARMS = ["8/0", "4/4", "4/4-self", "8/0-dyn"]
# What `swarm-worker study --design v2` runs by default: the required arms and the paper's 6/2
# and 2/6 (the budget, docs/experiments/README.md); 8/0-filtered and 4/4-unfiltered with --arms.
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

# --- design v3 (issue #29): pre-registered before any of its data -------------------------------
V3_PRIMARY = ("4/4@B4", "8/0")  # the paper's comparison under the paper's semantics (B = I)
V3_SECONDARY = [
    ("backfill", "8/0"),  # sharing as backfill vs the paper's baseline (same generation)
    ("backfill", "8/0-dyn"),  # backfill vs curation by over-generation (same batch, less generation)
]
V3_FAMILY = [V3_PRIMARY, *V3_SECONDARY]  # Holm's adjustment runs over these only
# Exploratory (unadjusted p); the windows (thirds of the horizon) of every comparison too.
V3_EXPLORATORY = [
    ("4/4", "8/0"),
    ("4/4@B4", "4/4"),
    ("backfill", "4/4"),
    ("4/4-is", "4/4"),
    ("4/4-is", "8/0"),
    ("4/4-decay", "8/0"),
    ("4/4-decay", "4/4"),
    ("8/0-dyn", "8/0"),
    ("4/4", "4/4-self"),
    ("4/4-self", "8/0"),
]
V3_COMPARISONS = V3_FAMILY + V3_EXPLORATORY
# At full strength (every seed): the primary's and the secondaries' arms; the others on the
# first other_seeds seeds.
V3_REQUIRED_ARMS = ["8/0", "4/4@B4", "backfill", "8/0-dyn"]
V3_DEFAULT_ARMS = ["8/0", "4/4", "4/4-self", "8/0-dyn", "4/4@B4", "backfill", "4/4-decay", "4/4-is"]
# --- design v4 (issue #49): pre-registered before any of its data -------------------------------
V4_FAMILY = [
    ("4/4@B4", "4/0@B4"),  # does sharing add reward at matched generation?
    ("4/4@B4-age", "8/0"),  # the paper's 4/4 with 4/4's pool age in rounds: is v3's loss staleness?
    ("backfill", "backfill-self"),  # is backfill's gain other agents' data?
    ("4/4-is", "8/0"),  # confirm or drop v3's exploratory importance-correction gain
]
V4_PRIMARY = V4_FAMILY[0]
# The same comparisons on held-out accuracy at the last point: a family of its own (Holm over 4).
V4_HELD_OUT_FAMILY = list(V4_FAMILY)
V4_EXPLORATORY = [
    ("4/4@B4-age", "4/4@B4"),
    ("4/0@B4", "8/0"),
    ("backfill-self", "8/0"),
    ("4/4@B4", "8/0"),
    ("backfill", "8/0"),
]
V4_COMPARISONS = V4_FAMILY + V4_EXPLORATORY
# Run order: the new cells first (the primary family's training reward is answerable from them and
# v3's cells), then the reruns of v3's cells with held-out evaluation.
V4_NEW_ARMS = ["4/0@B4", "4/4@B4-age", "backfill-self"]
V4_RERUN_ARMS = ["4/4-is", "8/0", "4/4@B4", "backfill"]
V4_DEFAULT_ARMS = V4_NEW_ARMS + V4_RERUN_ARMS
V4_SEEN_SEEDS = {"4/4-is": 6}  # v3 ran 4/4-is on its first 6 seeds: exploratory data seen before v4
V4_BACKFILL_SELF_WINDOW = 20  # own groups (the docstring's arithmetic: expected age 1.33 rounds)
V4_HELD_OUT_POINTS = [0, 15, 30, 45]  # rounds done; scaled to the horizon when rounds != 45
V4_HELD_OUT_PER_TASK = 64
# What --quick runs per design.
QUICK_ARMS = {"v2": ARM_ORDER[:8], "v3": ARM_ORDER[:12], "v4": V4_DEFAULT_ARMS}
WINDOWS = 3  # exploratory time course: the horizon in thirds
DESIGNS = ("v2", "v3", "v4")
DEFAULT_DESIGN = "v4"
# Per-round means over the agents kept for each cell: what shows the mechanism (agent metrics,
# worker/engine/agent.py and trainer.py).
MECHANISM_METRICS = [
    # what the round asked for under its batch rule (backfill and decay vary it per round)
    "batch/local_requested",
    "batch/external_requested",
    # compute (issue #29): generated and trained per agent-round
    "generation/completions",
    "generation/tokens",
    "train/completions",
    "train/tokens",
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
    # issue #49: the informative share by source, and the importance weights of 4/4-is
    "batch/local_informative",
    "batch/external_informative",
    "sampling/external_importance_sampling_ratio/mean",
    "sampling/external_importance_sampling_ratio/min",
    "sampling/external_importance_sampling_ratio/max",
    "sampling/external_importance_sampling_truncated",
    "sampling/external_logp_difference/mean",
]
V2_OUT = Path("docs/experiments/sapo-table-cpu.json")
V3_OUT = Path("docs/experiments/sapo-table-cpu-v3.json")
V4_OUT = Path("docs/experiments/sapo-table-cpu-v4.json")
DEFAULT_OUT = V4_OUT  # the default design's
DESIGN_OUT = {"v2": V2_OUT, "v3": V3_OUT, "v4": V4_OUT}
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
DEFAULT_SEEDS = 10
DEFAULT_OTHER_SEEDS = 6


class StudyError(RuntimeError):
    """A study that cannot run or resume as asked (e.g. a results file of other settings)."""


@dataclass
class StudyConfig:
    """The settings of a study; all but ``seeds``/``arms`` must match to resume a results file."""

    agents: int = 8
    rounds: int | None = None  # None: the CPU study's (config.CPU_STUDY_ROUNDS, 45)
    seeds: list[int] = field(default_factory=lambda: list(range(DEFAULT_SEEDS)))
    group_size: int = ROUND.group_size  # G
    max_new_tokens: int | None = None  # None: the CPU study's (config.CPU_STUDY_MAX_NEW_TOKENS, 16)
    tier: str = "tiny-1m"
    tasks: str = "cpu"  # task preset (worker/shared/questions.py)
    learning_rate: float | None = None  # None: the tier's
    num_iterations: int = 1
    temperature: float = 1.0
    beta: float = 0.0
    pool_window: int = DEFAULT_POOL_WINDOW
    arms: list[str] | None = None  # None: the design's default arms
    quick: bool = False
    # B of every arm that does not fix its own (``@B<n>``, e.g. 4/4@B4); any B >= 1 for which
    # each arm is valid (I <= B; 8/0-dyn's cap above B)
    questions_per_round: int = QUESTIONS_PER_ROUND
    # seeds of the arms outside the required ones: the first other_seeds of ``seeds`` (None: all)
    other_seeds: int | None = DEFAULT_OTHER_SEEDS
    # 4/4-self's window in groups: the pool's window over the agents (same age of rollouts)
    self_window: int | None = None
    max_questions: int | None = None  # 8/0-dyn's cap; None: 2 max(B, 8) (16 at B = 8)
    design: str = DEFAULT_DESIGN  # "v4" (issue #49), "v3" (issue #29) or "v2" (issue #18)
    decay_rounds: int = DEFAULT_DECAY_ROUNDS  # 4/4-decay's T (v3)
    backfill_self_window: int = V4_BACKFILL_SELF_WINDOW  # backfill-self's window in own groups (v4)
    # held-out evaluation (v4, lab/swarm_lab/held_out.py): rounds done at which every agent is
    # evaluated (None: the design's, scaled to the horizon) and questions per task
    held_out_points: list[int] | None = None
    held_out_per_task: int = V4_HELD_OUT_PER_TASK

    @classmethod
    def quick_config(cls, design: str = DEFAULT_DESIGN) -> StudyConfig:
        """A smoke test: 2 agents, 2 rounds, 2 seeds, G = 2, 4 tokens (about 10-20 s a cell)."""
        return cls(
            agents=2,
            rounds=2,
            seeds=[0, 1],
            group_size=2,
            max_new_tokens=4,
            quick=True,
            other_seeds=None,
            arms=list(QUICK_ARMS[design]),
            design=design,
            held_out_per_task=4,
        )

    def __post_init__(self) -> None:
        if self.rounds is None:
            self.rounds = CPU_STUDY_ROUNDS
        if self.max_new_tokens is None:
            self.max_new_tokens = CPU_STUDY_MAX_NEW_TOKENS
        if self.design not in DESIGNS:
            raise StudyError(f"unknown design {self.design!r}; designs: {', '.join(DESIGNS)}")
        if self.arms is None:
            self.arms = list({"v2": DEFAULT_ARMS, "v3": V3_DEFAULT_ARMS, "v4": V4_DEFAULT_ARMS}[self.design])
        if self.design == "v4" and self.held_out_points is None:
            self.held_out_points = sorted({round(p * self.rounds / 45) for p in V4_HELD_OUT_POINTS})
        if self.held_out_points and not all(0 <= p <= self.rounds for p in self.held_out_points):
            raise StudyError(f"held_out_points must lie in 0..{self.rounds}, got {self.held_out_points}")
        if self.held_out_per_task < 1:
            raise StudyError("held_out_per_task must be >= 1")
        if self.questions_per_round < 1:
            raise StudyError("questions_per_round (B) must be at least 1")
        if self.self_window is None:
            self.self_window = pool_share_window(self.pool_window, self.agents)
        if self.max_questions is None:
            self.max_questions = 2 * max(self.questions_per_round, BATCH)
        if self.other_seeds is not None and self.other_seeds < 1:
            raise StudyError("other_seeds must be >= 1 (or None: every seed)")
        if self.decay_rounds < 1:
            raise StudyError("decay_rounds must be >= 1")
        if self.learning_rate is None:
            from worker.shared.tiers import tier

            self.learning_rate = tier(self.tier).learning_rate
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise StudyError(f"seeds must be distinct and at least one, got {self.seeds}")
        for name in self.arms:  # every arm must run at this B (I <= B, 8/0-dyn's cap above B)
            arm = self.arm(name)
            try:
                arm.apply(self.agent_base())
            except ValueError as error:
                raise StudyError(
                    f"arm {name} at B = {arm.questions(self.questions_per_round)}: {error}"
                ) from None

    def arm(self, name: str) -> Arm:
        """The arm ``name`` as this study runs it (its windows, cap, T and B)."""
        return resolve_arm(name, **self.arm_parameters())

    def arm_parameters(self) -> dict[str, Any]:
        """What :func:`resolve_arm` needs besides the name, as this study sets it."""
        return arm_parameters(asdict(self))

    def agent_base(self) -> Any:
        """The AgentConfig every arm of this study starts from (B, G, tokens; the arm sets I, J)."""
        from worker.shared.config import AgentConfig

        return AgentConfig(
            questions_per_round=self.questions_per_round,
            num_local=min(BATCH, self.questions_per_round),
            group_size=self.group_size,
            max_new_tokens=self.max_new_tokens,
        )

    @property
    def required_arms(self) -> list[str]:
        return list({"v2": REQUIRED_ARMS, "v3": V3_REQUIRED_ARMS, "v4": V4_DEFAULT_ARMS}[self.design])

    def settings(self) -> dict[str, Any]:
        """What defines the experiment: a results file resumes only with equal settings. A v2
        study's settings are those of the v2 files (no ``design``, no ``decay_rounds``), a v3
        study's those of the v3 file (none of v4's)."""
        data = asdict(self)
        del data["seeds"], data["arms"]
        if self.design != "v4":
            del data["backfill_self_window"], data["held_out_points"], data["held_out_per_task"]
        if self.design == "v2":
            del data["design"], data["decay_rounds"]
        return data

    def seeds_of(self, arm: str) -> list[int]:
        """The seeds ``arm`` runs on: all for the required arms, the first other_seeds otherwise."""
        if arm in self.required_arms or self.other_seeds is None:
            return list(self.seeds)
        return list(self.seeds[: self.other_seeds])

    def agent_rounds(self) -> int:
        assert self.arms is not None
        return sum(len(self.seeds_of(a)) for a in self.arms) * self.agents * self.rounds


def arm_parameters(settings: dict[str, Any]) -> dict[str, Any]:
    """What :func:`resolve_arm` needs besides an arm's name, from a study's settings (a results
    file's, or a cell's; v2's and v3's have no ``backfill_self_window``: the default)."""
    params = {key: settings.get(key) for key in ("self_window", "max_questions", "decay_rounds")}
    params.update(pool_window=settings["pool_window"], agents=settings["agents"])
    if "backfill_self_window" in settings:
        params["backfill_self_window"] = settings["backfill_self_window"]
    return params


def order_arms(names: list[str]) -> list[str]:
    """``names`` without repeats, in :data:`ARM_ORDER`'s order, then the others (``@B<n>``
    variants) in the order given."""
    known = [a for a in ARM_ORDER if a in names]
    return known + [a for a in dict.fromkeys(names) if a not in ARM_ORDER]


def design_of(results: dict[str, Any]) -> str:
    """A results file's design: ``v3``, ``v2`` (pre-registered, no design recorded) or ``v1``
    (issue #8: no pre-registered family)."""
    config = results["config"]
    if "preregistered" not in config:
        return "v1"
    return config.get("design", "v2")


def arm_by_name(
    self_window: int | None = None,
    max_questions: int | None = None,
    decay_rounds: int | None = None,
    pool_window: int = DEFAULT_POOL_WINDOW,
    agents: int = 8,
    backfill_self_window: int = V4_BACKFILL_SELF_WINDOW,
) -> dict[str, Arm]:
    """The study's arms by name (4/4-self's window, 8/0-dyn's cap, 4/4-decay's T, 4/4@B4-age's
    pool window from the study's ``pool_window`` and backfill-self's window as the study sets
    them); B is the study's for every arm but the ``@B4`` ones."""
    from worker.shared.arms import DEFAULT_SELF_WINDOW, over_generation_arm

    arms = {arm.name: arm for arm in sapo_table_arms(BATCH, self_window or DEFAULT_SELF_WINDOW)}
    arms.update({arm.name: arm for arm in study_v3_arms(BATCH, decay_rounds or DEFAULT_DECAY_ROUNDS)})
    arms.update({arm.name: arm for arm in study_v4_arms(BATCH, pool_window, agents, backfill_self_window)})
    if max_questions is not None:
        arms["8/0-dyn"] = over_generation_arm(BATCH, max_questions)
    return arms


def resolve_arm(
    name: str,
    self_window: int | None = None,
    max_questions: int | None = None,
    decay_rounds: int | None = None,
    pool_window: int = DEFAULT_POOL_WINDOW,
    agents: int = 8,
    backfill_self_window: int = V4_BACKFILL_SELF_WINDOW,
) -> Arm:
    """An arm of :data:`ARM_ORDER`, or any of them at another B: ``<name>@B<n>`` (e.g.
    ``8/0@B16``, ``backfill@B4``). Raises :class:`StudyError` for an unknown name."""
    try:
        arms = arm_by_name(
            self_window, max_questions, decay_rounds, pool_window, agents, backfill_self_window
        )
    except ValueError as error:
        raise StudyError(str(error)) from None
    if name in arms:
        return arms[name]
    base, _, questions = name.rpartition("@B")
    if base in arms and questions.isdigit() and int(questions) >= 1:
        return with_questions(arms[base], int(questions))
    raise StudyError(
        f"unknown arm {name!r}; arms: {', '.join(ARM_ORDER)}, or any of them at another B as <arm>@B<n>"
    )


def campaign_overrides(arm_name: str) -> dict[str, Any]:
    """The ``sapo-table`` campaign preset's overrides that run a study arm on the platform.

    A campaign runs one swarm arm (I/J, strategies, B, batch rule) plus, per tier and seed, its
    isolated controls (worker.shared.campaign.ControlsConfig): ``isolated`` (8/0), ``filtered``
    (8/0-filtered), ``self`` (4/4-self) and ``dyn`` (8/0-dyn), all four on in the preset. So
    the 4/4 campaign with its controls gives 4/4, 8/0, 8/0-filtered, 4/4-self and 8/0-dyn;
    6/2, 2/6, 4/4-unfiltered, the arms of issue #29 (4/4@B4, backfill, 4/4-decay, 4/4-is) and
    4/4@B4-age (issue #49: the campaign's ``pool_window``) are one campaign each (controls off,
    since the 4/4 campaign already ran them). The other controls of issue #49 (4/0@B4,
    backfill-self) are no kind of campaign control: :class:`StudyError`.
    """
    arm = resolve_arm(arm_name)
    if arm_name in ("4/0@B4", "backfill-self"):
        raise StudyError(f"{arm_name} runs in the simulator only: no campaign control is that arm")
    if not arm.shares:
        controls = {"isolated": True, "filtered": True, "self_replay": True, "over_generation": True}
        return {"num_local": 4, "num_external": 4, "controls": controls}
    overrides: dict[str, Any] = {
        "num_local": arm.num_local,
        "num_external": arm.num_external,
        "local_strategy": arm.local_strategy,
        "external_strategy": arm.external_strategy,
    }
    if arm.questions_per_round is not None:
        overrides["questions_per_round"] = arm.questions_per_round
    if arm.batch_rule != "fixed":
        overrides["batch_rule"] = arm.batch_rule
    if arm.batch_rule == "decay":
        overrides["decay_rounds"] = arm.decay_rounds
    if arm.external_is:
        overrides["grpo"] = {"external_importance_sampling_correction": True}
    if arm.pool_window is not None:
        overrides["pool_window"] = arm.pool_window
    if arm.name != "4/4":
        overrides["controls"] = {"isolated": False, "filtered": False}
    return overrides


def seed_key(seed: int) -> str:
    """A seed as the key of its curve in the results file (JSON keys are strings)."""
    return str(seed)
