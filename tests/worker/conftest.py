from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items) -> None:
    """Every test under tests/worker/ is marked `engine`: the worker never touches the
    coordinator's database, broker or channel layer, so its outcome cannot depend on the mode
    and CI runs it once (in the PostgreSQL + Redis pass), not twice. (This hook sees every
    collected item, not only this directory's: hence the path test.)"""
    for item in items:
        if item.path.resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.engine)
