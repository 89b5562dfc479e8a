"""Experiment arms: what a node trains on each round, and where it comes from.

Arms are named ``"I/J"`` like the SAPO paper's table: I own rollouts of this round plus J more.

* **Sharing** (``6/2``, ``4/4``, ``2/6``): the J come from other agents (the swarm's pool); the
  paper's sharing arms dropped zero-advantage groups on both sides (``nonzero_advantage``).
* ``4/4-unfiltered``: sharing without the filter.
* ``8/0``: the paper's isolated baseline (B = I = 8 own groups, no filter).
* ``8/0-filtered``: isolated with the filter. A *sanity* arm only: with B = I = 8 the filter can
  only delete groups, never choose better ones, and a deleted zero-advantage group gave exactly
  zero gradient anyway (A = 0), so only the token normaliser changes, which gradient clipping
  removes; it cannot differ much from 8/0 (docs/experiments/README.md, issue #18).
* ``4/4-self`` (**self-replay**, ``replay="self"``): I = 4 own groups of this round plus J = 4
  drawn from the agent's **own** recent groups (a window of ``self_window`` groups, the same age
  as the shared pool's window: pool window / agents; this round's local picks excluded), the same
  filter on both sides. Same generation budget, same batch, same staleness as 4/4, no other
  agent: the control that separates sharing from curation plus reuse.
* ``8/0-dyn`` (**over-generation**, ``max_questions`` > B): DAPO's dynamic sampling. The isolated
  agent generates its B questions, then more (in chunks of the shortfall) until it holds I
  informative (non-zero-advantage) groups or has generated ``max_questions``; it trains on I of
  them. Same batch as 4/4, more generation: its cost is recorded (``generation/questions``).

:class:`Arm` is plain data; :meth:`Arm.agent_overrides` gives the
:class:`~worker.shared.config.AgentConfig` fields that run it, and :func:`controls_for` the
isolated controls of a sharing arm by kind (:data:`CONTROL_KINDS`), which is what a campaign's
Celery controls need.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

FILTER = "nonzero_advantage"
REPLAY_SOURCES = ("pool", "self")
# The kinds of isolated control of a sharing arm I/J (see controls_for).
CONTROL_KINDS = ("isolated", "filtered", "self", "dyn")
DEFAULT_SELF_WINDOW = 32  # groups: the study's pool of 256 rollouts over 8 agents


def pool_share_window(pool_window: int, agents: int) -> int:
    """4/4-self's default window in groups: the pool's window over the agents, each agent's share
    of what the pool holds (so the replayed groups span as many rounds as the pool's)."""
    return max(1, pool_window // agents)


OVER_GENERATION_FACTOR = 2  # 8/0-dyn generates at most 2 B questions


@dataclass(frozen=True)
class Arm:
    name: str
    num_local: int  # I
    num_external: int  # J
    local_strategy: str = "uniform"
    external_strategy: str = "uniform"
    # where the J rollouts come from: "pool" (other agents, via the transport) or "self"
    # (this agent's own last self_window groups)
    replay: str = "pool"
    self_window: int = 0  # groups, for replay == "self"
    max_questions: int = 0  # > B: over-generate up to this many questions per round; 0: B only

    def __post_init__(self) -> None:
        if self.replay not in REPLAY_SOURCES:
            raise ValueError(f"replay must be one of {', '.join(REPLAY_SOURCES)}, got {self.replay!r}")
        if self.replay == "self" and (self.self_window < 1 or self.num_external < 1):
            raise ValueError("a self-replay arm needs J >= 1 and self_window >= 1")

    @property
    def shares(self) -> bool:
        """True when the arm trains on other agents' rollouts (it needs the swarm's pool)."""
        return self.num_external > 0 and self.replay == "pool"

    @property
    def kind(self) -> str:
        """``sharing``, or the control kind of an isolated arm (one of :data:`CONTROL_KINDS`)."""
        if self.shares:
            return "sharing"
        if self.replay == "self":
            return "self"
        if self.max_questions:
            return "dyn"
        return "filtered" if self.local_strategy == FILTER else "isolated"

    def agent_overrides(self) -> dict[str, Any]:
        """The AgentConfig fields that run this arm (everything else comes from the base config)."""
        return {
            "num_local": self.num_local,
            "num_external": self.num_external,
            "local_strategy": self.local_strategy,
            "external_strategy": self.external_strategy,
            "replay": self.replay,
            "self_window": self.self_window,
            "max_questions": self.max_questions,
        }

    def to_json(self) -> dict:
        return asdict(self)


def sharing_arm(num_local: int, num_external: int, filtered: bool = True) -> Arm:
    strategy = FILTER if filtered else "uniform"
    suffix = "" if filtered else "-unfiltered"
    return Arm(f"{num_local}/{num_external}{suffix}", num_local, num_external, strategy, strategy)


def isolated_arm(batch: int, filtered: bool) -> Arm:
    """J = 0 with the same training batch size; filtered drops zero-advantage groups too."""
    if filtered:
        return Arm(f"{batch}/0-filtered", batch, 0, FILTER, FILTER)
    return Arm(f"{batch}/0", batch, 0)


def self_replay_arm(num_local: int, num_external: int, window: int = DEFAULT_SELF_WINDOW) -> Arm:
    """I own groups of this round + J from the agent's own last ``window`` groups, filtered."""
    return Arm(
        f"{num_local}/{num_external}-self",
        num_local,
        num_external,
        FILTER,
        FILTER,
        replay="self",
        self_window=window,
    )


def over_generation_arm(batch: int, max_questions: int | None = None) -> Arm:
    """J = 0; generate until ``batch`` informative groups (at most ``max_questions``); filtered."""
    cap = OVER_GENERATION_FACTOR * batch if max_questions is None else max_questions
    if cap <= batch:
        raise ValueError(f"over-generation needs max_questions > {batch}, got {cap}")
    return Arm(f"{batch}/0-dyn", batch, 0, FILTER, FILTER, max_questions=cap)


def sapo_table_arms(batch: int = 8, self_window: int = DEFAULT_SELF_WINDOW) -> list[Arm]:
    """The paper's arms (8/0, 6/2, 4/4, 2/6), the sanity arm 8/0-filtered, 4/4-unfiltered, and
    the two controls that can tell sharing from curation and reuse: 4/4-self and 8/0-dyn."""
    quarter = batch // 4
    return [
        isolated_arm(batch, filtered=False),
        sharing_arm(batch - quarter, quarter),
        sharing_arm(batch // 2, batch // 2),
        sharing_arm(quarter, batch - quarter),
        isolated_arm(batch, filtered=True),
        sharing_arm(batch // 2, batch // 2, filtered=False),
        self_replay_arm(batch // 2, batch // 2, self_window),
        over_generation_arm(batch),
    ]


def control_arm(
    kind: str,
    arm: Arm,
    self_window: int = DEFAULT_SELF_WINDOW,
    max_questions: int | None = None,
) -> Arm:
    """The isolated control of kind ``kind`` for the sharing arm ``arm`` (batch I + J):

    * ``isolated``: (I + J)/0, uniform (the paper's baseline);
    * ``filtered``: (I + J)/0 with the zero-advantage filter (sanity only, see the module doc);
    * ``self``: I/J-self, the J from the agent's own last ``self_window`` groups;
    * ``dyn``: (I + J)/0-dyn, over-generation up to ``max_questions`` (default 2 (I + J)).
    """
    batch = arm.num_local + arm.num_external
    if kind == "isolated":
        return isolated_arm(batch, filtered=False)
    if kind == "filtered":
        return isolated_arm(batch, filtered=True)
    if kind == "self":
        if arm.num_external < 1:
            raise ValueError(f"a self-replay control needs J >= 1; {arm.name} has J = 0")
        return self_replay_arm(arm.num_local, arm.num_external, self_window)
    if kind == "dyn":
        return over_generation_arm(batch, max_questions)
    raise ValueError(f"unknown control kind {kind!r}; choose from {', '.join(CONTROL_KINDS)}")


def controls_for(
    arm: Arm,
    kinds: tuple[str, ...] | list[str] = ("isolated", "filtered"),
    self_window: int = DEFAULT_SELF_WINDOW,
    max_questions: int | None = None,
) -> list[Arm]:
    """The isolated controls of a sharing arm, one per kind in ``kinds`` (see :func:`control_arm`).

    The default, plain and filtered, is what campaigns ran before issue #18."""
    return [control_arm(kind, arm, self_window, max_questions) for kind in kinds]
