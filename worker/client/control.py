"""`swarm-worker control`: one isolated control run of a campaign, as a process of its own.

A campaign's controls (the arms of worker/shared/arms.py for the swarm's I/J: isolated,
filtered, self-replay, over-generation) train the same engine as a swarm node with a
:class:`~worker.engine.transport.LocalTransport` and no pool. The coordinator's Celery worker
starts this command and supervises it (swarm_app/runs/controls.py: claim, heartbeat,
pause, metrics, failure), so no coordinator process imports torch: only this one does, and it
touches no database.

Lines on stdout, one JSON object each (:func:`event`):

* ``{"event": "ready", "round": r, "resumed": bool}`` once the model (and the checkpoint, when
  there is one) is loaded: ``r`` is the next round to run;
* ``{"event": "round", "round": r, "metrics": {...}}`` after each round (the agent's metrics,
  ``reward`` among them);
* ``{"event": "saved", "round": r}`` after a checkpoint, ``r`` being the next round;
* ``{"event": "error", "error": "Type: message", "traceback": "..."}`` before exiting 1.

With ``--step`` the process runs nothing on its own: it reads one command per line on stdin,
``round`` (run the next round) or ``save`` (write the checkpoint), and exits 0 at end of input.
The supervisor stores a round's metrics before it asks for the checkpoint, so a supervisor
that lost its claim (or died: its end of the pipe closes) never has a checkpoint written that
its metrics do not match. Without ``--step`` it runs to ``--rounds`` and saves after each
round: the same run by hand.

Pairing (controls.py, "Pairing"): every kind of one tier and seed uses the agent id
``control-<tier>-seed<seed>``, the question stream ``stable_seed("control-questions", seed)``
and the same generation seeds, so they generate the very same first B groups.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

COMMANDS = ("round", "save")


def agent_id(tier: str, seed: int) -> str:
    """Shared by every control kind of one tier and seed."""
    return f"control-{tier}-seed{seed}"


@dataclass(frozen=True)
class ControlSpec:
    """What one control run trains: the campaign's settings (a CampaignConfig JSON file), the
    tier, the control kind and the seed."""

    campaign: Path
    tier: str
    arm: str
    seed: int
    checkpoint: Path | None = None
    model_cache: Path | None = None
    device: str = "auto"


def event(out: IO[str], kind: str, **fields: Any) -> None:
    out.write(json.dumps({"event": kind, **fields}) + "\n")
    out.flush()


def build_agent(spec: ControlSpec):
    """The control's Agent (torch and the engine load here, not at import)."""
    import msgspec
    import torch

    from worker.engine.agent import Agent
    from worker.engine.generation.hf import TransformersBackend
    from worker.engine.policy import load_policy
    from worker.engine.transport import LocalTransport
    from worker.shared.campaign import CampaignConfig
    from worker.shared.config import stable_seed
    from worker.shared.tiers import model_cache_dir, tier

    torch.set_num_threads(1)  # several control processes and workers share the cores
    config = msgspec.json.decode(spec.campaign.read_bytes(), type=CampaignConfig)
    agent_config = config.control_agent_config(spec.tier, spec.seed, spec.arm)
    device = spec.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cache = spec.model_cache or model_cache_dir()
    model, tokenizer = load_policy(tier(spec.tier), cache, device=device, log=log.info)
    transport = LocalTransport(config.mix, stable_seed("control-questions", spec.seed))
    backend = TransformersBackend(model, tokenizer)
    name = agent_id(spec.tier, spec.seed)
    return Agent(name, spec.tier, model, tokenizer, backend, transport, config.mix, agent_config), config


def run(spec: ControlSpec, rounds: int | None, step: bool, stdin: IO[str], stdout: IO[str]) -> int:
    """Run the control (see the module's docstring for the lines it reads and writes)."""
    try:
        agent, config = build_agent(spec)
        resumed = spec.checkpoint is not None and spec.checkpoint.exists()
        if resumed:
            agent.load(spec.checkpoint)
        event(stdout, "ready", round=agent.round, resumed=resumed)
        if step:
            for line in stdin:
                command = line.strip()
                if command == "round":
                    metrics = agent.run_round()
                    event(stdout, "round", round=agent.round - 1, metrics=metrics)
                elif command == "save":
                    save(agent, spec.checkpoint)
                    event(stdout, "saved", round=agent.round)
                elif command:
                    raise ValueError(f"unknown command {command!r} (expected one of {', '.join(COMMANDS)})")
            return 0
        total = config.rounds if rounds is None else rounds
        while agent.round < total:
            metrics = agent.run_round()
            event(stdout, "round", round=agent.round - 1, metrics=metrics)
            if spec.checkpoint is not None:
                save(agent, spec.checkpoint)
                event(stdout, "saved", round=agent.round)
        return 0
    except Exception as error:
        event(
            stdout,
            "error",
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc()[-4000:],
        )
        return 1


def save(agent, path: Path | None) -> None:
    if path is None:
        raise ValueError("save: this run has no --checkpoint")
    path.parent.mkdir(parents=True, exist_ok=True)
    agent.save(path)


def main(spec: ControlSpec, rounds: int | None, step: bool) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    return run(spec, rounds, step, sys.stdin, sys.stdout)
