"""Production defaults that refuse to start weak (issue 27, item 7): the SECRET_KEY rule, Secure
cookies and HSTS by default, `check --deploy` clean with the shipped settings and run by every
production start command, password reset only where mail is configured.

Settings are read once per process, so the mode-dependent ones are tested in subprocesses with an
environment of their own (production = REDIS_URL set; nothing here connects to Redis).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from django.test import Client, override_settings
from django.urls import reverse

from tests.servers import asgi_server

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = ROOT / "platform"
CHECK = "python manage.py check --deploy --fail-level WARNING"
# What the settings read: nothing of the environment the tests run in leaks into these runs.
BASE_ENV = {"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "WARNING"}
STRONG_KEY = secrets.token_urlsafe(50)
HOST = "swarm.volunteers.test"


def env_example() -> dict[str, str]:
    values = {}
    for line in (PLATFORM / ".env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """platform/.env.example filled as docs/deploy.md says: secrets generated, the CHANGE_ME
    password replaced, swarm.example.org replaced by the host's name; the data and static paths
    moved to a writable place (compose sets them)."""
    env = {
        key: value.replace("swarm.example.org", HOST) for key, value in {**BASE_ENV, **env_example()}.items()
    }
    password = secrets.token_hex(24)
    env["POSTGRES_PASSWORD"] = password
    env["SECRET_KEY"] = STRONG_KEY
    env["DATABASE_URL"] = env["DATABASE_URL"].replace("CHANGE_ME", password)
    env["SWARM_DATA_DIR"] = str(tmp_path / "data")
    env["STATIC_ROOT"] = str(tmp_path / "static")
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def read_settings(env: dict[str, str], *names: str) -> subprocess.CompletedProcess:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'swarm_app.settings'; django.setup(); "
        "from django.conf import settings; "
        f"print(*[repr(getattr(settings, n)) for n in {list(names)!r}])"
    )
    return run([sys.executable, "-c", code], env)


def test_check_deploy_passes_with_the_shipped_production_settings(tmp_path):
    env = production_env(tmp_path)
    assert "CHANGE_ME" not in "".join(env.values()) and "example" not in "".join(env.values())
    result = run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout
    # The same check fails on a weakened setting: it is what the start commands rely on.
    weak = run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        {**env, "SECURE_COOKIES": "0"},
    )
    assert weak.returncode != 0 and "security.W012" in weak.stderr, weak.stderr


@pytest.mark.parametrize(
    "key",
    [
        "CHANGE_ME",  # platform/.env.example's placeholder
        "insecure-key-for-tests-only",  # 27 characters
        "a" * 49 + "b",  # 50 characters, two distinct
        "django-insecure-" + secrets.token_urlsafe(50),
    ],
    # Fixed ids: the random key must not name the test (pytest-xdist's workers must collect
    # the same test ids).
    ids=["placeholder", "short", "two-distinct", "django-insecure"],
)
def test_production_refuses_a_weak_secret_key(tmp_path, key):
    result = read_settings(production_env(tmp_path, SECRET_KEY=key), "SECRET_KEY")
    assert result.returncode != 0
    assert "SECRET_KEY is refused in production" in result.stderr, result.stderr


def test_a_strong_key_starts_and_embedded_mode_or_debug_accept_any_key(tmp_path):
    assert read_settings(production_env(tmp_path), "SECRET_KEY").returncode == 0
    embedded = {**BASE_ENV, "SWARM_DATA_DIR": str(tmp_path / "embedded"), "SECRET_KEY": "short"}
    assert read_settings(embedded, "SECRET_KEY").returncode == 0
    debug = production_env(tmp_path, SECRET_KEY="short", DEBUG="1")
    assert read_settings(debug, "SECRET_KEY").returncode == 0


def test_the_example_placeholder_is_the_refused_one():
    from swarm_app.settings import EXAMPLE_SECRET_KEY

    assert env_example()["SECRET_KEY"] == EXAMPLE_SECRET_KEY


def test_production_defaults_secure_cookies_and_hsts(tmp_path):
    """Unset, SECURE_COOKIES and HSTS are on in production and off in embedded mode."""
    names = (
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    )
    production = {
        **BASE_ENV,
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "SECRET_KEY": STRONG_KEY,
        "SWARM_DATA_DIR": str(tmp_path / "production"),
    }
    result = read_settings(production, *names)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "31536000", "True"]
    embedded = {**BASE_ENV, "SWARM_DATA_DIR": str(tmp_path / "embedded")}
    assert read_settings(embedded, *names).stdout.split() == ["False", "False", "0", "False"]
    # Tests and the demo speak plain http: SECURE_COOKIES=0 is their explicit opt-out.
    opted_out = read_settings({**production, "SECURE_COOKIES": "0"}, *names).stdout.split()
    assert opted_out[:2] == ["False", "False"]


def test_every_production_start_command_runs_the_deploy_check_first():
    compose = yaml.safe_load((PLATFORM / "compose.yaml").read_text())
    servers = {
        name: service
        for name, service in compose["services"].items()
        if "daphne" in str(service.get("command"))
    }
    assert set(servers) == {"coordinator", "coordinator-2"}
    for name, service in servers.items():
        command = service["command"]
        assert isinstance(command, str) and command.startswith(f'sh -c "{CHECK} && '), (name, command)
    unit = (PLATFORM / "systemd" / "swarm-coordinator@.service").read_text()
    assert f"ExecStartPre=/opt/swarm/venv/bin/{CHECK}" in unit
    assert unit.index("ExecStartPre=") < unit.index("ExecStart=")
    web = next(line for line in (PLATFORM / "Procfile").read_text().splitlines() if line.startswith("web:"))
    assert web.startswith(f"web: {CHECK} && exec daphne "), web


def test_nginx_sends_hsts_and_passes_only_the_clients_address():
    conf = (PLATFORM / "nginx.conf").read_text()
    active = [line.strip() for line in conf.splitlines() if not line.strip().startswith("#")]
    assert 'add_header Strict-Transport-Security "max-age=31536000; includeSubDomains" always;' in active
    # daphne --proxy-headers takes the left-most X-Forwarded-For entry: a list that starts with
    # what the client sent would let it choose its address (and dodge login throttling).
    assert not any("$proxy_add_x_forwarded_for" in line for line in active)
    assert sum(line == "proxy_set_header X-Forwarded-For $remote_addr;" for line in active) == 2


def test_password_reset_is_not_routed_without_mail(db):
    assert not os.environ.get("EMAIL_HOST"), "the tests run without mail configured"
    client = Client()
    assert client.get("/accounts/password_reset/").status_code == 404
    assert "password_reset" not in client.get(reverse("login")).content.decode()


def test_password_reset_is_routed_when_mail_is_configured(transactional_db, tmp_path):
    with asgi_server(tmp_path / "daphne.log", EMAIL_HOST="127.0.0.1", EMAIL_PORT="2525") as base:
        with urllib.request.urlopen(f"{base}/accounts/password_reset/", timeout=30) as response:
            assert response.status == 200
        with urllib.request.urlopen(f"{base}/accounts/login/", timeout=30) as response:
            login = response.read().decode()
        assert '<a href="/accounts/password_reset/">Forgotten your password?</a>' in login


@override_settings(SECURE_SSL_REDIRECT=True)
def test_the_https_redirect_spares_the_health_check(db):
    """compose's health check asks http://127.0.0.1:8000/healthz with no proxy header."""
    client = Client()
    assert client.get("/healthz").status_code == 200
    response = client.get("/", HTTP_HOST="localhost")
    assert response.status_code == 301 and response["Location"] == "https://localhost/"
