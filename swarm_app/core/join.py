"""The one command a volunteer runs to install the worker and join, generated here for every
place that shows it: a campaign's "Join this campaign" section, the token pages, docs/volunteers.md,
docs/deploy.md and the header of platform/systemd/swarm-worker.service (tests/core/test_join.py
checks that they all show :func:`join_command`'s output).

The command fetches the coordinator's own install script (``/join.sh``, :func:`install_script`),
which installs into a virtual environment

* torch at the worker extra's pin, from PyTorch's CPU-only wheels on a Linux machine without an
  NVIDIA GPU (``nvidia-smi -L`` lists none; the Python Package Index's Linux torch is the CUDA
  build, several GB with its nvidia-* libraries), from the Python Package Index elsewhere (the CUDA
  build on Linux with an NVIDIA GPU, the CPU/MPS build on macOS);
* the coordinator's own worker wheel (``/join/<wheel>``, :func:`worker_wheel`: the ``worker``
  package this coordinator runs, so the worker speaks its protocol version), with the worker
  extra's other requirements from the Python Package Index;

then runs ``swarm-worker join`` with the coordinator's address (SWARM_PUBLIC_URL; the address a
page was browsed at only when the setting is missing, and then the pages say so).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import io
import re
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest
from django.template.loader import render_to_string

import worker

DISTRIBUTION = "swarm-sapo"
# PyTorch's own index of CPU-only wheels (Linux x86_64 and aarch64, macOS, Windows).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SCRIPT_PATH = "join.sh"
# Placeholders the docs and the worker's unit show (docs/volunteers.md, docs/deploy.md).
DOCS_COORDINATOR = "https://coordinator.example/"
UNIT_COORDINATOR = "https://swarm.example.org/"
UNIT_VENV = "/opt/swarm-worker"


def join_url(request: HttpRequest) -> str:
    """The coordinator's address for a join command: SWARM_PUBLIC_URL, else the address being
    browsed (a fallback: check :func:`public_url_set` and warn)."""
    return settings.SWARM_PUBLIC_URL or request.build_absolute_uri("/")


def absolute(request: HttpRequest, path: str) -> str:
    """``path`` (from /) at the address of :func:`join_url` (an invite link)."""
    return join_url(request).rstrip("/") + path


def public_url_set() -> bool:
    return bool(settings.SWARM_PUBLIC_URL)


def join_command(coordinator: str, arguments: str) -> str:
    """The command a volunteer runs: fetch ``coordinator``'s install script and run it with
    ``arguments`` (the script's own ``--venv DIR``/``--install-only``, then ``swarm-worker join``'s,
    e.g. ``--token swt_...``)."""
    return f"curl -fsSL {coordinator.rstrip('/')}/{SCRIPT_PATH} | sh -s -- {arguments}"


def volunteer_command(coordinator: str, token: str) -> str:
    """Install and join with ``token``: what the pages and docs/volunteers.md show."""
    return join_command(coordinator, f"--token {token}")


def service_install_command(coordinator: str) -> str:
    """Install only, into the virtual environment the worker's systemd unit runs from."""
    return join_command(coordinator, f"--venv {UNIT_VENV} --install-only")


def installed_distribution() -> importlib.metadata.Distribution:
    """The project's installed metadata: its dist-info. An editable install's build also leaves
    an egg-info in the checkout, which comes first on sys.path where the checkout is the working
    directory (the tests, a fresh clone) and has no METADATA file: passed over."""
    found = list(importlib.metadata.distributions(name=DISTRIBUTION))
    if not found:
        raise importlib.metadata.PackageNotFoundError(DISTRIBUTION)
    return next((d for d in found if d.read_text("METADATA")), found[0])


def torch_version() -> str:
    """The worker extra's torch pin (pyproject.toml), read from the installed metadata."""
    for requirement in installed_distribution().requires or []:
        pin = re.fullmatch(r'torch==([\w.]+)\s*;\s*extra\s*==\s*"worker"', requirement)
        if pin:
            return pin.group(1)
    raise LookupError(f"{DISTRIBUTION}'s worker extra has no torch==<version> pin")


@dataclass(frozen=True)
class Wheel:
    filename: str
    data: bytes
    sha256: str


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


@functools.cache
def worker_wheel() -> Wheel:
    """A wheel of the ``worker`` package this coordinator runs (its protocol, its shipped tiny
    models) with the project's metadata (requirements, extras, the ``swarm-worker`` command).
    Built once per process, in memory, from the installed files: no build tool needed; the
    coordinator's own ``swarm_app`` is left out (the worker never imports it)."""
    distribution = installed_distribution()
    version = distribution.version
    dist_info = f"swarm_sapo-{version}.dist-info"
    package = Path(worker.__file__).parent
    files: list[tuple[str, bytes]] = [
        (f"worker/{path.relative_to(package).as_posix()}", path.read_bytes())
        for path in sorted(package.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    ]
    metadata = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    files += [
        (f"{dist_info}/METADATA", metadata.encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: swarm-coordinator\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{dist_info}/entry_points.txt", (distribution.read_text("entry_points.txt") or "").encode()),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files)
    record += f"{dist_info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [*files, (f"{dist_info}/RECORD", record.encode())]:
            # A fixed date: the same files give the same wheel (and hash) in every process.
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    data = buffer.getvalue()
    return Wheel(f"swarm_sapo-{version}-py3-none-any.whl", data, hashlib.sha256(data).hexdigest())


def install_script(coordinator: str) -> str:
    """The install-and-join script served at /join.sh, for the coordinator at ``coordinator``."""
    wheel = worker_wheel()
    base = coordinator.rstrip("/")
    values = {
        "coordinator": base + "/",
        "wheel_url": f"{base}/join/{wheel.filename}#sha256={wheel.sha256}",
        "torch_version": torch_version(),
        "torch_cpu_index": TORCH_CPU_INDEX,
        "command": volunteer_command(base + "/", "swt_..."),
    }
    return render_to_string(
        "core/join.sh",
        {key: shlex.quote(value) for key, value in values.items()} | {"command_text": values["command"]},
    )
