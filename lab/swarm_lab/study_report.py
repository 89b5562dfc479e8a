"""``swarm-worker study-report``: a study's markdown report and PNG plots, generated from its
results file by the generator of its design: v4's (study_v4_report.py) or the heterogeneous
swarm's (heterogeneous_report.py).

The answer is generated from the numbers, with what would change it, so a report is regenerated
rather than edited. The retired designs' generators (issue #8's v1, #18's v2, #29's v3) were
removed in issue #51; their reports stay as the committed files beside their results
(docs/experiments/), and commit :data:`RETIRED_AT` still generates them.
"""

from __future__ import annotations

import json
from pathlib import Path

from swarm_lab import heterogeneous_report, study_v4_report
from swarm_lab.heterogeneous import DESIGN
from swarm_lab.study import design_of
from worker.shared import stats

RETIRED_AT = "79ab572"  # the last commit with the report generators of designs v1 to v3


class RetiredDesign(ValueError):
    """A results file of a design whose report generator is retired."""


def write_report(
    results_path: Path, out: Path | None = None, resamples: int = stats.BOOTSTRAP_RESAMPLES
) -> Path:
    """Write the markdown report (and its PNGs next to it); returns the report's path. Raises
    :class:`RetiredDesign` for a file of a retired design, naming its committed report."""
    results = json.loads(Path(results_path).read_text())
    if results["config"].get("design") == DESIGN:
        return heterogeneous_report.write_report(results_path, out, resamples)
    if results["config"].get("design") == "v4":
        return study_v4_report.write_report(results_path, out, resamples)
    committed = Path(results_path).with_suffix(".md")
    report = f"its report is the committed {committed}" if committed.exists() else "no report was committed"
    raise RetiredDesign(
        f"{results_path} is a study of design {design_of(results)}, whose report generator is retired "
        f"(issue #51): {report}; commit {RETIRED_AT} generates it"
    )
