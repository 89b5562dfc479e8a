"""The in-process swarm simulator: N agents, one shared pool, lockstep rounds.

Every agent starts from its tier's weights (one tier for all, or one per agent: a heterogeneous
swarm, where one pool or one pool per tier is shared) and gets its own question stream, seeded
by (seed, agent index) only, so every arm of a study sees the same questions and arms can be
compared pairwise (an arm that generates fewer questions than the base config, 4/4@B4, gets the
first B of the same round's questions). Each round, all agents generate and share before any agent trains, so a
rollout shared in round r can be trained on by others in round r.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from worker import __version__
from worker.engine.agent import Agent
from worker.engine.generation.select import choose_backend, make_backend
from worker.engine.hardware import detect
from worker.engine.policy import load_policy, resolve
from worker.engine.transport import LocalTransport, RolloutPool
from worker.shared.arms import Arm
from worker.shared.config import DEFAULT_POOL_WINDOW, AgentConfig, stable_seed
from worker.shared.files import write_json_atomic
from worker.shared.questions import TaskMix
from worker.shared.tiers import model_cache_dir, tier


@dataclass
class SimulationConfig:
    agents: int
    rounds: int
    tier: str
    seed: int
    mix: TaskMix
    agent: AgentConfig  # I, J and strategies are overridden per arm
    pool_window: int = DEFAULT_POOL_WINDOW  # rollouts: the most recent ones are sampled
    checkpoint_every: int = 0  # rounds; 0 = never
    backend: str = "transformers"  # generation backend of every agent: transformers, vllm or auto
    device: str = "cpu"  # where every agent's policy trains (and generates): cpu or cuda
    # A heterogeneous swarm: agent i's tier (len == agents); None: every agent's is ``tier``
    tiers: list[str] | None = None
    # One pool per tier (each size shares only with itself) instead of one for all agents
    pool_per_tier: bool = False

    def __post_init__(self) -> None:
        if self.tiers is not None and len(self.tiers) != self.agents:
            raise ValueError(f"tiers names {len(self.tiers)} agents' tiers, agents is {self.agents}")

    def agent_tiers(self) -> list[str]:
        return list(self.tiers) if self.tiers is not None else [self.tier] * self.agents

    def to_json(self) -> dict:
        return {
            "agents": self.agents,
            "rounds": self.rounds,
            "tier": self.tier,
            "tiers": self.tiers,
            "pool_per_tier": self.pool_per_tier,
            "seed": self.seed,
            "tasks": self.mix.to_json(),
            "agent": self.agent.to_json(),
            "pool_window": self.pool_window,
            "checkpoint_every": self.checkpoint_every,
            "backend": self.backend,
            "device": self.device,
            "version": __version__,
        }


def agent_config_for(base: AgentConfig, arm: Arm) -> AgentConfig:
    """``base`` with the arm's B, batch, strategies, replay source, over-generation, batch rule
    and external correction (:meth:`Arm.apply`)."""
    return arm.apply(base)


def pool_windows(tiers: list[str], pool_window: int, per_tier: bool) -> dict[str, int]:
    """The pools of a sharing arm of agents of ``tiers`` by key ("" for one pool of every agent,
    else the tier's name) and each one's window: ``pool_window`` for all agents, and a per-tier
    pool the same share of it as of the agents, so its rollouts are as old in rounds
    (window_t = pool_window x agents_t / agents)."""
    if not per_tier:
        return {"": pool_window}
    return {t: max(1, pool_window * tiers.count(t) // len(tiers)) for t in dict.fromkeys(tiers)}


class Swarm:
    """The agents of one arm and their pools (none for isolated arms)."""

    def __init__(self, config: SimulationConfig, arm: Arm, cache_dir: Path, log=print) -> None:
        self.config = config
        self.arm = arm
        self.pools = (
            {
                key: RolloutPool(window)
                for key, window in pool_windows(
                    config.agent_tiers(), arm.pool_window or config.pool_window, config.pool_per_tier
                ).items()
            }
            if arm.shares
            else {}
        )
        agent_config = agent_config_for(config.agent, arm)
        # Every agent generates with the same backend; vLLM agents each hold an engine synced
        # from their own policy after every step, exactly as a volunteer's worker does.
        hardware = detect(cache_dir)
        backend_name, reason = choose_backend(config.backend, hardware)
        log(f"{arm.name}: generation backend {reason}")
        self.agents: list[Agent] = []
        for index, tier_name in enumerate(config.agent_tiers()):
            spec = tier(tier_name)
            model_dir = resolve(spec, cache_dir, log=log)
            model, tokenizer = load_policy(spec, cache_dir, device=config.device, log=log)
            backend = make_backend(
                backend_name,
                model,
                tokenizer,
                model_dir,
                spec,
                hardware=hardware,
                seed=stable_seed(config.seed, index, "backend"),
                log=log,
            )
            # stride = the base B: an arm at a smaller B (4/4@B4) leases a prefix of the questions
            # every other arm leases in the same round, so arms pair round by round
            transport = LocalTransport(
                config.mix,
                stable_seed(config.seed, index, "questions"),
                self.pools.get(tier_name if config.pool_per_tier else ""),
                stride=config.agent.questions_per_round,
            )
            agent_id = f"agent-{index}"
            self.agents.append(
                Agent(
                    agent_id,
                    spec.name,
                    model,
                    tokenizer,
                    backend,
                    transport,
                    config.mix,
                    AgentConfig(**{**agent_config.to_json(), "seed": stable_seed(config.seed, index)}),
                )
            )
        self.history: dict[str, list[dict[str, float]]] = {a.agent_id: [] for a in self.agents}

    @property
    def round(self) -> int:
        return self.agents[0].round

    def run_round(self) -> list[dict[str, float]]:
        for agent in self.agents:
            agent.generate_phase()
        metrics = [agent.train_phase() for agent in self.agents]
        if self.config.tiers is not None:  # what crossed sizes: the heterogeneous swarm's check
            size = {
                agent.agent_id: tier_name
                for agent, tier_name in zip(self.agents, self.config.tiers, strict=True)
            }
            for agent, m in zip(self.agents, metrics, strict=True):
                m["batch/external_other_tier"] = float(
                    sum(
                        source == "pool" and size[owner] != size[agent.agent_id]
                        for _, owner, _, source in agent.last_batch
                    )
                )
        for agent, m in zip(self.agents, metrics, strict=True):
            self.history[agent.agent_id].append(m)
        return metrics

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for agent in self.agents:
            agent.save(directory / f"{agent.agent_id}.pt")
        state = {
            "history": self.history,
            "pools": {key: pool.to_json() for key, pool in self.pools.items()},
            "round": self.round,
        }
        write_json_atomic(directory / "swarm.json", state, indent=None)

    def load(self, directory: Path) -> bool:
        """Resume from ``directory`` if it holds a checkpoint; True when it did."""
        state_file = directory / "swarm.json"
        if not state_file.exists():
            return False
        state = json.loads(state_file.read_text())
        for agent in self.agents:
            agent.load(directory / f"{agent.agent_id}.pt")
        # checkpoints written before per-tier pools hold one pool under "pool"
        pools = state.get("pools", {"": state.get("pool") or []})
        for key, pool in self.pools.items():
            pool.load_json(pools[key])
        self.history = state["history"]
        return True


def run_arm(
    config: SimulationConfig,
    arm: Arm,
    cache_dir: Path,
    checkpoint_dir: Path | None = None,
    on_round: Callable[[Arm, int, list[dict[str, float]]], None] | None = None,
    log=print,
    observe: Callable[[Swarm], None] | None = None,
) -> dict:
    """Run one arm to ``config.rounds``; resumes from ``checkpoint_dir`` when it holds one.

    ``observe(swarm)`` runs before the first round and after every round (a study's held-out
    evaluation, lab/swarm_lab/held_out.py); it must leave the agents and every RNG as it found
    them."""
    torch.manual_seed(config.seed)
    swarm = Swarm(config, arm, cache_dir, log=log)
    if checkpoint_dir is not None and swarm.load(checkpoint_dir):
        log(f"{arm.name}: resumed at round {swarm.round}")
    if observe and swarm.round == 0:
        observe(swarm)
    while swarm.round < config.rounds:
        metrics = swarm.run_round()
        if on_round:
            on_round(arm, swarm.round, metrics)
        if observe:
            observe(swarm)
        if (
            checkpoint_dir is not None
            and config.checkpoint_every
            and swarm.round % config.checkpoint_every == 0
        ):
            swarm.save(checkpoint_dir)
    return {"arm": arm.to_json(), "agents": swarm.history}


def simulate(
    config: SimulationConfig,
    arms: list[Arm],
    out: Path,
    checkpoint_dir: Path | None = None,
    show_progress: bool = True,
    log=print,
) -> dict:
    """Run every arm and write ``{"config", "arms": {name: {"arm", "agents": {id: [metrics]}}}}``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cache_dir = model_cache_dir()
    results: dict = {"config": config.to_json(), "arms": {}}
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]:.3f}"),
        TimeElapsedColumn(),
        disable=not show_progress,
    ) as progress:
        for arm in arms:
            task = progress.add_task(f"{arm.name:>16}", total=config.rounds, reward=0.0)

            def on_round(arm: Arm, done: int, metrics: list[dict[str, float]], task=task) -> None:
                mean_reward = sum(m["reward"] for m in metrics) / len(metrics)
                progress.update(task, completed=done, reward=mean_reward)

            arm_dir = checkpoint_dir / arm.name.replace("/", "-") if checkpoint_dir else None
            results["arms"][arm.name] = run_arm(config, arm, cache_dir, arm_dir, on_round, log=log)
    results["elapsed_seconds"] = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return results
