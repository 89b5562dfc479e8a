"""bench/gpu_check.py on CPU, as the GPU machine that is lent would start it: without msgspec and
reasoning-gym (blocked here), the learner parts run; DIR/gpu_check.json is rewritten after every
part, so a check killed mid-run leaves the parts it finished; its progress is `gpu_check:` lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The check as `python bench/gpu_check.py ...` runs it, in an interpreter where importing msgspec
# or reasoning_gym fails as on the lent machine.
WITHOUT_SAPO_DEPENDENCIES = (
    "import runpy, sys; sys.modules['msgspec'] = None; sys.modules['reasoning_gym'] = None; "
    "sys.argv = ['bench/gpu_check.py', *sys.argv[1:]]; runpy.run_path('bench/gpu_check.py', run_name='__main__')"
)


@pytest.mark.engine
def test_a_check_killed_mid_run_keeps_its_finished_parts(tmp_path: Path):
    report_path = tmp_path / "gpu_check.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WITHOUT_SAPO_DEPENDENCIES,
            "--out",
            str(tmp_path),
            "--parts",
            "memory,precision",
        ],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if report_path.exists() and "memory" in json.loads(report_path.read_text())["ran"]:
                break
            time.sleep(0.1)
        assert process.poll() is None, "the check ended before it could be killed:\n" + process.stdout.read()
        process.send_signal(signal.SIGKILL)  # mid-way through precision: nothing of it is written
    finally:
        process.kill()
        output, _ = process.communicate(timeout=60)

    report = json.loads(report_path.read_text())
    assert report["complete"] is False and report["ran"] == ["memory"] and "precision" not in report
    assert report["parts"] == ["memory", "precision"]
    assert not report["errors"]
    plans = report["memory"]
    assert {(p["tier"], p["card_gib"], p["completion_tokens"]) for p in plans} == {
        (tier, card, tokens)
        for tier in ("qwen2.5-0.5b", "qwen2.5-1.5b")
        for card in (24, 80)
        for tokens in (256, 1024)
    }
    assert all(p["measured"] == "skipped: no CUDA" for p in plans if "estimated_peak_gib" in p)
    lines = [line for line in output.splitlines() if line.startswith("gpu_check: ")]
    assert lines[0].startswith("gpu_check: environment: ")
    assert sum(line.startswith("gpu_check: memory qwen2.5-") for line in lines) == 8


def test_unknown_parts_are_refused():
    result = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--out", "/nonexistent", "--parts", "memory,warp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "unknown parts warp" in result.stderr
