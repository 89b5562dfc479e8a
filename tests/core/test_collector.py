"""A serving process's cyclic collector (swarm_app/core/collector.py): the loaded application
is frozen out of its reach and young collections run less often, in the process that any ASGI
server starts (it imports swarm_app.asgi, as tests/servers.py's daphne does)."""

from __future__ import annotations

import os
import subprocess
import sys

from swarm_app.core.collector import YOUNG_THRESHOLD


def test_the_asgi_application_freezes_what_it_loaded_and_collects_young_cycles_less_often() -> None:
    probe = "import gc, swarm_app.asgi; print(gc.get_freeze_count(), gc.get_threshold()[0])"
    result = subprocess.run(
        [sys.executable, "-c", probe], env=dict(os.environ), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    frozen, young_threshold = map(int, result.stdout.split()[-2:])
    # Django, Channels, the models and reasoning-gym's modules: well over 10,000 objects.
    assert frozen > 10_000
    assert young_threshold == YOUNG_THRESHOLD
