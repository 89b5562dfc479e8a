"""``swarm-worker study-batches``: what each arm of a study generated and trained on, per round
(mean over seeds and agents), the check that the arms' batches differ as designed."""

from __future__ import annotations

import json
from pathlib import Path

from swarm_lab.study_v3_text import batch_rows


def batches_text(path: Path) -> list[str]:
    """The lines the command prints for the results file at ``path``."""
    results = json.loads(path.read_text())
    config = results["config"]
    lines = [f"{path}: {len(config['seeds'])} seeds x {config['agents']} agents x {config['rounds']} rounds"]
    for name, questions in (config.get("arm_questions") or {}).items():
        lines.append(f"  {name}: B = {questions}; {(config.get('arm_semantics') or {}).get(name, '')}")
    return [*lines, *batch_rows(results)]
