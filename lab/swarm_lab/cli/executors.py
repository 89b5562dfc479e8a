"""``--executor`` and ``--broker`` of ``swarm-worker study`` and ``heterogeneous``: where a
study's cells run. ``local``: processes on this machine (``--jobs``); ``celery``: tasks on the
``study`` queue (docs/study-queue.md), run by the ``study_queue`` package, which this package
never imports by name (it imports no Celery: pyproject.toml's import-linter contracts)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

from swarm_lab.study import StudyError
from swarm_lab.study_runner import CellExecutor

EXECUTORS = ("local", "celery")
CELERY_EXECUTOR = "study_queue.submit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where cells run: local processes (--jobs), or celery: tasks on the `study` queue that "
        "any `celery -A study_queue worker -Q study` runs (extra `study-queue`; docs/study-queue.md)",
    )
    parser.add_argument(
        "--broker",
        default=None,
        help="--executor celery: the Redis broker's URL (default: $SWARM_STUDY_BROKER, else $REDIS_URL, "
        "else redis://127.0.0.1:6379/0)",
    )


def cell_executor(args: argparse.Namespace, out: Path, log: Callable[[str], None]) -> CellExecutor | None:
    """The executor ``args`` ask for (None: local processes); raises :class:`StudyError` when
    the Celery one's extra is not installed."""
    if args.executor == "local":
        return None
    try:
        module = importlib.import_module(CELERY_EXECUTOR)
    except ImportError as error:
        raise StudyError(
            f"--executor celery needs the study-queue extra (pip install 'swarm-sapo-lab[study-queue]'): {error}"
        ) from None
    try:
        return module.CeleryExecutor(out, broker=args.broker, log=log)
    except ValueError as error:
        raise StudyError(str(error)) from None
