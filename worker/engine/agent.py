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

Controls of issue #18 (worker/shared/arms.py), set in :class:`~worker.shared.config.AgentConfig`:

* ``replay="self"`` (``4/4-self``): step 4 draws the J rollouts from this agent's own last
  ``self_window`` groups (this round's included, this round's local picks excluded) instead of
  the swarm's pool; the window is saved in the checkpoint.
* ``max_questions`` > B (``8/0-dyn``): after step 3, while fewer than I groups qualify for the
  local strategy, lease and generate more questions (as many as are missing) from the
  transport's over-generation stream (``lease_extra``: worker/shared/paired.py), at most
  ``max_questions`` in all. The round's ``reward`` stays the mean over its first B questions
  (those every arm sees); ``generation/questions`` counts all of them.

Batch rules of issue #29 (``AgentConfig.batch_rule``, worker/shared/sampling.py's
``batch_request``): before step 4 the agent sets this round's I_r and J_r. ``fixed``: I and J.
``backfill``: every own group the local strategy accepts (at most I), then external groups up
to B in all (at most J); the pool is asked for exactly that many. ``decay``: J falls linearly
to 0 over ``decay_rounds`` rounds and its slots go to own groups. ``questions_per_round`` (B)
is what the agent generates, separate from I and J: ``4/4@B4`` generates 4 and trains on those
4 plus 4 external (the SAPO reference code's semantics), ``4/4`` generates 8 and trains on 4.

Compute (every round): ``generation/completions`` and ``generation/tokens`` (completion tokens
generated, over-generation included), ``train/completions`` and ``train/tokens`` (prompt +
completion tokens trained on: what ``num_tokens`` adds up).

Steps 1-3 are :meth:`Agent.generate_phase`, steps 4-7 :meth:`Agent.train_phase`; the
simulator runs every agent's generate phase before any train phase so that a lockstep swarm
shares within a round, while a volunteer runs :meth:`Agent.run_round` and shares
asynchronously. The transport (worker/engine/transport.py) is the only thing that differs.
"""

from __future__ import annotations

import random
import time
from collections import deque
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
from worker.shared.rollout import Behaviour, Rollout
from worker.shared.sampling import assemble_batch, batch_request, qualifies


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
        seed_id: str | None = None,
    ) -> None:
        """``seed_id`` (default ``agent_id``): what its generation and batch seeds are drawn from;
        a campaign's controls of one seed share it, so that their arms are paired."""
        self.agent_id = agent_id
        self.seed_id = seed_id or agent_id
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
        # self-replay: this agent's own last self_window verified groups (replay == "self")
        self.window: deque[Rollout] = deque(maxlen=max(config.self_window, 1))
        # what the last step trained on: (rollout id, generating agent, its round, "local" / "pool" /
        # "self"), for audits and tests
        self.last_batch: list[tuple[str, str, int, str]] = []
        if config.max_questions and not hasattr(transport, "lease_extra"):
            raise ValueError(
                "over-generation (max_questions) needs a transport with lease_extra (the local one, "
                "or the websocket transport of a campaign's control node)"
            )

    # --- steps 1-3 -------------------------------------------------------------------------
    def _generate(self, lease: Lease, tag: object) -> tuple[list[_LocalGroup], float]:
        """G completions for each of ``lease``'s questions, scored, shared and verified."""
        cfg = self.config
        start = time.perf_counter()
        prompts = [render_prompt(self.tokenizer, q.question, cfg.system_prompt) for q in lease.questions]
        samples = self.backend.generate(
            prompts,
            n=cfg.group_size,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.grpo.temperature,
            seed=stable_seed(cfg.seed, self.seed_id, self.round, "generate", *([tag] if tag else [])),
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
        # Everyone in the campaign corrects external rollouts: ours carry what that needs. (A
        # transport with ``pool = None`` is the in-process isolated arm: nobody receives them.)
        if (
            cfg.grpo.external_importance_sampling_correction
            and getattr(self.transport, "pool", True) is not None
        ):
            self._attach_behaviour(groups)
        verified = self.transport.submit(lease, [g.rollout for g in groups])
        by_id = {r.rollout_id: r for r in verified}
        for g in groups:  # train on the swarm's verified rewards, never on our own claim
            g.rollout = by_id[g.rollout.rollout_id]
            g.rollout.advantages = group_advantages(g.rollout.rewards, cfg.grpo.scale_rewards)
        return groups, generation_time

    def generate_phase(self) -> Lease:
        cfg = self.config
        lease = self.transport.lease(self.agent_id, self.round, cfg.questions_per_round)
        groups, generation_time = self._generate(lease, None)
        calls = 1
        if cfg.max_questions:  # over-generation: until I groups qualify or max_questions asked
            informative = sum(qualifies(g.rollout, cfg.local_strategy) for g in groups)
            while informative < cfg.num_local and len(groups) < cfg.max_questions:
                count = min(cfg.num_local - informative, cfg.max_questions - len(groups))
                extra = self.transport.lease_extra(  # type: ignore[attr-defined]
                    self.agent_id, self.round, count, len(groups) - cfg.questions_per_round
                )
                more, seconds = self._generate(extra, ("extra", len(groups)))
                groups += more
                generation_time += seconds
                calls += 1
                informative += sum(qualifies(g.rollout, cfg.local_strategy) for g in more)
        self._local = groups
        generated = sum(len(ids) for g in groups for ids in g.completion_ids)
        self._generation = {
            "generation_time": generation_time,
            "generated_tokens": float(generated),
            "generation/tokens": float(generated),  # completion tokens, every question generated
            "generation/questions": float(len(groups)),
            "generation/completions": float(len(groups) * cfg.group_size),
            "generation/calls": float(calls),
            "generation/reward": sum(r for g in groups for r in g.rollout.rewards)
            / sum(len(g.rollout.rewards) for g in groups),
        }
        return lease

    def _attach_behaviour(self, groups: list[_LocalGroup]) -> None:
        """The generator's token ids and per-token log-probs of its completions (this policy,
        before its update), in each rollout record (schema version 2), for the receivers'
        off-policy correction (worker/shared/rollout.py, Behaviour)."""
        samples = [TrainSample(g.prompt_ids, ids, 0.0) for g in groups for ids in g.completion_ids]
        logps = iter(self.learner.score(samples)) if samples else iter(())
        for g in groups:
            g.rollout.behaviour = Behaviour(
                prompt_ids=list(g.prompt_ids),
                completion_ids=[list(ids) for ids in g.completion_ids],
                logp=[list(next(logps)) for _ in g.completion_ids],
            )
            g.rollout.schema_version = 2

    # --- steps 4-7 -------------------------------------------------------------------------
    def train_phase(self) -> dict[str, float]:
        cfg = self.config
        start = time.perf_counter()
        local_rollouts = [g.rollout for g in self._local]
        external: list[Rollout] = []
        self_replay = cfg.replay == "self"
        # this round's I_r and J_r under the batch rule (fixed: I and J)
        num_local, num_external = batch_request(
            cfg.batch_rule,
            cfg.num_local,
            cfg.num_external,
            cfg.questions_per_round,
            self.round,
            sum(qualifies(r, cfg.local_strategy) for r in local_rollouts),
            cfg.decay_rounds,
        )
        if self_replay:
            # this round's groups join the window first; the local picks are excluded below
            self.window.extend(local_rollouts)
            external = list(self.window)
        elif num_external > 0:
            external = self.transport.sample_external(
                self.agent_id, self.round, num_external, cfg.external_strategy
            )
        rng = random.Random(stable_seed(cfg.seed, self.seed_id, self.round, "batch"))
        batch, stats = assemble_batch(
            local_rollouts,
            external,
            num_local,
            num_external,
            cfg.local_strategy,
            cfg.external_strategy,
            rng,
            exclude_chosen_local=self_replay,
        )
        local_ids = {g.rollout.rollout_id: g for g in self._local}
        chosen_local = batch[: stats.local_used]
        chosen_external = batch[stats.local_used :]
        samples: list[TrainSample] = []
        for rollout in chosen_local:
            samples.extend(self._train_samples(rollout, local_ids[rollout.rollout_id]))
        for rollout in chosen_external:
            samples.extend(self._train_samples(rollout, None))
        source = "self" if self_replay else "pool"
        self.last_batch = [(r.rollout_id, r.agent_id, r.round, "local") for r in chosen_local] + [
            (r.rollout_id, r.agent_id, r.round, source) for r in chosen_external
        ]

        metrics = self._reward_metrics()
        metrics.update(stats.metrics())
        # Audit figure: a pool must never hand an agent its own rollouts as "external".
        pooled = [] if self_replay else external
        metrics["batch/external_from_self"] = float(sum(r.agent_id == self.agent_id for r in pooled))
        metrics.update(self._batch_metrics(chosen_local, chosen_external))
        if samples:
            step = self.learner.step(samples)
            self.backend.sync_weights(self.model)
        else:
            step = {"trained": 0.0, "step_time": 0.0}
        trained_tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        self.tokens_seen += trained_tokens
        metrics.update(step)
        # compute of the round: what it trained on (prompt + completion tokens, as num_tokens)
        metrics["train/completions"] = float(len(samples))
        metrics["train/tokens"] = float(trained_tokens)
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

    def _batch_metrics(self, local: list[Rollout], external: list[Rollout]) -> dict[str, float]:
        """What the step trained on: informative groups, the J side's origin and age, and the
        reward/advantage statistics of own vs external (or replayed) groups."""

        def mean(values: list[float]) -> float:
            return sum(values) / len(values) if values else 0.0

        metrics = {
            "batch/informative_groups": float(sum(not r.zero_advantage for r in local + external)),
            "batch/local_informative": float(sum(not r.zero_advantage for r in local)),
            "batch/external_informative": float(sum(not r.zero_advantage for r in external)),
            # J-side rollouts generated by another agent: 0 by design for self-replay
            "batch/external_from_others": float(sum(r.agent_id != self.agent_id for r in external)),
        }
        for side, groups in (("local", local), ("external", external)):
            if not groups:
                continue
            advantages = [
                abs(a) for r in groups for a in group_advantages(r.rewards, self.config.grpo.scale_rewards)
            ]
            metrics[f"batch/{side}_reward_mean"] = mean([r.mean_reward for r in groups])
            metrics[f"batch/{side}_reward_std"] = mean([reward_std(r.rewards) for r in groups])
            metrics[f"advantages/{side}_abs_mean"] = mean(advantages)
        if external:  # age in rounds: 0 = generated this round
            ages = [float(self.round - r.round) for r in external]
            metrics["batch/external_age"] = mean(ages)
            metrics["batch/external_age_max"] = max(ages)
        return metrics

    def run_round(self) -> dict[str, float]:
        self.generate_phase()
        return self.train_phase()

    def _train_samples(self, rollout: Rollout, local: _LocalGroup | None) -> list[TrainSample]:
        """One TrainSample per completion; external text is re-tokenised with our tokenizer."""
        advantages = group_advantages(rollout.rewards, self.config.grpo.scale_rewards)
        sampler_logp: list[list[float] | None] = [None] * len(rollout.completions)
        behaviour_logp: list[list[float] | None] = [None] * len(rollout.completions)
        if local is not None:
            prompt_ids, completion_ids = local.prompt_ids, local.completion_ids
            sampler_logp = local.sampler_logp
        elif (behaviour := self._behaviour(rollout)) is not None:
            # the generator's own tokens (same tokenizer), with its log-probs for the correction
            prompt_ids, completion_ids = behaviour.prompt_ids, behaviour.completion_ids
            behaviour_logp = behaviour.logp
        else:
            prompt = render_prompt(self.tokenizer, rollout.question, self.config.system_prompt)
            prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            eos = [self.tokenizer.eos_token_id]
            completion_ids = [
                self.tokenizer(text, add_special_tokens=False)["input_ids"] + ([] if truncated else eos)
                for text, truncated in zip(rollout.completions, rollout.truncated, strict=True)
            ]
        return [
            TrainSample(
                prompt_ids,
                ids,
                adv,
                truncated=trunc,
                external=local is None,
                sampler_logp=logp,
                behaviour_logp=blogp,
            )
            for ids, adv, trunc, logp, blogp in zip(
                completion_ids, advantages, rollout.truncated, sampler_logp, behaviour_logp, strict=True
            )
        ]

    def _behaviour(self, rollout: Rollout) -> Behaviour | None:
        """The generator's tokens and log-probs of an external rollout, when the correction is on,
        the record carries them and the generator shares our tokenizer (the same tier)."""
        if not self.config.grpo.external_importance_sampling_correction:
            return None
        if rollout.behaviour is None or rollout.tier != self.tier:
            return None
        return rollout.behaviour

    def _reward_metrics(self) -> dict[str, float]:
        """TRL-named statistics of this round's own completions, on verified rewards.

        Over the round's first B questions only (the ones every arm sees), also when the agent
        over-generated (``generation/reward`` is the mean over all it generated)."""
        base = self._local[: self.config.questions_per_round]
        all_rewards = [r for g in base for r in g.rollout.rewards]
        lengths = [len(ids) for g in base for ids in g.completion_ids]
        truncated = [t for g in base for t in g.rollout.truncated]
        groups = [g.rollout for g in base]
        return {
            "reward": sum(all_rewards) / len(all_rewards),
            "reward_std": reward_std(all_rewards),
            "frac_reward_zero_std": sum(r.zero_advantage for r in groups) / len(groups),
            "completions/mean_length": sum(lengths) / len(lengths),
            "completions/min_length": float(min(lengths)),
            "completions/max_length": float(max(lengths)),
            "completions/clipped_ratio": sum(truncated) / len(truncated),
        }

    # --- held-out evaluation (worker/shared/evaluation.py) -----------------------------------
    def answer_greedily(self, questions: list[str]) -> list[str]:
        """One greedy completion (temperature 0) per question with the current policy: the
        answers a held-out evaluation scores."""
        cfg = self.config
        prompts = [render_prompt(self.tokenizer, text, cfg.system_prompt) for text in questions]
        samples = self.backend.generate(
            prompts,
            n=1,
            max_new_tokens=cfg.max_new_tokens,
            temperature=0.0,
            seed=stable_seed(cfg.seed, self.seed_id, self.round, "evaluate"),
        )
        return [group[0].text.replace("\x00", "\ufffd") for group in samples]

    # --- checkpoints -----------------------------------------------------------------------
    def save(self, path: Path) -> None:
        save_checkpoint(
            path,
            model=self.model,
            optimizer=self.learner.optimizer,
            state={
                "round": self.round,
                "tokens_seen": self.tokens_seen,
                "agent_id": self.agent_id,
                "self_window": [r.to_json() for r in self.window] if self.config.replay == "self" else [],
            },
        )

    def load(self, path: Path) -> None:
        state = load_checkpoint(path, model=self.model, optimizer=self.learner.optimizer)
        if state["agent_id"] != self.agent_id:
            raise ValueError(f"checkpoint {path} belongs to agent {state['agent_id']}, not {self.agent_id}")
        self.round = state["round"]
        self.tokens_seen = state["tokens_seen"]
        self.window.clear()
        self.window.extend(Rollout.from_json(item) for item in state.get("self_window", []))
        self.backend.sync_weights(self.model)
