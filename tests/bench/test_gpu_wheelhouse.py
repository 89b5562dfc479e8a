"""bench/gpu_wheelhouse.py: the wheelhouse stays under the 64 MiB that travel, and installed with
`pip install --no-index --find-links` into a fresh virtualenv that holds only what the lent
machine has (the CPU torch, transformers and their company), it runs the check's SAPO part.

Gated by SWARM_WHEELHOUSE_TEST=1: it downloads from the package registry and installs torch
and transformers into a new virtualenv (about 1 GB, minutes on 2 cores), too much for every
run of the suite; run it when the wheelhouse or the check's imports change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the lent GPU machine's Python holds beside torch and transformers (docs/vllm.md).
ALREADY_THERE = ["torch==2.13.0", "transformers==5.19.0", "numpy", "sympy", "pyyaml", "matplotlib", "rich"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.engine,
    pytest.mark.skipif(
        os.environ.get("SWARM_WHEELHOUSE_TEST") != "1",
        reason="installs about 1 GB into a fresh virtualenv from the registry: SWARM_WHEELHOUSE_TEST=1",
    ),
]


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], check=True, text=True, capture_output=True, **kwargs)


def test_the_wheelhouse_installs_offline_and_runs_the_sapo_part(tmp_path: Path):
    wheels = tmp_path / "wheels"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"  # this machine's, not 3.12
    run(sys.executable, ROOT / "bench/gpu_wheelhouse.py", "--out", wheels, "--python-version", version)
    assert sum(path.stat().st_size for path in wheels.iterdir()) < 64 * 1024**2

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", *ALREADY_THERE, timeout=1800)
    for missing in ("msgspec", "reasoning_gym"):  # as on the lent machine
        assert subprocess.run([python, "-c", f"import {missing}"], capture_output=True).returncode != 0
    run(
        python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, "msgspec", "reasoning-gym"
    )

    out = tmp_path / "check"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = run(
        python, "bench/gpu_check.py", "--out", out, "--parts", "sapo", cwd=ROOT, env=env, timeout=900
    )
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["ran"] == ["sapo"] and not report["errors"], result.stdout
    assert [r["trained"] for r in report["sapo"]["rounds"]] == [[1.0, 1.0]] * 3
    # the modules every part imports, all of them in that virtualenv
    imports = "import bench.gpu_learner, bench.gpu_engines, worker.engine.agent, worker.shared.questions"
    run(python, "-c", imports, cwd=ROOT, env=env)
