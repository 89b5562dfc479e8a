"""A control's training process seen from the coordinator: ``swarm-worker control --step``
started, fed and read (worker/client/control.py has the lines it speaks).

The coordinator never trains in its own processes, so neither it nor its install needs torch:
a Celery worker that runs controls starts this process with ``settings.CONTROL_PYTHON`` (its own
Python by default; ``SWARM_CONTROL_PYTHON`` names another that has the ``worker`` extra) and
keeps everything that touches the database (claim, heartbeat, pause, metrics, failure) in
controls.py. The process gets the campaign's settings in a file beside its checkpoint, logs to
``<checkpoint>.log`` and runs in a session of its own, so a Ctrl-C meant for the Celery worker
reaches only the worker, which then finishes the round and hands the run back. When the
worker dies, the process reads the end of its input and exits without writing a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import msgspec
from django.conf import settings

from swarm_app.campaigns.models import ControlRun
from swarm_app.runs.local_workers import model_cache

CLOSE_SECONDS = 30.0  # a process asked to stop gets this long before it is killed


class ControlProcessError(RuntimeError):
    """The training process failed: ``str(error)`` is its ``Type: message``, ``details`` its
    traceback (or its log's tail when it died without a word)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class ControlProcess:
    def __init__(self, proc: subprocess.Popen[str], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    @classmethod
    def start(cls, run: ControlRun, checkpoint: Path) -> tuple[ControlProcess, dict[str, Any]]:
        """Start the run's process; returns it with its ``ready`` line (``round``, ``resumed``)."""
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        campaign_file = checkpoint.with_suffix(".campaign.json")
        campaign_file.write_bytes(msgspec.json.encode(run.campaign.settings))
        log_path = checkpoint.with_suffix(".log")
        command = [
            settings.CONTROL_PYTHON,
            "-m",
            "worker.cli",
            "control",
            "--step",
            "--campaign",
            str(campaign_file),
            "--tier",
            run.tier,
            "--arm",
            run.arm,
            "--seed",
            str(run.seed),
            "--checkpoint",
            str(checkpoint),
            "--model-cache",
            str(model_cache()),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                start_new_session=True,
            )
        process = cls(proc, log_path)
        try:
            return process, process.expect("ready")
        except BaseException:
            process.close()
            raise

    def run_round(self) -> dict[str, float]:
        """One round: the agent's metrics (``reward`` among them)."""
        return self.command("round", "round")["metrics"]

    def save(self) -> None:
        """The checkpoint, written after the round's metrics were stored."""
        self.command("save", "saved")

    def command(self, command: str, answer: str) -> dict[str, Any]:
        with contextlib.suppress(BrokenPipeError):  # it exited: expect() says why
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        return self.expect(answer)

    def expect(self, kind: str) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            status = self.proc.wait()
            tail = self.log_tail()
            last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            raise ControlProcessError(
                f"the training process exited with status {status}: {last}", f"{self.log_path}:\n{tail}"
            )
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            raise ControlProcessError(f"the training process wrote {line[:200]!r}, not a JSON line") from None
        if message.get("event") == "error":
            raise ControlProcessError(str(message.get("error")), str(message.get("traceback", "")))
        if message.get("event") != kind:
            raise ControlProcessError(f"the training process answered {message.get('event')!r}, not {kind!r}")
        return message

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def close(self) -> None:
        """End of input: the process exits (after the round it may be running); killed if it
        does not within CLOSE_SECONDS."""
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
