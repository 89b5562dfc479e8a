"""Worker processes a coordinator starts on its own machine (the demo, and organizers of a
coordinator with SWARM_ALLOW_LOCAL_WORKERS=1): ordinary ``swarm-worker join`` processes that
connect over the websocket like any volunteer's."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from django.conf import settings

from swarm_app.campaigns.models import Campaign
from worker.shared.tiers import model_cache_dir

log = logging.getLogger(__name__)


class LocalWorkersDisabled(Exception):
    """This coordinator does not start worker processes (shown to the organizer)."""


def model_cache() -> Path:
    """The coordinator's model cache ($SWARM_MODEL_CACHE, else <data dir>/models): its controls
    load the tiers from it, and every worker process it starts is pointed at it."""
    return model_cache_dir(Path(settings.DATA_DIR))


def training_command(python: str, url: str, data_dir: Path, nodes: int = 1) -> list[str]:
    """The ``swarm-worker join`` command of every training process this coordinator, its Celery
    workers or the demo start on a machine: ``nodes`` nodes (one by default, as every control
    runs), one torch thread, and the niceness ``settings.TRAINING_NICE``, so that training
    shares the cores equally per agent and yields to the coordinator's own processes, which
    are latency-bound (docs/deploy.md, "Fair compute on one machine")."""
    return [
        python,
        "-m",
        "worker.cli",
        "join",
        url,
        "--data-dir",
        str(data_dir),
        "--nodes",
        str(nodes),
        "--no-status",
        "--threads",
        "1",
        "--nice",
        str(settings.TRAINING_NICE),
    ]


def local_workers_allowed() -> bool:
    return bool(getattr(settings, "SWARM_ALLOW_LOCAL_WORKERS", False))


def start_local_workers(campaign: Campaign, count: int, base_url: str, secret: str) -> list[int]:
    """Start ``count`` ``swarm-worker join`` processes on this machine for ``campaign``.

    Each gets its own data directory (its node identity and checkpoints) under
    ``<DATA_DIR>/local-workers/campaign-<id>/`` and logs there; the token travels in the
    environment, not on the command line. They exit by themselves when the campaign ends.
    """
    if not local_workers_allowed():
        raise LocalWorkersDisabled(
            "this coordinator does not start local workers (SWARM_ALLOW_LOCAL_WORKERS)"
        )
    root = Path(settings.DATA_DIR) / "local-workers" / f"campaign-{campaign.pk}"
    env = {
        **os.environ,
        "SWARM_TOKEN": secret,
        "PYTHONUNBUFFERED": "1",
        # The coordinator's model cache (where its controls find the tiers), not one per worker
        # data directory, which would build every tiny tier again for each worker.
        "SWARM_MODEL_CACHE": str(model_cache()),
    }
    pids = []
    for index in range(count):
        data_dir = root / f"worker-{index}"
        data_dir.mkdir(parents=True, exist_ok=True)
        with open(data_dir / "worker.log", "ab") as out:
            # process_group=0, not a session of its own: the scheduler gives every session an
            # equal share of the CPU (autogroup), whatever runs in it (docs/deploy.md). It
            # outlives the request anyway, and stops by itself at the campaign's end.
            proc = subprocess.Popen(
                training_command(sys.executable, base_url, data_dir),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
        # Reap it when it exits, so a long-lived coordinator collects no zombies.
        threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
        pids.append(proc.pid)
    Campaign.objects.filter(pk=campaign.pk).update(local_workers=campaign.local_workers + count)
    campaign.local_workers += count
    log.info("campaign %s: started %d local workers (pids %s)", campaign.pk, count, pids)
    return pids
