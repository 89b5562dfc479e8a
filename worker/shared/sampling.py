"""Which rollouts a node trains on each round: I local plus J external.

Strategies (chosen separately for the local and the external side):

* ``uniform``: any rollout, drawn uniformly without replacement.
* ``nonzero_advantage``: only groups whose G rewards are not all equal. A group with equal
  rewards has A = 0 for every completion, so it adds no gradient; but under DAPO's token-level
  loss its tokens still count in the normaliser (number of tokens in the batch), so keeping it
  dilutes the signal of the rest. This is the filter the SAPO paper gave its sharing arms and
  not its 8/0 baseline; giving it to an isolated arm too is the control the paper lacked.

When too few rollouts qualify, the batch is *short*: it holds every qualifying rollout and is
never topped up with non-qualifying ones (that would undo the filter). The shortfall is counted
in :class:`BatchStats` (``local_shortfall``, ``external_shortfall``) and reported in the round's
metrics, so an arm that trains on fewer samples than asked is visible, not silent. A round with
nothing to train on skips the optimizer step (``trained = False`` in the metrics).

How many of each side a round asks for is the arm's batch rule (:func:`batch_request`, issue
#29): ``fixed`` (I and J), ``backfill`` (every accepted own group, then external ones up to B
in all) or ``decay`` (J falling linearly to 0 over T rounds); worker/shared/arms.py has the
formulas.

Self-replay (the ``4/4-self`` arm, worker/shared/arms.py): the "external" side is the agent's
own recent groups; ``exclude_chosen_local`` draws it only after the local picks and never
returns one of them, so no group is trained on twice in a step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from worker.shared.advantages import zero_advantage

if TYPE_CHECKING:  # annotations only: the learner imports this module without msgspec (bench/gpu_check.py)
    from worker.shared.rollout import Rollout

Strategy = Literal["uniform", "nonzero_advantage"]
STRATEGIES: tuple[str, ...] = ("uniform", "nonzero_advantage")
# How many own and external groups a round asks for (batch_request; worker/shared/arms.py).
BATCH_RULES: tuple[str, ...] = ("fixed", "backfill", "decay")


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown sampling strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return strategy


def qualifies(rollout: Rollout, strategy: str) -> bool:
    return qualifies_rewards(rollout.rewards, strategy)


def qualifies_rewards(rewards: list[float], strategy: str) -> bool:
    """Whether ``strategy`` takes a group with these rewards: ``uniform`` takes every group,
    ``nonzero_advantage`` those whose rewards are not all equal (Rollout.zero_advantage)."""
    if strategy == "uniform":
        return True
    if strategy == "nonzero_advantage":
        return not zero_advantage(rewards)
    raise ValueError(f"unknown sampling strategy {strategy!r}")


def sample_rollouts(
    candidates: Sequence[Rollout], count: int, strategy: str, rng: random.Random
) -> list[Rollout]:
    """Up to ``count`` rollouts drawn without replacement from those that qualify."""
    eligible = [rollout for rollout in candidates if qualifies(rollout, strategy)]
    if len(eligible) <= count:
        return eligible
    return rng.sample(eligible, count)


def batch_request(
    rule: str,
    num_local: int,
    num_external: int,
    questions_per_round: int,
    round_index: int,
    local_qualifying: int,
    decay_rounds: int = 0,
) -> tuple[int, int]:
    """(I_r, J_r): the own and external groups round ``round_index`` asks for under ``rule``.

    * ``fixed``: (I, J).
    * ``backfill``: (I, min(J, max(0, B - min(I, q)))), q = own groups the local strategy accepts
      this round: every accepted own group (at most I), then external ones up to B in all.
    * ``decay``: J_r = floor(J max(0, 1 - r / T) + 1/2) with T = ``decay_rounds``, and
      I_r = I + J - J_r: the batch keeps I + J groups, J's slots going back to own groups.
    """
    if rule == "fixed":
        return num_local, num_external
    if rule == "backfill":
        own = min(num_local, local_qualifying)
        return num_local, min(num_external, max(0, questions_per_round - own))
    if rule == "decay":
        if decay_rounds < 1:
            raise ValueError("the decay rule needs decay_rounds >= 1")
        external = math.floor(num_external * max(0.0, 1.0 - round_index / decay_rounds) + 0.5)
        return num_local + num_external - external, external
    raise ValueError(f"unknown batch rule {rule!r}; choose one of {', '.join(BATCH_RULES)}")


@dataclass
class BatchStats:
    local_requested: int
    external_requested: int
    local_available: int  # generated this round
    external_available: int  # offered by the pool
    local_qualifying: int  # of those, how many the local strategy accepts
    external_qualifying: int
    local_used: int
    external_used: int

    @property
    def local_shortfall(self) -> int:
        return self.local_requested - self.local_used

    @property
    def external_shortfall(self) -> int:
        return self.external_requested - self.external_used

    @property
    def external_fraction(self) -> float:
        total = self.local_used + self.external_used
        return self.external_used / total if total else 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "external_fraction": self.external_fraction,
            "batch/local_requested": self.local_requested,
            "batch/external_requested": self.external_requested,
            "batch/local_used": self.local_used,
            "batch/external_used": self.external_used,
            "batch/local_shortfall": self.local_shortfall,
            "batch/external_shortfall": self.external_shortfall,
            # rollouts the strategy excluded (zero-advantage groups under nonzero_advantage)
            "filtered/local": self.local_available - self.local_qualifying,
            "filtered/external": self.external_available - self.external_qualifying,
        }


def assemble_batch(
    local: Sequence[Rollout],
    external: Sequence[Rollout],
    num_local: int,
    num_external: int,
    local_strategy: str,
    external_strategy: str,
    rng: random.Random,
    exclude_chosen_local: bool = False,
) -> tuple[list[Rollout], BatchStats]:
    """I local + J external rollouts for one training step (see the module docstring)."""
    chosen_local = sample_rollouts(local, num_local, local_strategy, rng)
    if exclude_chosen_local:
        picked = {r.rollout_id for r in chosen_local}
        external = [r for r in external if r.rollout_id not in picked]
    chosen_external = sample_rollouts(external, num_external, external_strategy, rng)
    stats = BatchStats(
        local_requested=num_local,
        external_requested=num_external,
        local_available=len(local),
        external_available=len(external),
        local_qualifying=sum(qualifies(r, local_strategy) for r in local),
        external_qualifying=sum(qualifies(r, external_strategy) for r in external),
        local_used=len(chosen_local),
        external_used=len(chosen_external),
    )
    return chosen_local + chosen_external, stats
