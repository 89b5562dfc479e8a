"""Experiment arms: how many local (I) and external (J) rollouts a node trains on, and filters.

Arms are named ``"I/J"`` like the SAPO paper's table. The paper's sharing arms dropped
zero-advantage rollouts while its 8/0 baseline could not; ``8/0-filtered`` is the control the
paper lacked (isolated, same filter) and ``4/4-unfiltered`` is sharing without the filter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Arm:
    name: str
    num_local: int  # I
    num_external: int  # J
    local_strategy: str = "uniform"
    external_strategy: str = "uniform"

    @property
    def shares(self) -> bool:
        return self.num_external > 0

    def to_json(self) -> dict:
        return asdict(self)


FILTER = "nonzero_advantage"


def sharing_arm(num_local: int, num_external: int, filtered: bool = True) -> Arm:
    strategy = FILTER if filtered else "uniform"
    suffix = "" if filtered else "-unfiltered"
    return Arm(f"{num_local}/{num_external}{suffix}", num_local, num_external, strategy, strategy)


def isolated_arm(batch: int, filtered: bool) -> Arm:
    """J = 0 with the same training batch size; filtered drops zero-advantage groups too."""
    if filtered:
        return Arm(f"{batch}/0-filtered", batch, 0, FILTER, FILTER)
    return Arm(f"{batch}/0", batch, 0)


def sapo_table_arms(batch: int = 8) -> list[Arm]:
    """The paper's arms (8/0, 6/2, 4/4, 2/6) plus the two controls it lacked."""
    quarter = batch // 4
    return [
        isolated_arm(batch, filtered=False),
        sharing_arm(batch - quarter, quarter),
        sharing_arm(batch // 2, batch // 2),
        sharing_arm(quarter, batch - quarter),
        isolated_arm(batch, filtered=True),
        sharing_arm(batch // 2, batch // 2, filtered=False),
    ]


def controls_for(arm: Arm) -> list[Arm]:
    """The isolated controls of a sharing arm: same batch size I + J, plain and filtered."""
    batch = arm.num_local + arm.num_external
    return [isolated_arm(batch, filtered=False), isolated_arm(batch, filtered=True)]
