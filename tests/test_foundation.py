"""The project's ground rules: layout, settings per mode, and a real server answering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from django.conf import settings
from django.db import connection

from tests.servers import ROOT


def test_stdlib_platform_is_not_shadowed_from_repo_root():
    result = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.system())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == os.uname().sysname
    assert not list((ROOT / "platform").rglob("*.py")), "platform/ must hold deployment files only"


# What a volunteer's worker must never load: the coordinator and its web, broker and socket stack.
COORDINATOR_PACKAGES = {"swarm_app", "django", "channels", "channels_redis", "daphne", "celery", "kombu"}

IMPORT_EVERY_WORKER_MODULE = """
import importlib, json, pkgutil, sys
import worker
names = [m.name for m in pkgutil.walk_packages(worker.__path__, "worker.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


def test_worker_package_imports_no_django():
    """Every module under worker/, imported in a fresh interpreter, loads nothing of the coordinator;
    nor vLLM (about 14 s to import), which only an engine that is made imports."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_WORKER_MODULE], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    expected = {
        path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
        for path in (ROOT / "worker").rglob("*.py")
    } - {"worker"}
    assert set(report["modules"]) == expected  # walk_packages missed no module
    loaded = {name.split(".")[0] for name in report["loaded"]}
    assert sorted(loaded & COORDINATOR_PACKAGES) == []
    assert "vllm" not in loaded


def test_settings_follow_the_environment():
    if os.environ.get("REDIS_URL"):
        assert not settings.EMBEDDED
        assert (
            settings.CHANNEL_LAYERS["default"]["BACKEND"]
            == "swarm_app.core.redis_layer.ResilientRedisChannelLayer"
        )
        assert settings.CELERY_BROKER_URL == os.environ["REDIS_URL"]
    else:
        assert settings.EMBEDDED
        assert settings.CELERY_BROKER_URL.startswith("swarmfs://")  # file_broker.py
    expected_vendor = "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
    assert connection.vendor == expected_vendor


def test_coordinator_serves_home_and_health(coordinator):
    with urllib.request.urlopen(f"{coordinator}/", timeout=10) as response:
        assert response.status == 200
        assert "Swarm" in response.read().decode()
    with urllib.request.urlopen(f"{coordinator}/healthz", timeout=10) as response:
        health = json.load(response)
    assert health["ok"] is True
    assert health["database"] == connection.vendor
    # Its websockets: tests/core/test_site.py (the echo, served only when a benchmark enables it),
    # tests/coordinator/ (workers), tests/campaigns/test_dashboard.py (dashboards).
