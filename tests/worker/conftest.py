from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Engine tests outside tests/worker/engine/ that CI also runs in the embedded pass, so that the
# two passes take about as long (the CI of 1b00a9c: PostgreSQL pass 1,261 s, embedded 1,005 s).
EMBEDDED_PASS = (HERE / "research" / "test_study.py", HERE / "research" / "test_heterogeneous.py")


def pytest_collection_modifyitems(config, items) -> None:
    """Every test under tests/worker/ is marked `engine`: the worker never touches the
    coordinator's database, broker or channel layer, so its outcome cannot depend on the mode
    and CI runs it once, not twice. Those under tests/worker/engine/ are also marked
    `worker_engine`; they and the files of EMBEDDED_PASS are marked `embedded_pass`: CI runs
    those in the embedded pass and the other `engine` tests in the PostgreSQL + Redis pass, so
    that the two passes take about as long (.ci/run). (This hook sees every collected item, not
    only this directory's: hence the path test.)"""
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(HERE):
            item.add_marker(pytest.mark.engine)
            if path.is_relative_to(HERE / "engine"):
                item.add_marker(pytest.mark.worker_engine)
                item.add_marker(pytest.mark.embedded_pass)
            elif path in EMBEDDED_PASS:
                item.add_marker(pytest.mark.embedded_pass)
