"""How an agent reaches the swarm: the small interface its round loop is written against.

Three implementations drive the same loop (worker/engine/agent.py):

* :class:`LocalTransport` with a shared :class:`RolloutPool`: the in-process simulator.
* :class:`LocalTransport` without a pool: an isolated agent (J = 0 controls).
* the websocket transport of the volunteer client (worker/client/transport.py), against the coordinator.

Over-generation (``AgentConfig.max_questions``, the ``8/0-dyn`` arm) also needs ``lease_extra``:
questions beyond the round's B, from a stream of their own so that the round's first B questions
stay those of every other arm (pairing; worker/shared/paired.py). The local transport has it, and
the websocket transport for a campaign's control nodes (the coordinator issues the same questions).
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from worker.shared.config import DEFAULT_POOL_WINDOW
from worker.shared.paired import extra_refs, round_refs
from worker.shared.questions import Question, TaskMix, question
from worker.shared.rewards import RewardConfig, rewards
from worker.shared.rollout import Rollout
from worker.shared.sampling import sample_rollouts


@dataclass
class Lease:
    lease_id: str
    round: int
    questions: list[Question]


class Transport(Protocol):
    def lease(self, agent_id: str, round: int, count: int) -> Lease:
        """``count`` questions for this agent's round, chosen by the swarm, not the agent."""
        ...

    def submit(self, lease: Lease, rollouts: list[Rollout]) -> list[Rollout]:
        """Share this round's rollouts; returns them with *verified* rewards."""
        ...

    def sample_external(self, agent_id: str, round: int, count: int, strategy: str) -> list[Rollout]:
        """Up to ``count`` verified rollouts from *other* agents, by ``strategy``."""
        ...

    def report(self, agent_id: str, round: int, metrics: dict[str, float]) -> None: ...


class RolloutPool:
    """The shared pool of the in-process swarm: verified rollouts of every agent.

    Sampling draws from the most recent ``window`` rollouts, skipping the asking agent's own,
    as the coordinator's pool does (swarm_app/coordinator/pool.py), so rollouts of a much older
    policy stop being replayed.
    """

    def __init__(self, window: int = DEFAULT_POOL_WINDOW) -> None:
        self.window = window
        self.rollouts: deque[Rollout] = deque(maxlen=window)

    def add(self, rollouts: list[Rollout]) -> None:
        self.rollouts.extend(rollouts)

    def sample(self, agent_id: str, count: int, strategy: str, rng: random.Random) -> list[Rollout]:
        candidates = [r for r in self.rollouts if r.agent_id != agent_id]
        return sample_rollouts(candidates, count, strategy, rng)

    def to_json(self) -> list[dict]:
        return [r.to_json() for r in self.rollouts]

    def load_json(self, data: list[dict]) -> None:
        self.rollouts.clear()
        self.rollouts.extend(Rollout.from_json(item) for item in data)


class LocalTransport:
    """An agent's own question stream, verified locally, with an optional shared pool.

    Questions come from the stream ``seed`` (worker/shared/paired.py: ``round_refs``), so a
    resumed agent gets the same questions for the same round; ``stride`` (0: ``count``) lets
    arms that generate fewer questions see a prefix of the same round's questions (the simulator
    sets it to its base B). Rewards are re-scored with the task's verifier,
    as the coordinator does, so the loop sees the same "verified" semantics in every mode.
    """

    def __init__(
        self,
        mix: TaskMix,
        seed: int,
        pool: RolloutPool | None = None,
        reward_config: RewardConfig | None = None,
        stride: int = 0,
    ) -> None:
        self.mix = mix
        self.seed = seed
        self.stride = stride
        self.pool = pool
        self.reward_config = reward_config or RewardConfig()
        self.reports: list[dict[str, float]] = []

    def lease(self, agent_id: str, round: int, count: int) -> Lease:
        refs = round_refs(self.mix, self.seed, round, count, self.stride)
        return Lease(uuid.uuid4().hex, round, [question(self.mix, ref) for ref in refs])

    def lease_extra(self, agent_id: str, round: int, count: int, start: int) -> Lease:
        """Questions ``start .. start + count - 1`` of this round's over-generation stream."""
        refs = extra_refs(self.mix, self.seed, round, start, count)
        return Lease(uuid.uuid4().hex, round, [question(self.mix, ref) for ref in refs])

    def submit(self, lease: Lease, rollouts: list[Rollout]) -> list[Rollout]:
        for rollout in rollouts:
            rollout.rewards = rewards(self.mix, rollout.ref, rollout.completions, self.reward_config)
        if self.pool is not None:
            self.pool.add(rollouts)
        return rollouts

    def sample_external(self, agent_id: str, round: int, count: int, strategy: str) -> list[Rollout]:
        if self.pool is None or count == 0:
            return []
        rng = random.Random(f"{self.seed}:{agent_id}:{round}:external")
        return self.pool.sample(agent_id, count, strategy, rng)

    def report(self, agent_id: str, round: int, metrics: dict[str, float]) -> None:
        self.reports.append(metrics)
