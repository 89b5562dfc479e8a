"""The layout's rules, enforced: import-linter's contracts (pyproject.toml), a coordinator that
never loads torch, modules short enough to read, and a README and docs index that name every
part."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import TEST_SECRET_KEY

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600

pytestmark = pytest.mark.engine  # reads the source and starts imports only: no service, no mode


def test_import_contracts_are_kept():
    """``lint-imports`` over worker/ and swarm_app/: layers, torch-free shared layer and
    coordinator, a worker without Django, no circles among siblings."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "0 broken" in report, report


# The coordinator's processes: the ASGI application (daphne), a Celery worker's and beat's import
# path (the app, its autodiscovered task modules and the beat schedule), and the management
# commands (migrate, the demo).
COORDINATOR_IMPORTS = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "swarm_app.settings")
from swarm_app.asgi import application
from swarm_app.celery import app
app.loader.import_default_modules()
import swarm_app.runs.tasks, swarm_app.coordinator.consumers, swarm_app.runs.controls
from django.core.management import load_command_class
for name, app_name in (("migrate", "django.core"), ("demo", "swarm_app.demo")):
    load_command_class(app_name, name)
heavy = ("torch", "transformers", "vllm", "tokenizers")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_coordinator_processes_never_import_torch(tmp_path):
    env = {**os.environ, "SWARM_DATA_DIR": str(tmp_path), "SECRET_KEY": TEST_SECRET_KEY}
    result = subprocess.run(
        [sys.executable, "-c", COORDINATOR_IMPORTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == [], f"coordinator imports loaded {loaded[:10]}"


def _long_modules() -> list[str]:
    long = []
    paths = [
        *(ROOT / "worker").rglob("*.py"),
        *(ROOT / "swarm_app").rglob("*.py"),
        *(ROOT / "lab").rglob("*.py"),
    ]
    for path in sorted(p for p in paths if "migrations" not in p.parts):
        text = path.read_text()
        lines = text.count("\n")
        if lines <= MAX_MODULE_LINES:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if "long because" not in docstring:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    return long


def test_modules_are_short_or_say_why():
    """A module over 600 lines must say in its docstring why it is "long because" of what."""
    assert _long_modules() == []


def test_no_process_is_started_in_a_session_of_its_own():
    """Linux's autogroup scheduler shares the CPU between sessions first: a training process in a
    session of its own takes a whole session's share (docs/deploy.md, "Fair compute on one
    machine"). The coordinator, the worker and the lab start every child in the starter's session."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("worker", "swarm_app", "lab")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "start_new_session" in line
    ]
    assert found == []


def test_the_readme_names_every_part():
    """README.md's layout table names every top-level folder the repository tracks, every module
    of the worker's shared, engine, client, research and cli packages and of the lab's cli, every
    app of the coordinator, every benchmark and every test folder (the lab's studies are named by
    their files' prefixes)."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## What the parts are") : readme.index("## Development")]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {line.split("/", 1)[0] for line in tracked.splitlines() if "/" in line}
    names = [f"`{folder}/" for folder in folders if not folder.startswith(".")]
    packages = (
        "worker/shared",
        "worker/engine",
        "worker/client",
        "worker/research",
        "worker/cli",
        "lab/swarm_lab/cli",
    )
    for package in (*packages, "bench"):
        modules = (ROOT / package).glob("*.py")
        names += [f"`{path.name}`" for path in modules if path.name not in ("__init__.py", "__main__.py")]
    names += [f"`{path.name}/`" for path in (ROOT / "swarm_app").iterdir() if (path / "apps.py").exists()]
    names += [f"`{path.name}/`" for path in (ROOT / "tests").iterdir() if (path / "__init__.py").exists()]
    names += ["`worker/research/`", "`generation/`", "`swarm_lab/`", "`study_queue/`"]
    prefixes = ("study", "heterogeneous", "held_out")
    lab_modules = {
        path.stem for path in (ROOT / "lab" / "swarm_lab").glob("*.py") if path.name != "__init__.py"
    }
    assert all(module.startswith(prefixes) for module in lab_modules), sorted(lab_modules)
    names += ["`study*.py`", "`heterogeneous*.py`", "`held_out.py`"]
    missing = [name for name in names if name not in table]
    assert missing == [], missing


def test_the_docs_index_names_every_document():
    """docs/README.md links every document in docs/ (the experiments' reports through theirs)."""
    index = (ROOT / "docs" / "README.md").read_text()
    documents = [path.name for path in (ROOT / "docs").glob("*.md") if path.name != "README.md"]
    missing = [name for name in [*documents, "experiments/README.md"] if f"]({name})" not in index]
    assert missing == [], missing
