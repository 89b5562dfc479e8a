"""The volunteers' one command, run as the page shows it, against a live coordinator, into a fresh
virtual environment: the coordinator's install script installs torch's CPU-only build (this
machine has no NVIDIA GPU) and the coordinator's own worker wheel, then joins; the node trains a
round and the coordinator records it.

PyTorch's CPU index is not reachable from this machine, so SWARM_TORCH_CPU_INDEX (the script's
mirror setting) points at a local index of the same kind: the same wheel (/opt/wheels) and the
projects torch requires (from this machine's local index, /opt/pypi). The worker's other
requirements come from pip's configured indexes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode
from swarm_app.coordinator.tokens import create_token
from swarm_app.core import join
from tests.factories import tiny_campaign_config
from tests.servers import asgi_server

# What it checks (a wheel served, installed and joined) does not depend on the database or broker.
pytestmark = [pytest.mark.slow, pytest.mark.one_mode]

LOCAL_WHEELS = Path("/opt/wheels")
LOCAL_INDEX = Path("/opt/pypi/simple")
INSTALL_TIMEOUT = 900  # seconds: torch and transformers unpacked on 2 shared cores


def cpu_index(tmp_path: Path) -> Path:
    """A PEP 503 index like PyTorch's CPU one: the CPU torch wheel (from /opt/wheels) and the
    projects torch requires (PyTorch's index hosts them too; here from the local index)."""
    wheels = sorted(LOCAL_WHEELS.glob(f"torch-{join.torch_version()}+cpu-*.whl"))
    if not wheels:
        pytest.fail(
            f"no CPU torch {join.torch_version()} wheel in {LOCAL_WHEELS} to stand in for PyTorch's index"
        )
    index = tmp_path / "torch-cpu"
    for project in LOCAL_INDEX.iterdir():
        if project.name != "torch" and (project / "index.html").exists():
            (index / project.name).mkdir(parents=True)
            page = (
                (project / "index.html")
                .read_text()
                .replace('href="../../', f'href="{LOCAL_INDEX.parent.as_uri()}/')
            )
            (index / project.name / "index.html").write_text(page)
    (index / "torch").mkdir(parents=True)
    links = "".join(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n' for wheel in wheels)
    (index / "torch" / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return index


def test_the_join_command_installs_into_a_fresh_environment_and_joins(transactional_db, tmp_path):
    config = tiny_campaign_config(rounds=50, max_new_tokens=12)
    campaign = Campaign.objects.create(name="join", state=Campaign.State.RUNNING, config=config.to_json())
    secret = create_token(campaign, "join command")[1]
    venv = tmp_path / "venv"
    with asgi_server(tmp_path / "daphne.log") as site:
        command = join.volunteer_command(f"{site}/", secret)
        result = subprocess.run(
            # The page's command, with the script's --venv first and join's options after the token.
            command.replace(" -s -- ", f" -s -- --venv {venv} ")
            + f" --max-rounds 1 --no-status --threads 1 --data-dir {tmp_path / 'node'}",
            shell=True,
            env={
                **os.environ,
                "HOME": str(tmp_path),
                "SWARM_TORCH_CPU_INDEX": cpu_index(tmp_path).as_uri(),
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": "",
            },
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "no NVIDIA GPU: torch" in output
    node = WorkerNode.objects.get(campaign=campaign)
    assert node.accepted_submissions >= 1, output[-3000:]

    # The environment holds the CPU build and this coordinator's worker, not a checkout's.
    check = subprocess.run(
        [
            str(venv / "bin/python"),
            "-c",
            "import importlib.metadata as m, worker.shared.protocol as p; "
            "print(m.version('torch'), p.__file__, m.distribution('swarm-sapo').read_text('direct_url.json'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    torch_version, protocol_file, direct_url = check.stdout.split(" ", 2)
    assert torch_version == f"{join.torch_version()}+cpu"
    assert protocol_file.startswith(str(venv)) and f"{site}/join/" in direct_url
    assert not any(
        name.startswith("nvidia")
        for name in os.listdir(next((venv / "lib").glob("python*")) / "site-packages")
    )
