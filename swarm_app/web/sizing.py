"""What a campaign's design can show, before it is launched (issue #47): for R swarms per model
size against S seeds of each control, the smallest p the exact permutation test over units can
give and the smallest gain it detects with 80 % power, from the spread across independent units
that the SAPO table study measured.

The spread (docs/experiments/sapo-table-cpu-v3.json, "arms": each cell's cumulative reward; the
report's table "The table beside the paper's", docs/experiments/sapo-table-cpu-v3.md): the
standard deviation across seeds of an arm's cumulative reward over 45 rounds, relative to the
arm's mean and pooled over the study's 8 arms (64 cells, 56 degrees of freedom), is 1.77 %; the
same for the mean reward per round of a window (thirds of the 45 rounds) is 4.1 % in the first
third, 2.9 % and 2.2 % in the others; a round's mean reward varies across seeds by 0.039
(absolute, pooled over arms and rounds). tests/campaigns/test_interval_coverage.py recomputes
them from the file. A study seed is the mean of 8 agents; a campaign's unit (a control seed is
one agent, a swarm the mean of its nodes) varies more, so the detectable gain below is the least
a campaign can hope for, not a promise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from worker.shared import stats

ALPHA = 0.05
POWER = 0.8
# Relative standard deviation across units of the cumulative reward (the headline's measure).
CUMULATIVE_SPREAD = 0.0177
# The same for a window's mean reward per round: the largest of the three thirds (the first).
WINDOW_SPREAD = 0.041
# Standard deviation across units of one round's mean reward (absolute; the per-round band).
ROUND_SPREAD = 0.039
WINDOWS = 3  # estimates.WINDOWS: the windows each model size's time course is cut into
SOURCE = "docs/experiments/sapo-table-cpu-v3.md"


@dataclass(frozen=True)
class Design:
    """What R swarms against S seeds can show: ``min_p``, the exact test's smallest p
    (stats.permutation_min_p); ``detectable``, the smallest gain in % of the control's
    cumulative reward detected at ALPHA with POWER (None: none can be); ``windows_min_p``, the
    smallest Holm-adjusted p a window can reach over WINDOWS x tiers windows."""

    swarms: int
    seeds: int
    tiers: int
    min_p: float
    detectable: float | None
    windows_min_p: float

    @property
    def can_decide(self) -> bool:
        return self.min_p <= ALPHA

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.text(),
            "can_decide": self.can_decide,
            "min_p": self.min_p,
            "detectable": self.detectable,
            "windows_min_p": self.windows_min_p,
        }

    def text(self) -> str:
        """The form's sizing line, from the numbers."""
        head = (
            f"Sizing: {self.swarms} swarm{'s' if self.swarms != 1 else ''} per model size against "
            f"{self.seeds} seed{'s' if self.seeds != 1 else ''} per control: the smallest p the exact "
            f"permutation test over them can give is {self.min_p:.2g}"
        )
        if not self.can_decide:
            return (
                f"{head}, above 0.05: no difference can be shown at the 5 % level, whatever the "
                "results. The campaign can describe, not decide; the smallest designs that can are 8 "
                "units, 3 vs 5 (or 5 vs 3) and 4 vs 4."
            )
        detected = (
            f"the smallest gain it detects with 80 % power is about {self.detectable:.1f} %"
            if self.detectable is not None
            else "no gain up to 1,000 times that spread is detected with 80 % power"
        )
        line = (
            f"{head}; with the spread the SAPO study measured across seeds ({CUMULATIVE_SPREAD * 100:.2f} % of "
            f"the cumulative reward, {SOURCE}), {detected} (a unit of fewer agents than the study's 8 "
            "varies more)."
        )
        if self.windows_min_p > ALPHA:
            windows = WINDOWS * self.tiers
            line += (
                f" The {windows} windows of the time course are Holm-adjusted together: their smallest "
                f"p is {self.windows_min_p:.2g}, so they are descriptions, not findings."
            )
        return line


@lru_cache(maxsize=256)
def design(swarms: int, seeds: int, tiers: int = 1) -> Design:
    """The :class:`Design` of ``swarms`` against ``seeds`` with ``tiers`` model sizes (memoized:
    the power simulation takes up to a second for 8 vs 8). Sizes beyond the form's bounds are
    the caller's to refuse."""
    min_p = stats.permutation_min_p(swarms, seeds)
    difference = stats.permutation_detectable_difference(CUMULATIVE_SPREAD * 100, swarms, seeds, ALPHA, POWER)
    return Design(
        swarms=swarms,
        seeds=seeds,
        tiers=tiers,
        min_p=min_p,
        detectable=difference,
        windows_min_p=min(1.0, WINDOWS * max(tiers, 1) * min_p),
    )
