"""``--executor`` of ``swarm-worker study`` and ``heterogeneous`` before any cell runs: without
the study-queue extra, or with a broker that is not Redis, the command says so and stops
(the queue itself: tests/study_queue/test_celery_study.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from worker.cli import main


@pytest.mark.parametrize("command", ["study", "heterogeneous"])
def test_the_celery_executor_without_its_extra_says_what_to_install(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "study_queue.submit", None)  # as where the extra is missing
    out = tmp_path / "results.json"
    assert main([command, "--quick", "--out", str(out), "--executor", "celery"]) == 2
    assert "pip install 'swarm-sapo-lab[study-queue]'" in capsys.readouterr().err
    assert not out.exists()


def test_the_study_queue_needs_a_redis_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.json"
    args = ["study", "--quick", "--out", str(out), "--executor", "celery", "--broker", "amqp://host//"]
    assert main(args) == 2
    assert "needs a Redis broker" in capsys.readouterr().err
    assert not out.exists()
