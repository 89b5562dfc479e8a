"""The one place a coordinator process trains: the engine's Agent for an isolated control.

Celery workers that run controls import this module (through controls.py) but load the engine
(torch, transformers) only when :func:`build_agent` runs, so the ASGI servers, beat and
``migrate`` never import torch. import-linter's contract "the coordinator imports only
worker.shared" names this module as its single exception (pyproject.toml).
"""

from __future__ import annotations

import logging

from swarm_app.campaigns.local_workers import model_cache
from swarm_app.campaigns.models import Campaign, ControlRun

log = logging.getLogger(__name__)


def agent_id(run: ControlRun) -> str:
    """Shared by every control kind of one tier and seed (see controls.py's "Pairing")."""
    return f"control-{run.tier}-seed{run.seed}"


def build_agent(run: ControlRun, campaign: Campaign):
    """The control's Agent: the campaign's settings with the arm of the run's control kind
    (``CampaignConfig.control_agent_config``: I, J, strategies, self-replay window,
    over-generation cap), on a :class:`LocalTransport` without a pool: it shares nothing, and
    both self-replay (the agent's own window) and over-generation (``lease_extra``) run there."""
    import torch

    from worker.engine.agent import Agent
    from worker.engine.generation.hf import TransformersBackend
    from worker.engine.policy import load_policy
    from worker.engine.transport import LocalTransport
    from worker.shared.config import stable_seed
    from worker.shared.tiers import tier

    torch.set_num_threads(1)  # several control processes and workers share the cores
    config = campaign.settings
    agent_config = config.control_agent_config(run.tier, run.seed, run.arm)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_policy(tier(run.tier), model_cache(), device=device, log=log.info)
    transport = LocalTransport(config.mix, stable_seed("control-questions", run.seed))
    backend = TransformersBackend(model, tokenizer)
    return Agent(agent_id(run), run.tier, model, tokenizer, backend, transport, config.mix, agent_config)
