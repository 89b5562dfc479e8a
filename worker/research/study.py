"""The SAPO table at CPU scale (issue #8): the study's design, settings and results file.

Does sharing rollouts beat training alone once the lone agent may also drop zero-advantage
samples? The study runs the SAPO paper's arms (8/0, 6/2, 4/4, 2/6; I local / J external
rollouts trained on per round, zero-advantage groups dropped as in the paper's SAPO arms) and
the two controls the paper lacked (8/0-filtered: isolated with the same filter; 4/4-unfiltered:
sharing without it), each with N agents and 8 questions per agent per round, in the
in-process simulator (worker/research/simulate.py).

A **cell** is one (arm, seed). The seed fixes every agent's question stream and generation
seeds, and is the same across arms, so the arms of one seed see the same questions and
differences between arms pair by seed.

Results (``docs/experiments/sapo-table-cpu.json`` by default)::

    {"config": {settings, "seeds": [...], "rounds": R, "elapsed_seconds": ..., "versions": ...},
     "arms":   {"8/0": [cumulative reward of seed s for s in config.seeds], ...},
     "curves": {"8/0": {"<seed>": [per-round mean reward over the agents, R values]}, ...}}

``arms[a][i]`` belongs to ``config["seeds"][i]`` and is null while that cell has not run.

**Cumulative reward** of a cell = sum over rounds r of the per-round mean reward
m_r = (1/N) sum_n reward_{n,r}, where reward_{n,r} is agent n's mean verified reward over its
own B x G completions of round r. This is the paper's measure (its 561.79 for 8/0 over 2000
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

from worker.shared.arms import Arm, sapo_table_arms

# The paper's Table (8 agents, Qwen2.5-0.5B, 2000 rounds, G = 8, one run).
PAPER_CUMULATIVE = {"8/0": 561.79, "6/2": 854.43, "4/4": 1093.31, "2/6": 945.87}
QUESTIONS_PER_ROUND = 8  # the (and paper's) B; the arms are named for I + J = 8
ARM_NAMES = [arm.name for arm in sapo_table_arms(QUESTIONS_PER_ROUND)]
ARM_ORDER = ["8/0", "6/2", "4/4", "2/6", "8/0-filtered", "4/4-unfiltered"]
BASELINE = "8/0"
PRIMARY = ("4/4", "8/0-filtered")  # the question of the issue, fixed before the data
# Paired comparisons of the report, (a, b) meaning a - b; the family of the Holm adjustment.
COMPARISONS = [
    PRIMARY,
    ("4/4", "4/4-unfiltered"),
    ("6/2", "8/0-filtered"),
    ("2/6", "8/0-filtered"),
    ("4/4", "8/0"),
    ("6/2", "8/0"),
    ("2/6", "8/0"),
    ("8/0-filtered", "8/0"),
    ("4/4-unfiltered", "8/0"),
]
DEFAULT_OUT = Path("docs/experiments/sapo-table-cpu.json")
QUICK_OUT = Path(tempfile.gettempdir()) / "swarm-study-quick" / "sapo-table-cpu.json"
CUMULATIVE_DEFINITION = (
    "sum over rounds of the per-round mean reward over the agents (each agent's reward: mean verified "
    "reward of its own B x G completions of the round); the SAPO paper's measure"
)
CURVE_DEFINITION = "per-round mean reward over the agents of one cell (arm, seed), rounds 1..R"

# Chosen from a measurement on the 2-core development machine (docs/experiments/README.md):
# 6 arms x 6 seeds x 8 agents x 25 rounds = 7,200 agent-rounds at about 1.5 CPU-s each,
# in 2 processes: about 1.5-2 hours. 6 seeds, not 5: with n seeds the exact sign-flip test
# cannot go below p = 2 / 2^n, and 2 / 32 = 0.0625 could never reject at 5%.
DEFAULT_ROUNDS = 25
DEFAULT_SEEDS = 6


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
    arms: list[str] = field(default_factory=lambda: list(ARM_ORDER))
    quick: bool = False
    questions_per_round: int = QUESTIONS_PER_ROUND

    @classmethod
    def quick_config(cls) -> StudyConfig:
        """A smoke test: 2 agents, 2 rounds, 2 seeds, G = 2, 4 tokens (about 10-20 s)."""
        return cls(agents=2, rounds=2, seeds=[0, 1], group_size=2, max_new_tokens=4, quick=True)

    def __post_init__(self) -> None:
        unknown = [name for name in self.arms if name not in ARM_NAMES]
        if unknown:
            raise StudyError(f"unknown arms {unknown}; arms: {', '.join(ARM_NAMES)}")
        if self.questions_per_round != QUESTIONS_PER_ROUND:
            raise StudyError("the study's arms are defined for 8 questions per agent per round")
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

    def agent_rounds(self) -> int:
        return len(self.arms) * len(self.seeds) * self.agents * self.rounds


def arm_by_name() -> dict[str, Arm]:
    return {arm.name: arm for arm in sapo_table_arms(QUESTIONS_PER_ROUND)}


def campaign_overrides(arm_name: str) -> dict[str, Any]:
    """The ``sapo-table`` campaign preset's overrides that run a study arm on the platform.

    A campaign runs one swarm arm (I/J, strategies) plus, per tier and seed, its isolated
    controls with batch I + J: ``isolated`` (8/0) and ``filtered`` (8/0-filtered). So the 4/4
    campaign with its controls gives 4/4, 8/0 and 8/0-filtered; 6/2, 2/6 and 4/4-unfiltered are
    one campaign each (controls off, since the 4/4 campaign already ran them).
    """
    arm = arm_by_name()[arm_name]
    if not arm.shares:
        return {"num_local": 4, "num_external": 4, "controls": {"isolated": True, "filtered": True}}
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
