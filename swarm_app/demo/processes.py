"""The processes a one-machine campaign runs, shared by ``manage.py demo`` and
``manage.py validation_campaign``: the ASGI server, a Celery worker with beat, the Celery worker
of the ``controls`` queue, local ``swarm-worker join`` processes, and their orderly stop.

Every child runs in its own process group of the caller's session (Linux's autogroup scheduler
shares the CPU per session, docs/deploy.md), logs to ``<log dir>/<name>.log``, and training
processes run at niceness SWARM_TRAINING_NICE with one torch thread (local_workers.training_command).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from swarm_app.core.consumers import daphne_command
from swarm_app.runs.local_workers import training_command

ROOT = Path(settings.BASE_DIR)


def interrupt(signum: int, frame: object) -> None:
    """A signal handler that turns SIGTERM and SIGHUP into KeyboardInterrupt (Ctrl-C's path)."""
    raise KeyboardInterrupt


def catch_stop_signals() -> None:
    """Ctrl-C, a closed terminal and ``kill`` all stop a command the same way (KeyboardInterrupt).
    SIGINT is set explicitly because a shell starts background jobs with it ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)


def ignore_stop_signals() -> None:
    """While children are being stopped, a second Ctrl-C must not cut the stop short."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def stop_campaign_and_children(campaign: Any, children: Children) -> list[str]:
    """Stop the campaign, then every child process (workers first, so that they give their
    leases back); a second Ctrl-C is ignored meanwhile. The campaign first: its controls then end
    after their current round, so Celery's warm shutdown does not wait on them, and no control is
    left marked running. Returns the children killed after 30 s without stopping."""
    from swarm_app.runs.lifecycle import stop

    ignore_stop_signals()
    campaign.refresh_from_db()
    if not campaign.is_finished:
        stop(campaign)
    return children.stop(first=("worker", "controls"))


def service_env(cache: Path) -> dict[str, str]:
    """The environment of every child of a one-machine campaign: local workers allowed, one
    OpenMP thread, one model cache for all, plain-http cookies (loopback)."""
    return {
        "SWARM_ALLOW_LOCAL_WORKERS": "1",
        "OMP_NUM_THREADS": "1",
        "SWARM_MODEL_CACHE": str(cache),
        "SECURE_COOKIES": "0",
    }


class Children:
    """A command's child processes, each in its own process group (of the command's session),
    stopped in reverse order."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, args: list[str], **env: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the child
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own process group: Ctrl-C reaches the command only, which stops the children in
            # order. The same session, though: Linux's autogroup scheduler shares the CPU per
            # session, so children in sessions of their own would each get an equal share
            # (measured: the 12 control runs of Celery's one session crawled at a fifth of the
            # machine while 4 worker processes had the rest).
            process_group=0,
        )
        self.procs.append((name, proc))
        return proc

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs if proc.poll() is not None and proc.returncode != 0]

    def stop(self, first: tuple[str, ...] = ("worker",), timeout: float = 30.0) -> list[str]:
        """Stop the children named ``first`` (workers: they give their leases back and say goodbye
        while the server still runs), then the others in reverse order of start. Each gets
        SIGTERM (its own shutdown; Celery waits for its tasks); a child still running after
        ``timeout`` seconds, and anything a child left in its process group, gets SIGKILL.
        Returns the names of the killed children."""
        leading = [p for p in self.procs if p[0].startswith(first)]
        rest = [p for p in reversed(self.procs) if p not in leading]
        return self._terminate(leading, timeout) + self._terminate(rest, timeout)

    @staticmethod
    def _terminate(procs: list[tuple[str, subprocess.Popen]], timeout: float) -> list[str]:
        for _, proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        killed = []
        for name, proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                killed.append(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return killed


def start_services(
    children: Children, python: str, port: int, state_dir: Path, control_runs: int, env: dict[str, str]
) -> str:
    """Start the ASGI server, a Celery worker of the ``celery`` queue with beat (housekeeping),
    and a Celery worker of the ``controls`` queue with one thread per control run (a control's
    task waits on its node process for the whole campaign). Returns the server's base URL."""
    url = f"http://127.0.0.1:{port}"
    children.start("daphne", daphne_command(python, port), **env)
    celery = [python, "-m", "celery", "-A", "swarm_app", "worker", "-l", "info"]
    children.start(
        "celery",
        [
            *celery,
            "-Q",
            "celery",
            "--beat",
            "--concurrency",
            "1",
            "--schedule",
            str(state_dir / "celerybeat-schedule"),
        ],
        **env,
    )
    children.start(
        "controls",
        [*celery, "-Q", "controls", "--pool", "threads", "--concurrency", str(max(control_runs, 1))],
        SWARM_CONTROL_URL=url,
        **env,
    )
    return url


def start_training(
    children: Children,
    name: str,
    python: str,
    url: str,
    data_dir: Path,
    nodes: int,
    tier: str,
    secret: str,
    env: dict[str, str],
) -> subprocess.Popen:
    """One local ``swarm-worker join`` process of ``nodes`` nodes of ``tier`` (its identity and
    checkpoints in ``data_dir``), the worker token in its environment."""
    return children.start(
        name,
        [*training_command(python, url, data_dir, nodes), "--tier", tier],
        SWARM_TOKEN=secret,
        **env,
    )


def wait_http(url: str, children: Children, timeout: float = 60.0) -> None:
    """Wait until the server answers ``/healthz``; CommandError if a child died or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if children.dead():
            raise CommandError(f"{', '.join(children.dead())} failed to start; see its log")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise CommandError(f"the ASGI server did not answer at {url} within {timeout:.0f} s")


def process_tree_rss(root: int) -> dict[int, int]:
    """{pid: resident set size in bytes} of ``root`` and every descendant (Linux /proc; {} where
    /proc is not there). A process that exits while being read is left out."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: the fields after its ")"
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(statm[1]) * page
    tree = {root} if root in rss else set()
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: rss[pid] for pid in tree}
