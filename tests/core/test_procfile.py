"""platform/Procfile's `web`, run as honcho runs it (`sh -c` with PORT set, the shipped settings
filled in): the deployment checks pass, then daphne listens on 127.0.0.1 only, never on every
address (it believes X-Forwarded-For: a client that reached it directly could choose its address
and step around the login throttle)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.core.test_security_settings import PLATFORM, ROOT, production_env
from tests.servers import free_port, stop


def listening(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (IPv4 and IPv6), from /proc."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                addresses.add(address)
    return addresses


@pytest.mark.parametrize("bind_setting", ["platform/.env.example's", "unset"])
def test_the_procfiles_web_listens_on_loopback_only(tmp_path, bind_setting):
    web = next(line for line in (PLATFORM / "Procfile").read_text().splitlines() if line.startswith("web:"))
    port = free_port()
    # honcho sets PORT (-p 8000: 8000) and runs in the virtual environment (on PATH).
    env = production_env(tmp_path, PORT=str(port), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if bind_setting == "unset":
        del env["SWARM_BIND_ADDRESS"]
    with open(tmp_path / "web.log", "wb") as log:
        proc = subprocess.Popen(
            ["sh", "-c", web.removeprefix("web:").strip()],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not listening(port):
            assert proc.poll() is None, (tmp_path / "web.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "web did not listen"
            time.sleep(0.3)
        assert listening(port) == {"0100007F"}  # 127.0.0.1, little-endian hex; nothing else
    finally:
        stop(proc)


def normalized(command: list[str]) -> list[str]:
    """A start command with what differs by design made equal: the program's directory, the
    slots setting's syntax (shell, systemd, compose) and the data directory's path."""
    words = [Path(command[0]).name, *command[1:]]
    words = [re.sub(r"\$\{SWARM_CONTROL_SLOTS(:-16)?\}", "$SLOTS", word) for word in words]
    return [re.sub(r"^(\$\{SWARM_DATA_DIR:-data\}|/srv/swarm/data)/", "$DATA/", word) for word in words]


def test_procfile_systemd_and_compose_run_the_same_celery_commands():
    procfile = dict(
        line.split(": ", 1)
        for line in (PLATFORM / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    )
    units = {
        name: next(
            line.removeprefix("ExecStart=")
            for line in (PLATFORM / "systemd" / f"swarm-celery-{unit}.service").read_text().splitlines()
            if line.startswith("ExecStart=")
        )
        for name, unit in (("worker", "worker"), ("controls", "controls"), ("beat", "beat"))
    }
    services = yaml.safe_load((PLATFORM / "compose.yaml").read_text())["services"]
    compose = {
        "worker": services["celery-worker"]["command"],
        "controls": services["celery-controls"]["command"],
        "beat": services["celery-beat"]["command"],
    }
    for name in ("worker", "controls", "beat"):
        shipped = normalized(shlex.split(procfile[name]))
        assert normalized(shlex.split(units[name])) == shipped, name
        assert normalized(compose[name]) == shipped, name
    assert "--concurrency" in procfile["controls"] and "$SLOTS" in normalized(
        shlex.split(procfile["controls"])
    )
    # The systemd unit's default for the slots is the settings' default.
    controls_unit = (PLATFORM / "systemd" / "swarm-celery-controls.service").read_text()
    assert (
        "Environment=SWARM_CONTROL_SLOTS=16\n" in controls_unit
        and "${SWARM_CONTROL_SLOTS:-16}" in procfile["controls"]
    )
