"""The SAPO round loop of one node, written once for every caller.

One round r of agent n (Algorithm 1 of the SAPO paper, with GRPO as the update):

    1. lease B questions for round r from the swarm (the swarm picks them, not the agent)
    2. generate G completions per question with the current policy
    3. score each completion with the task's verifier; share the B rollouts as text
       (the swarm answers with verified rewards)
    4. sample J external rollouts of other agents from the pool
    5. assemble the batch: I of the local rollouts + the external ones (worker/shared/sampling.py)
    6. re-tokenise every selected rollout with this model's tokenizer, compute group
       advantages from verified rewards, take a GRPO step (worker/engine/trainer.py)
    7. report the round's metrics

Steps 1-3 are :meth:`Agent.generate_phase`, steps 4-7 :meth:`Agent.train_phase`; the
simulator runs every agent's generate phase before any train phase so that a lockstep swarm
shares within a round, while a volunteer runs :meth:`Agent.run_round` and shares
asynchronously. The transport (worker/engine/transport.py) is the only thing that differs.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from worker.engine.checkpoint import load_checkpoint, save_checkpoint
from worker.engine.generation.base import GenerationBackend
from worker.engine.trainer import GRPOLearner, TrainSample
from worker.engine.transport import Lease, Transport
from worker.shared.advantages import group_advantages, reward_std
from worker.shared.config import AgentConfig, stable_seed
from worker.shared.prompts import render_prompt
from worker.shared.questions import TaskMix
from worker.shared.rewards import RewardConfig, rewards
from worker.shared.rollout import Rollout
from worker.shared.sampling import assemble_batch


@dataclass
class _LocalGroup:
    rollout: Rollout
    prompt_ids: list[int]
    completion_ids: list[list[int]]  # the sampled token ids, kept so local samples need no re-tokenising
    # the sampler's log-prob of each sampled token (vLLM), for the trainer's importance weights;
    # they stay on this node (rollouts travel as text)
    sampler_logp: list[list[float] | None]


class Agent:
    def __init__(
        self,
        agent_id: str,
        tier: str,
        model: torch.nn.Module,
        tokenizer,
        backend: GenerationBackend,
        transport: Transport,
        mix: TaskMix,
        config: AgentConfig,
    ) -> None:
        self.agent_id = agent_id
        self.tier = tier
        self.model = model
        self.tokenizer = tokenizer
        self.backend = backend
        self.transport = transport
        self.mix = mix
        self.config = config
        self.learner = GRPOLearner(model, config.grpo, pad_token_id=tokenizer.pad_token_id)
        self.round = 0
        self.tokens_seen = 0  # prompt + completion tokens trained on so far (TRL's num_tokens)
        self._local: list[_LocalGroup] = []
        self._generation: dict[str, float] = {}

    # --- steps 1-3 -------------------------------------------------------------------------
    def generate_phase(self) -> Lease:
        cfg = self.config
        start = time.perf_counter()
        lease = self.transport.lease(self.agent_id, self.round, cfg.questions_per_round)
        prompts = [render_prompt(self.tokenizer, q.question, cfg.system_prompt) for q in lease.questions]
        samples = self.backend.generate(
            prompts,
            n=cfg.group_size,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.grpo.temperature,
            seed=stable_seed(cfg.seed, self.agent_id, self.round, "generate"),
        )
        generation_time = time.perf_counter() - start
        reward_config = RewardConfig(cfg.format_weight)
        groups: list[_LocalGroup] = []
        for question, prompt, group in zip(lease.questions, prompts, samples, strict=True):
            # U+0000 cannot be stored (the coordinator refuses it, docs/protocol.md): a model that
            # emits it shares U+FFFD instead, scored as shared, so claim and verification agree.
            texts = [s.text.replace("\x00", "\ufffd") for s in group]
            claimed = rewards(self.mix, question.ref, texts, reward_config)
            rollout = Rollout(
                ref=question.ref,
                question=question.question,
                answer=question.answer,
                metadata=question.metadata,
                completions=texts,
                rewards=claimed,
                advantages=group_advantages(claimed, cfg.grpo.scale_rewards),
                agent_id=self.agent_id,
                tier=self.tier,
                round=self.round,
                completion_tokens=[len(s.token_ids) for s in group],
                truncated=[not s.finished for s in group],
            )
            prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            groups.append(
                _LocalGroup(rollout, prompt_ids, [s.token_ids for s in group], [s.logprobs for s in group])
            )

        verified = self.transport.submit(lease, [g.rollout for g in groups])
        by_id = {r.rollout_id: r for r in verified}
        for g in groups:  # train on the swarm's verified rewards, never on our own claim
            g.rollout = by_id[g.rollout.rollout_id]
            g.rollout.advantages = group_advantages(g.rollout.rewards, cfg.grpo.scale_rewards)
        self._local = groups
        generated = sum(len(ids) for g in groups for ids in g.completion_ids)
        self._generation = {"generation_time": generation_time, "generated_tokens": float(generated)}
        return lease

    # --- steps 4-7 -------------------------------------------------------------------------
    def train_phase(self) -> dict[str, float]:
        cfg = self.config
        start = time.perf_counter()
        external: list[Rollout] = []
        if cfg.num_external > 0:
            external = self.transport.sample_external(
                self.agent_id, self.round, cfg.num_external, cfg.external_strategy
            )
        local_rollouts = [g.rollout for g in self._local]
        rng = random.Random(stable_seed(cfg.seed, self.agent_id, self.round, "batch"))
        batch, stats = assemble_batch(
            local_rollouts,
            external,
            cfg.num_local,
            cfg.num_external,
            cfg.local_strategy,
            cfg.external_strategy,
            rng,
        )
        local_ids = {g.rollout.rollout_id: g for g in self._local}
        samples: list[TrainSample] = []
        for rollout in batch:
            group = local_ids.get(rollout.rollout_id)
            samples.extend(self._train_samples(rollout, group))

        metrics = self._reward_metrics()
        metrics.update(stats.metrics())
        # Audit figure: a pool must never hand an agent its own rollouts as "external".
        metrics["batch/external_from_self"] = float(sum(r.agent_id == self.agent_id for r in external))
        if samples:
            step = self.learner.step(samples)
            self.backend.sync_weights(self.model)
        else:
            step = {"trained": 0.0, "step_time": 0.0}
        self.tokens_seen += sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        metrics.update(step)
        metrics.update(self._generation)
        metrics["num_tokens"] = float(self.tokens_seen)
        metrics["tokens_per_second"] = self._generation["generated_tokens"] / max(
            self._generation["generation_time"], 1e-9
        )
        metrics["round_time"] = self._generation["generation_time"] + (time.perf_counter() - start)
        metrics["round"] = float(self.round)
        self.transport.report(self.agent_id, self.round, metrics)
        self.round += 1
        self._local = []
        return metrics

    def run_round(self) -> dict[str, float]:
        self.generate_phase()
        return self.train_phase()

    def _train_samples(self, rollout: Rollout, local: _LocalGroup | None) -> list[TrainSample]:
        """One TrainSample per completion; external text is re-tokenised with our tokenizer."""
        advantages = group_advantages(rollout.rewards, self.config.grpo.scale_rewards)
        sampler_logp: list[list[float] | None] = [None] * len(rollout.completions)
        if local is not None:
            prompt_ids, completion_ids = local.prompt_ids, local.completion_ids
            sampler_logp = local.sampler_logp
        else:
            prompt = render_prompt(self.tokenizer, rollout.question, self.config.system_prompt)
            prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            eos = [self.tokenizer.eos_token_id]
            completion_ids = [
                self.tokenizer(text, add_special_tokens=False)["input_ids"] + ([] if truncated else eos)
                for text, truncated in zip(rollout.completions, rollout.truncated, strict=True)
            ]
        return [
            TrainSample(prompt_ids, ids, adv, truncated=trunc, external=local is None, sampler_logp=logp)
            for ids, adv, trunc, logp in zip(
                completion_ids, advantages, rollout.truncated, sampler_logp, strict=True
            )
        ]

    def _reward_metrics(self) -> dict[str, float]:
        """TRL-named statistics of this round's own completions, on verified rewards."""
        all_rewards = [r for g in self._local for r in g.rollout.rewards]
        lengths = [len(ids) for g in self._local for ids in g.completion_ids]
        truncated = [t for g in self._local for t in g.rollout.truncated]
        groups = [g.rollout for g in self._local]
        return {
            "reward": sum(all_rewards) / len(all_rewards),
            "reward_std": reward_std(all_rewards),
            "frac_reward_zero_std": sum(r.zero_advantage for r in groups) / len(groups),
            "completions/mean_length": sum(lengths) / len(lengths),
            "completions/min_length": float(min(lengths)),
            "completions/max_length": float(max(lengths)),
            "completions/clipped_ratio": sum(truncated) / len(truncated),
        }

    # --- checkpoints -----------------------------------------------------------------------
    def save(self, path: Path) -> None:
        save_checkpoint(
            path,
            model=self.model,
            optimizer=self.learner.optimizer,
            state={"round": self.round, "tokens_seen": self.tokens_seen, "agent_id": self.agent_id},
        )

    def load(self, path: Path) -> None:
        state = load_checkpoint(path, model=self.model, optimizer=self.learner.optimizer)
        if state["agent_id"] != self.agent_id:
            raise ValueError(f"checkpoint {path} belongs to agent {state['agent_id']}, not {self.agent_id}")
        self.round = state["round"]
        self.tokens_seen = state["tokens_seen"]
        self.backend.sync_weights(self.model)
