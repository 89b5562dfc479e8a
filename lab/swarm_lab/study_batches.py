"""``swarm-worker study-batches``: what each arm of a study generated and trained on, per round
(mean over seeds and agents), the check that the arms' batches differ as designed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swarm_lab.study import order_arms

BATCH_KEYS = (
    ("generation/questions", "generated"),
    ("batch/local_used", "own"),
    ("batch/external_used", "external"),
    ("batch/external_requested", "J asked"),
    ("train/tokens", "trained tokens"),
)


def batch_rows(results: dict[str, Any]) -> list[str]:
    """What each arm's rounds generated and trained on, round by round: per arm and round, the
    mean over seeds of the per-round mean over agents of questions generated, own and external
    groups trained on, external groups asked for, tokens trained on (``swarm-worker
    study-batches``: the check that the arms' batches differ as designed)."""
    mechanism = results.get("mechanism") or {}
    lines = [
        "| arm | round | " + " | ".join(label for _, label in BATCH_KEYS) + " |",
        "|---|---|" + "---|" * len(BATCH_KEYS),
    ]
    for name in order_arms(list(results["config"]["arms"])):
        cells = list((mechanism.get(name) or {}).values())
        if not cells:
            continue
        for r in range(results["config"]["rounds"]):
            values = []
            for key, _ in BATCH_KEYS:
                series = [c[key][r] for c in cells if key in c and c[key][r] is not None]
                values.append(f"{sum(series) / len(series):.2f}" if series else "-")
            lines.append(f"| {name} | {r} | " + " | ".join(values) + " |")
    return lines


def batches_text(path: Path) -> list[str]:
    """The lines the command prints for the results file at ``path``."""
    results = json.loads(path.read_text())
    config = results["config"]
    lines = [f"{path}: {len(config['seeds'])} seeds x {config['agents']} agents x {config['rounds']} rounds"]
    for name, questions in (config.get("arm_questions") or {}).items():
        lines.append(f"  {name}: B = {questions}; {(config.get('arm_semantics') or {}).get(name, '')}")
    return [*lines, *batch_rows(results)]
