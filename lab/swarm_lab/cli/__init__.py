"""The lab's ``swarm-worker`` commands: ``study``, ``study-report``, ``study-batches``
(``study.py``) and ``heterogeneous`` (``heterogeneous.py``), with the study executors
(``executors.py``). worker/cli finds them through the ``swarm_worker.commands`` entry point
(lab/pyproject.toml), and the study's arms by name through ``swarm_worker.arms``."""

from __future__ import annotations

from typing import Any

from swarm_lab.cli import heterogeneous, study
from worker.shared.arms import Arm

# The commands this entry point adds, in the order ``swarm-worker --help`` lists them.
COMMANDS = ("study", "study-report", "study-batches", "heterogeneous")


def add_parsers(sub: Any) -> None:
    """Add the lab's commands to ``swarm-worker``'s subparsers."""
    study.add_parsers(sub)
    heterogeneous.add_parser(sub)


def resolve_arm(name: str, self_window: int) -> Arm:
    """``swarm-worker simulate --arms``: a study arm by name (``<arm>@B<n>`` too) at the
    simulation's 4/4-self window; raises ValueError for a name the study does not know."""
    from swarm_lab.study import StudyError
    from swarm_lab.study import resolve_arm as study_arm

    try:
        return study_arm(name, self_window)
    except StudyError as error:
        raise ValueError(str(error)) from None
