"""The volunteers' one command (swarm_app/core/join.py): the same everywhere it is shown, the
install script the coordinator serves (its torch choice, its refusals) and the worker wheel it
serves. tests/system/test_join_command.py runs the command itself in a fresh virtual environment."""

from __future__ import annotations

import hashlib
import html
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from django.contrib.auth import get_user_model
from django.test import Client

import worker
from swarm_app.campaigns.models import Campaign
from swarm_app.core import join
from tests.factories import tiny_campaign_config

ROOT = Path(__file__).resolve().parents[2]
# The interpreter itself, not a shim or a virtual environment's link (found without PATH).
PYTHON = os.path.realpath(sys.executable)
H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f3c0c1e-0000-0000-0000-000000000000)\n"


def served_script(tmp_path: Path, settings, public_url: str = "https://swarm.example/") -> Path:
    settings.SWARM_PUBLIC_URL = public_url
    response = Client().get("/join.sh")
    assert response.status_code == 200 and response["Content-Type"] == "text/x-shellscript"
    script = tmp_path / "join.sh"
    script.write_bytes(response.content)
    return script


def fake_tools(directory: Path, **scripts: str) -> Path:
    """A PATH directory with the given shell stubs, plus links to the real tools the script uses."""
    directory.mkdir(exist_ok=True)
    real = {"uname": shutil.which("uname"), "grep": shutil.which("grep"), "python3": PYTHON}
    for tool, path in real.items():
        if path and tool not in scripts:
            (directory / tool).symlink_to(path)
    for name, body in scripts.items():
        stub = directory / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    return directory


