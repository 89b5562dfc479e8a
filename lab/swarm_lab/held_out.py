"""What a study cell's agents can do on questions they never trained on, and how far apart they drift.

Issue #49. :class:`HeldOut` observes a cell (``run_arm``'s ``observe`` hook) at fixed points
(training rounds done: 0 is the initial weights, 45 the end of a 45-round cell).

**The evaluation set** of seed s: the first ``per_task`` questions of every task's evaluation
dataset of seed s (worker/shared/evaluation.py: ``eval_refs(mix, s, 0, per_task)``), from dataset
seeds at or above 2**32 that no training stream can reach. It is the same set at every point
(a curve over the points is comparable: unlike a campaign's fresh draws, the simulator's agents
cannot see it) and for every arm of the seed (arms pair on it, as on their training questions).

**Accuracy and reward.** At each point every agent answers each question once, greedily
(temperature 0, the study's max_new_tokens); the task's verifier scores it
(``score_answers``): ``accuracy`` is the share of answers with the full score (exact-correct),
``reward`` the mean graded reward (partial credit, the measure training reward uses). A cell's
value is the mean over its N agents; n = N x questions answers per point.

**Divergence.** Probe sequences x_p = prompt_p + a_p (p over the evaluation questions), a_p the
initial policy's greedy answer (every agent starts from the same weights, so it is every agent's
at point 0). With pi_i(. | x_<t) agent i's next-token distribution at answer position t (V
tokens) and T the probe tokens (every position of every a_p)::

    KL_t(i || j) = sum_v pi_i(v | x_<t) (log pi_i(v | x_<t) - log pi_j(v | x_<t))
    divergence   = 1 / (N (N - 1)) sum_{i != j} 1/|T| sum_t KL_t(i || j)    (agents vs each other)
    drift        = 1 / N sum_i 1/|T| sum_t KL_t(i || 0)                       (vs the initial policy)

Log-probs are computed at temperature 1 (the policies themselves), in float32. Generation runs in
the backend's private RNG stream and the forward passes draw no random numbers, so observing a
cell leaves its training bit for bit as it was (tests/worker/research/test_study_v4.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from worker.shared.config import stable_seed
from worker.shared.evaluation import eval_refs, score_answers
from worker.shared.prompts import render_prompt
from worker.shared.questions import TaskMix, question

if TYPE_CHECKING:
    from worker.engine.agent import Agent
    from worker.research.simulate import Swarm

DEFAULT_POINTS = (0, 15, 30, 45)  # rounds done: the 0, 15, 30 and 45
DEFAULT_PER_TASK = 64


class HeldOut:
    """Held-out accuracy, reward, divergence and drift of one cell at ``points`` (module docstring)."""

    def __init__(
        self, mix: TaskMix, seed: int, per_task: int, points: list[int], max_new_tokens: int
    ) -> None:
        self.points = sorted(set(points))
        self.max_new_tokens = max_new_tokens
        self.refs = eval_refs(mix, seed, 0, per_task)
        self.questions = [question(mix, ref).question for ref in self.refs]
        self.mix = mix
        self.seed = seed
        self.rows: list[dict[str, Any]] = []
        self._probe: list[tuple[list[int], list[int]]] = []  # (prompt ids, answer ids) per question
        self._start_logp: torch.Tensor | None = None  # [|T|, V]: the initial policy's

    def record(self, agents: int) -> dict[str, Any]:
        """The cell's record: per point, the agents' mean accuracy and reward, divergence and
        drift; ``n`` answers per point (agents x questions)."""
        rows = self.rows
        return {
            "rounds": [row["round"] for row in rows],
            "accuracy": [round_6(row["accuracy"]) for row in rows],
            "reward": [round_6(row["reward"]) for row in rows],
            "divergence": [round_6(row["divergence"]) for row in rows],
            "drift": [round_6(row["drift"]) for row in rows],
            "agent_accuracy": [row["agent_accuracy"] for row in rows],
            "questions": len(self.refs),
            "n": len(self.refs) * agents,
        }

    def __call__(self, swarm: Swarm) -> None:
        if swarm.round in self.points:
            self.observe(swarm.round, swarm.agents)

    def observe(self, round: int, agents: list[Agent]) -> None:
        accuracy, reward = [], []
        for agent in agents:
            answers = self._answer(agent)
            if not self._probe:  # point 0 comes first: the initial policy's answers are the probe
                prompts = self._prompt_ids(agent)
                self._probe = [(p, a["token_ids"]) for p, a in zip(prompts, answers, strict=True)]
            score = score_answers(self.mix, self.refs, [a["text"] for a in answers])
            accuracy.append(score.accuracy)
            reward.append(score.reward)
        logps = [self._answer_logp(agent) for agent in agents]  # N x [|T|, V]
        if self._start_logp is None:
            self._start_logp = logps[0]
        self.rows.append(
            {
                "round": round,
                "accuracy": sum(accuracy) / len(accuracy),
                "reward": sum(reward) / len(reward),
                "agent_accuracy": [round_6(a) for a in accuracy],
                "divergence": mean_pairwise_kl(logps),
                "drift": sum(kl(logp, self._start_logp) for logp in logps) / len(logps),
            }
        )

    def _answer(self, agent: Agent) -> list[dict[str, Any]]:
        prompts = [render_prompt(agent.tokenizer, q, agent.config.system_prompt) for q in self.questions]
        samples = agent.backend.generate(
            prompts,
            n=1,
            max_new_tokens=self.max_new_tokens,
            temperature=0.0,
            seed=stable_seed(self.seed, agent.agent_id, "held-out"),
        )
        return [{"text": group[0].text, "token_ids": list(group[0].token_ids)} for group in samples]

    def _prompt_ids(self, agent: Agent) -> list[list[int]]:
        prompts = [render_prompt(agent.tokenizer, q, agent.config.system_prompt) for q in self.questions]
        return [agent.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]

    @torch.no_grad()
    def _answer_logp(self, agent: Agent) -> torch.Tensor:
        """Log pi(. | x_<t) at every probe answer position, in probe order: [|T|, V]."""
        model = agent.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        pad = agent.tokenizer.pad_token_id
        out: list[torch.Tensor] = []
        chunk = 64
        for start in range(0, len(self._probe), chunk):
            part = [(p, a) for p, a in self._probe[start : start + chunk] if a]
            if not part:
                continue
            width = max(len(p) + len(a) for p, a in part)
            ids = torch.full((len(part), width), pad, dtype=torch.long)
            mask = torch.zeros((len(part), width), dtype=torch.long)
            for row, (p, a) in enumerate(part):  # right-padded: positions count from 0 in each row
                ids[row, : len(p) + len(a)] = torch.tensor(p + a)
                mask[row, : len(p) + len(a)] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
            logp = torch.log_softmax(logits, dim=-1)  # [b, width, V]
            for row, (p, a) in enumerate(part):  # position P - 1 + k predicts answer token k
                out.append(logp[row, len(p) - 1 : len(p) - 1 + len(a)].cpu())
        if was_training:
            model.train()
        return torch.cat(out)


def kl(logp: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over positions of KL(p || q) for log-probs ``logp``, ``other`` of shape [|T|, V]."""
    return float((logp.exp() * (logp - other)).sum(-1).mean())


def mean_pairwise_kl(logps: list[torch.Tensor]) -> float:
    """The module docstring's divergence: the mean of KL(i || j) over ordered pairs i != j."""
    n = len(logps)
    if n < 2:
        return 0.0
    total = sum(kl(logps[i], logps[j]) for i in range(n) for j in range(n) if i != j)
    return total / (n * (n - 1))


def round_6(value: float) -> float:
    return round(value, 6)
