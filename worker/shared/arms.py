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

**B, the questions generated per round, is separate from I and J** (issue #29). An arm without
a suffix generates the base config's B (the study's 8): ``4/4`` generates 8 and trains on 4 of
them plus 4 external (this project's studies up to v2). ``@B<n>`` fixes B = n:

* ``4/4@B4``: generate 4, train on those 4 (filtered) plus 4 external. The SAPO paper's
  reference semantics: in Gensyn's rl-swarm reasoning-gym experiment I is the number of
  questions generated locally (``num_train_samples``) and J the number of groups taken from the
  swarm (``num_transplant_trees``), so its 4/4 generates half of what its 8/0 does.
  :func:`with_questions` gives any arm at another B (``8/0-dyn@B4``, ...).

Batch rules (``batch_rule``; worker/shared/sampling.py's ``batch_request`` computes them): I_r
and J_r are the own and external groups round r asks for, q_r the own groups of round r that
the local strategy accepts (the informative ones, filtered); a round trains on at most
min(I_r, q_r) own groups and on the external ones the pool offers that the external strategy
accepts, at most J_r::

    fixed:     I_r = I,   J_r = J
    backfill:  I_r = I,   J_r = min(J, max(0, B - min(I, q_r)))
    decay:     J_r = floor(J * max(0, 1 - r / T) + 1/2),   I_r = I + J - J_r

* ``backfill`` (SAPO as backfill: I = J = B): train on every informative own group, then fill
  the batch up to B groups with informative external groups from the pool; J varies per round
  (B minus the informative own groups). Sharing only where the agent's own round fell short.
* ``4/4-decay`` (decay, I = J = 4, T = :data:`DEFAULT_DECAY_ROUNDS`): 4/4 at round 0 that
  turns into 8 own (filtered) groups by round T, one external slot at a time. It follows the crossover of the v2
  study (exploratory windows: sharing was worth about as much as curation in rounds 1-15 and
  cost reward in proportion to J after round 30), so T = 30 puts J at 0 where 4/4 - 8/0 turned
  negative. Same generation as 4/4 (B = 8).
* ``4/4-is``: 4/4 with the truncated importance-sampling correction of external rollouts
  (``GRPOConfig.external_importance_sampling_correction``; worker/engine/loss.py).

The controls of study v4 (issue #49), each differing from the arm it controls in one thing:

* ``4/0@B4``: generate 4, train on those 4 (filtered), nothing external: 4/4@B4 without its J,
  at the same generation.
* ``4/4@B4-age``: 4/4@B4 with the pool window (``pool_window``, in rollouts) that spans the same
  rounds as 4/4's: the pool holds W rollouts and a round adds agents x B of them, so a window
  spans W / (agents x B) rounds; 4/4 (B = 8) keeps 256 = 4 rounds of 8 agents, 4/4@B4 keeps
  256 = 8 rounds, and 128 gives it 4 again.
* ``backfill-self``: backfill filling from the agent's **own** recent groups (``replay="self"``,
  a window of ``self_window`` own groups) instead of the pool: same filter, same batch rule, no
  other agent.

:class:`Arm` is plain data; :meth:`Arm.agent_overrides` gives the
:class:`~worker.shared.config.AgentConfig` fields that run it, and :func:`controls_for` the
isolated controls of a sharing arm by kind (:data:`CONTROL_KINDS`), which is what a campaign's
Celery controls need.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from worker.shared.config import AgentConfig
from worker.shared.sampling import BATCH_RULES

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
# 4/4-decay's T: J reaches 0 at round 30 (where the v2 study's 4/4 - 8/0 turned negative)
DEFAULT_DECAY_ROUNDS = 30


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
    # B: questions generated per round; None: the base config's (the study's, the campaign's)
    questions_per_round: int | None = None
    batch_rule: str = "fixed"  # fixed, backfill or decay (the module docstring's formulas)
    decay_rounds: int = 0  # T of the decay rule
    # truncated importance-sampling correction of external rollouts (their generator's log-probs)
    external_is: bool = False
    # rollouts the shared pool keeps for this arm (its window); None: the base config's
    pool_window: int | None = None

    def __post_init__(self) -> None:
        if self.replay not in REPLAY_SOURCES:
            raise ValueError(f"replay must be one of {', '.join(REPLAY_SOURCES)}, got {self.replay!r}")
        if self.replay == "self" and (self.self_window < 1 or self.num_external < 1):
            raise ValueError("a self-replay arm needs J >= 1 and self_window >= 1")
        if self.batch_rule not in BATCH_RULES:
            raise ValueError(f"batch_rule must be one of {', '.join(BATCH_RULES)}, got {self.batch_rule!r}")
        if self.questions_per_round is not None and self.questions_per_round < 1:
            raise ValueError("questions_per_round must be >= 1 (or None: the base config's)")
        if self.pool_window is not None and self.pool_window < 1:
            raise ValueError("pool_window must be >= 1 (or None: the base config's)")

    def questions(self, default: int) -> int:
        """B of this arm, where the base config generates ``default`` questions per round."""
        return default if self.questions_per_round is None else self.questions_per_round

    def batch(self, default_questions: int) -> int:
        """The groups a round of this arm aims to train on: B for backfill, I + J otherwise."""
        if self.batch_rule == "backfill":
            return self.questions(default_questions)
        return self.num_local + self.num_external

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
            "batch_rule": self.batch_rule,
            "decay_rounds": self.decay_rounds,
            **({} if self.questions_per_round is None else {"questions_per_round": self.questions_per_round}),
        }

    def apply(self, base: AgentConfig) -> AgentConfig:
        """``base`` (an AgentConfig) running this arm: :meth:`agent_overrides`, and the external
        importance-sampling correction switched on for ``external_is`` arms."""
        values = {**base.to_json(), **self.agent_overrides()}
        if self.external_is:
            values["grpo"] = {**values["grpo"], "external_importance_sampling_correction": True}
        return AgentConfig(**values)

    def semantics(self, default_questions: int) -> str:
        """What a round of this arm generates and trains on, in words (for reports)."""
        b = self.questions(default_questions)
        own = "own" if self.local_strategy == "uniform" else "informative own"
        ext = "external" if self.external_strategy == "uniform" else "informative external"
        if self.replay == "self":
            ext, source = f"{ext.replace('external', 'replayed')} own", f"from its last {self.self_window}"
        else:
            source = "from the pool"
        if self.batch_rule == "backfill":
            text = (
                f"generates {b}; trains on every {own} group (at most {self.num_local}), then fills "
                f"up to {b} groups with {ext} ones {source} (J varies per round)"
            )
        elif self.batch_rule == "decay":
            text = (
                f"generates {b}; trains on {self.num_local} {own} + {self.num_external} {ext} {source} "
                f"at round 0, J falling linearly to 0 by round {self.decay_rounds}, own groups taking "
                "its slots"
            )
        elif self.max_questions:
            text = (
                f"generates {b}, then more until {self.num_local} groups are informative (at most "
                f"{self.max_questions}); trains on {self.num_local} {own}"
            )
        elif self.num_external:
            text = f"generates {b}; trains on {self.num_local} {own} + {self.num_external} {ext} {source}"
        else:
            text = f"generates {b}; trains on {self.num_local} {own}"
        if self.external_is:
            text += ", importance-sampling-corrected"
        if self.pool_window is not None:
            text += f"; pool window {self.pool_window} rollouts"
        return text

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


def with_questions(arm: Arm, questions_per_round: int) -> Arm:
    """``arm`` generating ``questions_per_round`` questions a round, named ``<name>@B<n>``."""
    base = arm.name.split("@B", 1)[0]
    return replace(arm, name=f"{base}@B{questions_per_round}", questions_per_round=questions_per_round)


def reference_sharing_arm(num_local: int, num_external: int) -> Arm:
    """I/J under the SAPO reference code's semantics: B = I questions generated, all trained on
    (filtered), plus J external: ``4/4@B4``."""
    return with_questions(sharing_arm(num_local, num_external), num_local)


def backfill_arm(batch: int) -> Arm:
    """SAPO as backfill: every informative own group of the B = ``batch`` generated, then
    informative external groups up to ``batch`` in all (I = J = B)."""
    return Arm("backfill", batch, batch, FILTER, FILTER, batch_rule="backfill")


def decay_arm(num_local: int, num_external: int, decay_rounds: int = DEFAULT_DECAY_ROUNDS) -> Arm:
    """I/J at round 0, J falling linearly to 0 by round ``decay_rounds`` (its slots to own
    groups): ``4/4-decay`` (the module docstring's formula)."""
    if decay_rounds < 1:
        raise ValueError("the decay rule needs decay_rounds >= 1")
    return Arm(
        f"{num_local}/{num_external}-decay",
        num_local,
        num_external,
        FILTER,
        FILTER,
        batch_rule="decay",
        decay_rounds=decay_rounds,
    )


def importance_sampled_arm(num_local: int, num_external: int) -> Arm:
    """I/J with the truncated importance-sampling correction of external rollouts: ``4/4-is``."""
    return replace(
        sharing_arm(num_local, num_external), name=f"{num_local}/{num_external}-is", external_is=True
    )


def study_v3_arms(batch: int = 8, decay_rounds: int = DEFAULT_DECAY_ROUNDS) -> list[Arm]:
    """The arms issue #29 adds: 4/4@B4 (the paper's semantics), backfill, 4/4-decay (the
    schedule) and 4/4-is (external rollouts importance-corrected)."""
    half = batch // 2
    return [
        reference_sharing_arm(half, half),
        backfill_arm(batch),
        decay_arm(half, half, decay_rounds),
        importance_sampled_arm(half, half),
    ]


def window_matched_arm(arm: Arm, pool_window: int) -> Arm:
    """``arm`` with the shared pool keeping ``pool_window`` rollouts: ``4/4@B4-age`` (see the
    module docstring for the window that matches 4/4's age in rounds)."""
    base = arm.name.split("-age", 1)[0]
    return replace(arm, name=f"{base}-age", pool_window=pool_window)


def self_backfill_arm(batch: int, window: int) -> Arm:
    """Backfill from the agent's own last ``window`` groups instead of the pool: ``backfill-self``."""
    return replace(backfill_arm(batch), name="backfill-self", replay="self", self_window=window)


def isolated_reference_arm(num_local: int) -> Arm:
    """Generate ``num_local``, train on those (filtered), nothing external: ``4/0@B4`` (4/4@B4
    without its J)."""
    return with_questions(Arm(f"{num_local}/0", num_local, 0, FILTER, FILTER), num_local)


def study_v4_arms(batch: int, pool_window: int, agents: int, backfill_window: int) -> list[Arm]:
    """The controls issue #49 adds: 4/0@B4, 4/4@B4-age (its pool window spanning as many rounds
    as 4/4's ``pool_window``: pool_window x (B/2) / B) and backfill-self (window ``backfill_window``
    own groups). ``agents`` only checks that the window spans whole rounds."""
    half = batch // 2
    matched = pool_window * half // batch
    if matched % (agents * half):
        raise ValueError(f"a pool window of {matched} rollouts is not whole rounds of {agents} x {half}")
    return [
        isolated_reference_arm(half),
        window_matched_arm(reference_sharing_arm(half, half), matched),
        self_backfill_arm(batch, backfill_window),
    ]


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
    questions_per_round: int = 8,
) -> Arm:
    """The isolated control of kind ``kind`` for the sharing arm ``arm`` (batch I + J; a backfill
    arm's batch is its B, ``questions_per_round`` where the arm does not fix it):

    * ``isolated``: (I + J)/0, uniform (the paper's baseline);
    * ``filtered``: (I + J)/0 with the zero-advantage filter (sanity only, see the module doc);
    * ``self``: I/J-self, the J from the agent's own last ``self_window`` groups (a fixed I/J:
      not for a backfill arm, whose J varies);
    * ``dyn``: (I + J)/0-dyn, over-generation up to ``max_questions`` (default 2 (I + J)).
    """
    batch = arm.batch(questions_per_round)
    if kind == "isolated":
        return isolated_arm(batch, filtered=False)
    if kind == "filtered":
        return isolated_arm(batch, filtered=True)
    if kind == "self":
        if arm.num_external < 1:
            raise ValueError(f"a self-replay control needs J >= 1; {arm.name} has J = 0")
        if arm.batch_rule == "backfill":
            raise ValueError("a self-replay control replays a fixed J; a backfill arm's J varies")
        return self_replay_arm(arm.num_local, arm.num_external, self_window)
    if kind == "dyn":
        return over_generation_arm(batch, max_questions)
    raise ValueError(f"unknown control kind {kind!r}; choose from {', '.join(CONTROL_KINDS)}")


def controls_for(
    arm: Arm,
    kinds: tuple[str, ...] | list[str] = ("isolated", "filtered"),
    self_window: int = DEFAULT_SELF_WINDOW,
    max_questions: int | None = None,
    questions_per_round: int = 8,
) -> list[Arm]:
    """The isolated controls of a sharing arm, one per kind in ``kinds`` (see :func:`control_arm`).

    The default, plain and filtered, is what campaigns ran before issue #18."""
    return [control_arm(kind, arm, self_window, max_questions, questions_per_round) for kind in kinds]