def dry_run(script: Path, tools: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(script), "--dry-run", "--venv", str(tmp_path / "venv"), *args],
        env={"PATH": str(tools), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_is_the_same_on_the_pages_in_the_docs_and_in_the_workers_unit(db, settings):
    settings.SWARM_PUBLIC_URL = "https://swarm.example/"
    campaign = Campaign.objects.create(
        name="open", state=Campaign.State.RUNNING, config=tiny_campaign_config(3, 8).to_json()
    )
    page = Client().get(campaign.get_absolute_url()).content.decode()
    shown = join.volunteer_command("https://swarm.example/", "<your token>")
    assert shown == "curl -fsSL https://swarm.example/join.sh | sh -s -- --token <your token>"
    assert f'<pre id="join-campaign-line">{html.escape(shown)}</pre>' in page

    organizer = get_user_model().objects.create_user("organizer", password="pw-organizer", is_staff=True)
    staff = Client()
    staff.force_login(organizer)
    page = staff.post(f"/campaigns/{campaign.pk}/tokens/", {"label": "lab"}).content.decode()
    secret = re.search(r'<pre id="token-secret">(swt_[^<]+)</pre>', page).group(1)
    assert f'<pre id="join-line">{join.volunteer_command("https://swarm.example/", secret)}</pre>' in page

    documented = join.volunteer_command(join.DOCS_COORDINATOR, "swt_...")
    for doc in ("docs/volunteers.md", "docs/deploy.md", "README.md"):
        assert documented in (ROOT / doc).read_text(), doc
    unit = (ROOT / "platform/systemd/swarm-worker.service").read_text()
    assert f"#   {join.service_install_command(join.UNIT_COORDINATOR)}" in unit.replace("| sudo sh", "| sh")
    assert f"ExecStart={join.UNIT_VENV}/bin/swarm-worker join " in unit
    # No other way to install the worker is shown to volunteers.
    for doc in ("docs/volunteers.md", "platform/systemd/swarm-worker.service"):
        assert "pip install 'swarm-sapo" not in (ROOT / doc).read_text(), doc


def test_a_linux_machine_without_an_nvidia_gpu_gets_torch_from_the_cpu_only_index(tmp_path, settings):
    script = served_script(tmp_path, settings)
    torch = join.torch_version()
    cpu = f"-m pip install --index-url {join.TORCH_CPU_INDEX} torch=={torch}"
    bare = f"-m pip install torch=={torch}"

    no_driver = dry_run(script, fake_tools(tmp_path / "none"), tmp_path, "--token", "swt_x")
    assert no_driver.returncode == 0, no_driver.stderr
    assert cpu in no_driver.stdout and bare not in no_driver.stdout
    assert "no NVIDIA GPU" in no_driver.stderr
    # A driver without a device: nvidia-smi -L says "No devices were found" and fails.
    no_device = fake_tools(tmp_path / "nodevice", **{"nvidia-smi": "echo 'No devices were found'; exit 6"})
    assert cpu in dry_run(script, no_device, tmp_path).stdout

    gpu = dry_run(script, fake_tools(tmp_path / "gpu", **{"nvidia-smi": f"printf '{H100}'"}), tmp_path)
    assert gpu.returncode == 0, gpu.stderr
    assert bare in gpu.stdout and "--index-url" not in gpu.stdout
    mac = dry_run(script, fake_tools(tmp_path / "mac", uname="echo Darwin"), tmp_path)
    assert bare in mac.stdout and "--index-url" not in mac.stdout

    # Then this coordinator's wheel, and the join with the coordinator's address and the arguments.
    wheel = join.worker_wheel()
    wheel_url = f"https://swarm.example/join/{wheel.filename}#sha256={wheel.sha256}"
    assert f"-m pip install swarm-sapo[worker] @ {wheel_url}\n" in no_driver.stdout
    assert "/bin/swarm-worker join https://swarm.example/ --token swt_x\n" in no_driver.stdout
    assert not (tmp_path / "venv").exists()  # a dry run changes nothing


def test_the_script_says_what_to_do_without_python_3_11(tmp_path, settings):
    script = served_script(tmp_path, settings)
    old = fake_tools(
        tmp_path / "old",
        python3='case "$*" in *--version*) echo "Python 3.9.2";; *) exit 1;; esac',
    )
    result = dry_run(script, old, tmp_path, "--token", "swt_x")
    assert result.returncode == 1 and not result.stdout
    assert "needs Python 3.11 or newer, and this machine's python3 is Python 3.9.2" in result.stderr
    assert "sudo apt install python3.11 python3.11-venv" in result.stderr
    result = dry_run(script, old, tmp_path, "--venv")
    assert result.returncode == 1 and "--venv needs a directory" in result.stderr


def test_the_served_wheel_is_the_coordinators_worker(db, settings, tmp_path):
    script = served_script(tmp_path, settings).read_text()
    wheel_url = re.search(r"^WORKER_WHEEL='(\S+)'$", script, re.MULTILINE).group(1)
    path, digest = wheel_url.removeprefix("https://swarm.example").split("#sha256=")
    response = Client().get(path)
    assert response.status_code == 200
    data = response.content
    assert hashlib.sha256(data).hexdigest() == digest
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = set(archive.namelist())
        package = Path(worker.__file__).parent
        protocol = package / "shared" / "protocol.py"
        assert archive.read("worker/shared/protocol.py") == protocol.read_bytes()
        assert "worker/models/tiny-1m/SHA256SUMS" in names
        assert not any(name.startswith("swarm_app/") or "__pycache__" in name for name in names)
        dist_info = path.rsplit("/", 1)[1].split("-py3")[0] + ".dist-info"
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        assert f'Requires-Dist: torch=={join.torch_version()}; extra == "worker"' in metadata
        assert "swarm-worker = worker.cli:main" in archive.read(f"{dist_info}/entry_points.txt").decode()
        record = archive.read(f"{dist_info}/RECORD").decode().splitlines()
        assert len(record) == len(names)
    assert Client().get("/join/swarm_sapo-0.0.1-py3-none-any.whl").status_code == 404


def test_pip_accepts_the_wheel(tmp_path):
    """pip reads the wheel and its metadata (no download, no install)."""
    wheel = join.worker_wheel()
    path = tmp_path / wheel.filename
    path.write_bytes(wheel.data)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            f"swarm-sapo[worker] @ {path.as_uri()}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"Would install swarm-sapo-{wheel.filename.split('-')[1]}" in result.stdout
