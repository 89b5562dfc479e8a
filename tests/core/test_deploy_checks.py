"""The deployment checks that catch what an operator leaves behind (swarm_app/core/checks.py), run
as the start commands run them: `manage.py check --deploy --fail-level WARNING` in a process of
its own with platform/.env.example filled in (tests/core/test_security_settings.py: it passes when
everything is filled)."""

from __future__ import annotations

import secrets
import sys

from django.test import Client

from tests.core.test_security_settings import HOST, production_env, run

CHECK = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]


def test_an_example_host_left_in_the_settings_stops_the_start(tmp_path):
    env = production_env(tmp_path, SWARM_PUBLIC_URL="https://swarm.example.org/")
    result = run(CHECK, env)
    assert result.returncode != 0
    assert (
        "swarm.W001" in result.stderr
        and "SWARM_PUBLIC_URL holds 'https://swarm.example.org/'" in result.stderr
    )
    left = production_env(tmp_path, ALLOWED_HOSTS=f"{HOST},localhost,swarm.example.org")
    result = run(CHECK, left)
    assert result.returncode != 0 and "ALLOWED_HOSTS holds 'swarm.example.org'" in result.stderr
    changeme = run(CHECK, production_env(tmp_path, SWARM_CONTROL_URL="https://CHANGE_ME/"))
    assert changeme.returncode != 0 and "CONTROL_URL holds 'https://CHANGE_ME/'" in changeme.stderr


def test_production_without_a_public_url_stops_the_start(tmp_path):
    env = production_env(tmp_path)
    del env["SWARM_PUBLIC_URL"]
    env["SWARM_CONTROL_URL"] = f"https://{HOST}/"
    result = run(CHECK, env)
    assert result.returncode != 0 and "swarm.W002" in result.stderr, result.stderr


def test_too_few_control_slots_for_the_presets_stops_the_start(tmp_path):
    result = run(CHECK, production_env(tmp_path, SWARM_CONTROL_SLOTS="8"))
    assert result.returncode != 0 and "swarm.W003" in result.stderr
    assert "the sapo-table preset: 16" in result.stderr and "the cpu-demo preset: 12" in result.stderr
    assert "Set SWARM_CONTROL_SLOTS to 16 or more" in result.stderr
    assert run(CHECK, production_env(tmp_path, SWARM_CONTROL_SLOTS="16")).returncode == 0


def test_a_missing_metrics_token_file_stops_the_start(tmp_path):
    token_file = tmp_path / "metrics-token"
    missing = run(CHECK, production_env(tmp_path, METRICS_TOKEN_FILE=str(token_file)))
    assert missing.returncode != 0 and "swarm.E001" in missing.stderr
    assert f"METRICS_TOKEN_FILE {token_file}: No such file or directory" in missing.stderr
    token_file.write_text("short\n")
    assert (
        "not a token of 32 or more characters"
        in run(CHECK, production_env(tmp_path, METRICS_TOKEN_FILE=str(token_file))).stderr
    )
    token_file.write_text(secrets.token_urlsafe(32) + "\n")
    result = run(CHECK, production_env(tmp_path, METRICS_TOKEN_FILE=str(token_file)))
    assert result.returncode == 0, result.stderr


def test_the_scrape_reads_the_token_file_each_time(db, settings, tmp_path):
    token_file = tmp_path / "metrics-token"
    settings.METRICS_TOKEN_FILE = str(token_file)
    client = Client()
    assert client.get("/metrics").status_code == 503  # no file yet: said, not served open
    token = secrets.token_urlsafe(32)
    token_file.write_text(f"{token}\n")
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    rotated = secrets.token_urlsafe(32)
    token_file.write_text(rotated)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {rotated}").status_code == 200
