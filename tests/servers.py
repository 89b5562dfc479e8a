"""Real server processes for tests: the ASGI coordinator (daphne) and Celery workers.

Each runs as a child process against the *test* database, so what a test stores through the
ORM is what the server sees, and the other way round.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from django.db import connection

from swarm_app.core.consumers import daphne_command

ROOT = Path(__file__).resolve().parent.parent
# The key scripts/test.sh exports too; public, so never a production key.
TEST_SECRET_KEY = "insecure-key-for-tests-only-never-use-it-in-production"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url_for_tests() -> str:
    """A DATABASE_URL for the database the tests are using right now (the test database)."""
    settings_dict = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or ""
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgres://{auth}{settings_dict['HOST'] or '127.0.0.1'}{port}/{settings_dict['NAME']}"


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url_for_tests(),
            # 50+ characters: production mode (REDIS_URL, as in CI) refuses shorter keys.
            "SECRET_KEY": TEST_SECRET_KEY,
            # Loopback servers speak plain http: cookies marked Secure would never come back.
            "SECURE_COOKIES": "0",
            "PYTHONUNBUFFERED": "1",
            # One torch thread per process: several processes share 2 cores in the tests.
            "OMP_NUM_THREADS": "1",
        }
    )
    env.update(extra)
    return env


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status < 500:
                    return
        except Exception as error:  # connection refused while the server starts
            last_error = error
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s: {last_error}")


def stop(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def start_asgi(log_path: Path, port: int | None = None, **env: str) -> tuple[subprocess.Popen, str]:
    """Start daphne on a loopback port (a free one by default) and wait until it answers; returns
    the process (the caller stops it) and its base URL."""
    port = port or free_port()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            daphne_command(sys.executable, port),
            cwd=ROOT,
            env=server_env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", proc=proc)
    except BaseException:
        stop(proc)
        raise
    return proc, base


@contextmanager
def asgi_server(log_path: Path, port: int | None = None, **env: str) -> Iterator[str]:
    """Start daphne on a loopback port (a free one by default); yield its base URL."""
    proc, base = start_asgi(log_path, port, **env)
    try:
        yield base
    finally:
        stop(proc)


@contextmanager
def asgi_servers(log_dir: Path, count: int, **env: str) -> Iterator[str]:
    """Start ``count`` daphne processes on one loopback port (a listening socket they all
    inherit: each accepted connection goes to one of them) and wait until each answers; yield
    the base URL. One process is ``asgi_server``; several are the one-box form of docs/deploy.md's
    "Scaling out" without a proxy in front."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(socket.SOMAXCONN)
    fd = listener.fileno()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    procs: list[subprocess.Popen] = []
    try:
        for i in range(count):
            log_path = log_dir / f"daphne-{i}.log"
            with open(log_path, "ab") as log:
                procs.append(
                    subprocess.Popen(
                        daphne_command(sys.executable, fd=fd),
                        cwd=ROOT,
                        env=server_env(**env),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        pass_fds=(fd,),
                    )
                )
        deadline = time.monotonic() + 60
        for proc, i in zip(procs, range(count), strict=True):
            log_path = log_dir / f"daphne-{i}.log"
            while b"Listening on" not in log_path.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"daphne {i} did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.2)
        listener.close()  # the servers hold their own copies
        wait_http(f"{base}/healthz")
        yield base
    finally:
        listener.close()
        for proc in procs:
            stop(proc)


@contextmanager
def celery_worker(
    log_path: Path, beat: bool = False, controls: int = 0, processes: int = 0, **env: str
) -> Iterator[subprocess.Popen]:
    """A real Celery worker on the test database and the configured broker: housekeeping (the
    default queue, solo pool), with ``processes`` > 0 the default queue's worker as
    platform/Procfile runs it (prefork, that many processes), or with ``controls`` > 0 a worker
    of the ``controls`` queue with that many threads (as the shipped start commands run them:
    docs/deploy.md)."""
    args = [sys.executable, "-m", "celery", "-A", "swarm_app", "worker", "-l", "info"]
    if controls:
        args += ["-Q", "controls", "--pool", "threads", "--concurrency", str(controls)]
    elif processes:
        args += ["-Q", "celery", "--pool", "prefork", "--concurrency", str(processes)]
    else:
        args += ["--pool", "solo"]
    if beat:
        args += ["--beat", "--schedule", str(log_path.with_suffix(".beat-schedule"))]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=server_env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while b"ready" not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield proc
    finally:
        stop(proc, timeout=30)


def worker_process(
    url: str, token: str, data_dir: Path, log_path: Path, *args: str, **env: str
) -> subprocess.Popen:
    """A volunteer's worker, ``swarm-worker join``, as its own process (one torch thread)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker.cli",
                "join",
                url,
                "--data-dir",
                str(data_dir),
                "--no-status",
                "--threads",
                "1",
                *args,
            ],
            cwd=ROOT,
            env=server_env(SWARM_TOKEN=token, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_redis(port: int, log: Path) -> subprocess.Popen:
    """A redis-server of this test's own (the suite's is shared with other tests)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not on PATH (the PostgreSQL + Redis mode needs it)")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 10
    while redis_cli(port, "ping") != ["PONG"]:
        assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
        time.sleep(0.1)
    return proc


def redis_cli(port: int, *args: str) -> list[str]:
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, timeout=10)
    return out.stdout.decode().split()


def kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()
