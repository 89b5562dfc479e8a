from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items) -> None:
    """Every test under tests/worker/ is marked `engine`: the worker never touches the
    coordinator's database, broker or channel layer, so its outcome cannot depend on the mode
    and CI runs it once, not twice. Those under tests/worker/engine/ are also marked
    `worker_engine`: CI runs them in the embedded pass and the other `engine` tests in the
    PostgreSQL + Redis pass, so that the two passes take about as long (.ci/run). (This hook sees
    every collected item, not only this directory's: hence the path test.)"""
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(HERE):
            item.add_marker(pytest.mark.engine)
            if path.is_relative_to(HERE / "engine"):
                item.add_marker(pytest.mark.worker_engine)
