"""The rollout record: one question with its G completions, as decoded text.

This is what SAPO shares between nodes, and the same type the websocket protocol carries
(``worker/shared/protocol.py`` embeds :meth:`Rollout.to_json`). Only text travels: a receiving node
re-tokenises question and completions with its own tokenizer and scores them under its own
policy, so nodes with different models and tokenizers can share.

Validation is strict because rollouts arrive from untrusted workers: :meth:`Rollout.from_json`
checks every field's type, the group's shape and the size limits, and raises
:class:`RolloutError` with a message saying what was wrong.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from worker.shared.questions import QuestionRef

SCHEMA_VERSION = 1
MAX_COMPLETIONS = 64  # G
MAX_TEXT_CHARS = 32_000  # one question, answer or completion
MAX_METADATA_CHARS = 64_000


class RolloutError(ValueError):
    """A rollout record that does not match the schema; the message names the field."""


@dataclass
class Rollout:
    """One question, its ground truth and G completions with their rewards and advantages.

    rewards[g] and advantages[g] belong to completions[g]; advantages are computed within this
    group (see worker/shared/advantages.py). ``completion_tokens[g]`` counts tokens under the
    producing model's tokenizer; ``truncated[g]`` is true when generation hit max_new_tokens.
    """

    ref: QuestionRef
    question: str
    answer: str
    metadata: dict[str, Any]
    completions: list[str]
    rewards: list[float]
    advantages: list[float]
    agent_id: str
    tier: str
    round: int
    completion_tokens: list[int]
    truncated: list[bool]
    rollout_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schema_version: int = SCHEMA_VERSION

    @property
    def group_size(self) -> int:
        return len(self.completions)

    @property
    def zero_advantage(self) -> bool:
        """True when all G rewards are equal: the group carries no GRPO learning signal."""
        return max(self.rewards) - min(self.rewards) <= 1e-9 if self.rewards else True

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ref"] = self.ref.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> Rollout:
        if not isinstance(data, dict):
            raise RolloutError("rollout: expected an object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise RolloutError(f"rollout.schema_version: expected {SCHEMA_VERSION}, got {version!r}")
        expected = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - expected
        missing = expected - set(data)
        if unknown:
            raise RolloutError(f"rollout: unknown fields {sorted(unknown)}")
        if missing:
            raise RolloutError(f"rollout: missing fields {sorted(missing)}")

        ref = data["ref"]
        if not (
            isinstance(ref, dict)
            and set(ref) == {"task", "seed", "index"}
            and isinstance(ref["task"], str)
            and _is_int(ref["seed"])
            and _is_int(ref["index"])
            and ref["index"] >= 0
        ):
            raise RolloutError("rollout.ref: expected {task: str, seed: int, index: int >= 0}")
        for name in ("question", "agent_id", "tier", "rollout_id"):
            _check_text(data[name], f"rollout.{name}")
        _check_text(data["answer"], "rollout.answer", allow_empty=True)  # "" where many answers are right
        if not isinstance(data["metadata"], dict):
            raise RolloutError("rollout.metadata: expected an object")
        if len(repr(data["metadata"])) > MAX_METADATA_CHARS:
            raise RolloutError(f"rollout.metadata: larger than {MAX_METADATA_CHARS} characters")
        if not _is_int(data["round"]) or data["round"] < 0:
            raise RolloutError("rollout.round: expected an integer >= 0")

        completions = data["completions"]
        if not isinstance(completions, list) or not 1 <= len(completions) <= MAX_COMPLETIONS:
            raise RolloutError(f"rollout.completions: expected a list of 1..{MAX_COMPLETIONS} strings")
        for i, text in enumerate(completions):
            _check_text(text, f"rollout.completions[{i}]", allow_empty=True)
        size = len(completions)
        for name, check in (
            ("rewards", _is_finite),
            ("advantages", _is_finite),
            ("completion_tokens", lambda v: _is_int(v) and v >= 0),
            ("truncated", lambda v: isinstance(v, bool)),
        ):
            values = data[name]
            if not isinstance(values, list) or len(values) != size:
                raise RolloutError(f"rollout.{name}: expected a list of {size} values, one per completion")
            for i, value in enumerate(values):
                if not check(value):
                    raise RolloutError(f"rollout.{name}[{i}]: invalid value {value!r}")

        return cls(
            ref=QuestionRef(ref["task"], ref["seed"], ref["index"]),
            question=data["question"],
            answer=data["answer"],
            metadata=data["metadata"],
            completions=list(completions),
            rewards=[float(v) for v in data["rewards"]],
            advantages=[float(v) for v in data["advantages"]],
            agent_id=data["agent_id"],
            tier=data["tier"],
            round=data["round"],
            completion_tokens=list(data["completion_tokens"]),
            truncated=list(data["truncated"]),
            rollout_id=data["rollout_id"],
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_text(value: Any, name: str, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise RolloutError(f"{name}: expected a string")
    if not allow_empty and not value:
        raise RolloutError(f"{name}: must not be empty")
    if len(value) > MAX_TEXT_CHARS:
        raise RolloutError(f"{name}: longer than {MAX_TEXT_CHARS} characters")
