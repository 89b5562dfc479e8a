"""The cost of validating a worker's submission: the protocol's msgspec declarations against
stdlib ``json.loads`` (parsing alone, no validation) and pydantic v2 with the same constraints.

A submission frame of 8 rollouts x G = 8 completions (~12 KB, the shape of the coordinator
benchmark's rounds) is parsed repeatedly; each figure is the median CPU time of this thread per
parse (``time.thread_time``), so neighbours on the machine change it little. Prints
``ratio=`` = msgspec parse-and-validate CPU over json.loads CPU (below 1: validating costs less
than the stdlib takes merely to parse). pydantic is measured when it is importable (it is not a
dependency; vLLM brings it): its model lacks the rollout's group-shape rule, so it does less.

    .venv/bin/python bench/validation.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.shared import protocol
from worker.shared.questions import QuestionRef
from worker.shared.rollout import Rollout

try:
    from pydantic import BaseModel, ConfigDict, Field
except ImportError:  # pragma: no cover - optional comparison
    BaseModel = None


def pydantic_submit():
    class PRef(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        task: Annotated[str, Field(min_length=1, max_length=200)]
        seed: int
        index: Annotated[int, Field(ge=0)]

    class PRollout(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        ref: PRef
        question: Annotated[str, Field(min_length=1, max_length=32000)]
        answer: Annotated[str, Field(max_length=32000)]
        metadata: dict[str, Any]
        completions: Annotated[
            list[Annotated[str, Field(max_length=32000)]], Field(min_length=1, max_length=64)
        ]
        rewards: list[float]
        advantages: list[float]
        agent_id: Annotated[str, Field(min_length=1, max_length=200)]
        tier: Annotated[str, Field(min_length=1, max_length=200)]
        round: Annotated[int, Field(ge=0)]
        completion_tokens: list[Annotated[int, Field(ge=0)]]
        truncated: list[bool]
        rollout_id: Annotated[str, Field(min_length=1, max_length=200)]
        schema_version: Literal[1, 2]
        behaviour: dict[str, Any] | None = None  # the sampler's token ids and log-probs (version 2)

    class PSubmit(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        type: Literal["submit"]
        id: Annotated[str, Field(max_length=64)] | None = None
        submission_id: Annotated[str, Field(max_length=64)]
        lease_id: Annotated[str, Field(max_length=64)]
        rollouts: Annotated[list[PRollout], Field(max_length=64)]

    return PSubmit


def make_frame() -> str:
    rollouts = []
    for q in range(8):
        comps = [f"<answer>{q * 7 + g}</answer> some reasoning text " * 3 for g in range(8)]
        rollouts.append(
            Rollout(
                ref=QuestionRef("chain_sum", 1, q),
                question="What is 3 + 4 + 5? " * 3,
                answer="12",
                metadata={
                    "source_dataset": "chain_sum",
                    "source_index": q,
                    "difficulty": {"num_terms": [2, 4]},
                },
                completions=comps,
                rewards=[float(g % 2) for g in range(8)],
                advantages=[0.5 - (g % 2) for g in range(8)],
                agent_id="node-a",
                tier="tiny-1m",
                round=3,
                completion_tokens=[20] * 8,
                truncated=[False] * 8,
            )
        )
    return protocol.encode(protocol.Submit(id="1", submission_id="s", lease_id="l", rollouts=rollouts))


def cpu_ms(function, repeats: int = 400) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        function()
        times.append(time.thread_time() - start)
    times.sort()
    return times[len(times) // 2] * 1000


def main() -> None:
    raw = make_frame()
    submit = pydantic_submit() if BaseModel is not None else None
    print(f"submission frame: {len(raw)} bytes, 8 rollouts x 8 completions")
    ratios = []
    for index in range(3):
        base = cpu_ms(lambda: json.loads(raw))
        ours = cpu_ms(lambda: protocol.parse(raw, "worker"))
        line = f"pass {index}: json.loads {base:.3f} ms, msgspec parse+validate {ours:.3f} ms"
        if submit is not None:
            theirs = cpu_ms(lambda: submit.model_validate_json(raw))
            line += f", pydantic validate_json {theirs:.3f} ms (pydantic/msgspec {theirs / ours:.2f})"
        print(line)
        ratios.append(ours / base)
    print(f"ratio={sorted(ratios)[1]:.2f}")


if __name__ == "__main__":
    main()
