"""The held-out evaluation's time cost at the demo's settings (issue #48: at most 10 % of a node's time).

    python bench/eval_cost.py [--tiers tiny-1m,tiny-5m] [--threads 1]

Per tier, one node with cpu-demo's settings (``cpu_demo_config``; the plain isolated control's
batch, 8 of its own groups, the swarm's batch size) runs ``eval_every`` rounds in process (the
engine's LocalTransport, no coordinator), then answers one evaluation's set
(``eval_questions`` of each task, worker/shared/evaluation.py) greedily, as a volunteer's node
does after every ``eval_every``-th round. One thread, as the demo gives every training process.

Output: per tier the rounds' mean seconds, the evaluation's seconds and its share of the
node's time over one cadence (evaluation / (eval_every rounds + evaluation)); ``ratio=`` last:
the largest share over the tiers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from worker.engine.agent import Agent  # noqa: E402
from worker.engine.generation.select import make_backend  # noqa: E402
from worker.engine.policy import load_policy, resolve  # noqa: E402
from worker.engine.transport import LocalTransport  # noqa: E402
from worker.shared.campaign import cpu_demo_config  # noqa: E402
from worker.shared.evaluation import eval_refs  # noqa: E402
from worker.shared.questions import question  # noqa: E402
from worker.shared.tiers import TIERS, model_cache_dir  # noqa: E402


def measure(tier_name: str) -> tuple[float, float, int]:
    """(mean seconds of a round, seconds of one evaluation, questions evaluated)."""
    config = cpu_demo_config()
    spec = TIERS[tier_name]
    cache = model_cache_dir()
    model_dir = resolve(spec, cache, log=lambda message: None)
    model, tokenizer = load_policy(spec, cache, "cpu", log=lambda message: None)
    backend = make_backend("transformers", model, tokenizer, model_dir, spec, seed=0, log=lambda m: None)
    agent_config = config.control_agent_config(tier_name, 0, "isolated")
    transport = LocalTransport(config.mix, 0, None)
    agent = Agent("bench", tier_name, model, tokenizer, backend, transport, config.mix, agent_config)
    started = time.perf_counter()
    for _ in range(config.eval_every):
        agent.run_round()
    round_seconds = (time.perf_counter() - started) / config.eval_every
    refs = eval_refs(config.mix, config.seed, 0, config.eval_questions)
    texts = [question(config.mix, ref).question for ref in refs]
    started = time.perf_counter()
    agent.answer_greedily(texts)
    return round_seconds, time.perf_counter() - started, len(refs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", default="tiny-1m,tiny-5m")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    every = cpu_demo_config().eval_every
    shares = []
    for tier_name in args.tiers.split(","):
        round_seconds, eval_seconds, questions = measure(tier_name)
        share = eval_seconds / (every * round_seconds + eval_seconds)
        shares.append(share)
        print(
            f"{tier_name}: round {round_seconds:.2f} s (mean of {every}), evaluation of {questions} "
            f"questions {eval_seconds:.2f} s, share of the node's time {100 * share:.1f} %"
        )
    print(f"ratio={max(shares):.4f}")


if __name__ == "__main__":
    main()
