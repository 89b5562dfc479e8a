"""The rollout record: one question with its G completions, as decoded text.

This is what SAPO shares between nodes, and the same type the websocket protocol carries
(``worker/shared/protocol.py`` embeds it; its JSON Schema is in docs/protocol.md as
``Rollout``). Only text travels: a receiving node re-tokenises question and completions with
its own tokenizer and scores them under its own policy, so nodes with different models and
tokenizers can share.

Validation is strict because rollouts arrive from untrusted workers. The declaration below is
the schema (msgspec checks types, sizes and unknown fields while it decodes);
:meth:`Rollout.__post_init__` adds what a schema cannot say (one reward, advantage, token count
and truncation flag per completion; finite numbers; the metadata's size). :meth:`Rollout.from_json`
raises :class:`RolloutError` saying what was wrong.
"""

from __future__ import annotations

import math
import uuid
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from worker.shared import validation
from worker.shared.advantages import zero_advantage
from worker.shared.questions import QuestionRef

# The newest record layout this code reads and writes. Version 2 adds the optional ``behaviour``;
# a record without it stays version 1, so that workers that read only version 1 can still train on
# it (a campaign that turns the off-policy correction on needs workers that read version 2).
SCHEMA_VERSION = 2
MAX_COMPLETIONS = 64  # G
MAX_TEXT_CHARS = 32_000  # one question, answer or completion
MAX_NAME_CHARS = 200  # agent id, tier, rollout id
MAX_METADATA_CHARS = 64_000
MAX_TOKEN_IDS = 32_000  # a prompt's or a completion's token ids in ``behaviour``

Text = Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]
Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]


class RolloutError(ValueError):
    """A rollout record that does not match the schema; the message names the field."""


TokenIds = Annotated[list[Annotated[int, Meta(ge=0)]], Meta(max_length=MAX_TOKEN_IDS)]


class Behaviour(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What the generator knew of its completions: its token ids and per-token log-probs.

    Carried only in campaigns that turn on the off-policy correction of external rollouts
    (GRPOConfig.external_importance_sampling_correction): a receiver with the same tokenizer (the
    rollout's ``tier``) trains on these ids and weights each token by
    min(exp(logp_receiver_old - logp), cap), truncated importance sampling from the generator's
    policy to its own (worker/engine/trainer.py). ``completion_ids[g]`` and ``logp[g]`` belong to
    ``completions[g]`` and have ``completion_tokens[g]`` entries each.
    """

    prompt_ids: TokenIds
    completion_ids: list[TokenIds]
    logp: list[Annotated[list[float], Meta(max_length=MAX_TOKEN_IDS)]]


class Rollout(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One question, its ground truth and G completions with their rewards and advantages.

    rewards[g] and advantages[g] belong to completions[g]; advantages are computed within this
    group (see worker/shared/advantages.py). ``completion_tokens[g]`` counts tokens under the
    producing model's tokenizer; ``truncated[g]`` is true when generation hit max_new_tokens.
    """

    ref: QuestionRef
    question: Annotated[str, Meta(min_length=1, max_length=MAX_TEXT_CHARS)]
    answer: Annotated[Text, Meta(description='"" where many answers are right')]
    metadata: Annotated[dict[str, Any], Meta(description=f"at most {MAX_METADATA_CHARS} characters")]
    completions: Annotated[list[Text], Meta(min_length=1, max_length=MAX_COMPLETIONS)]
    rewards: list[float]
    advantages: list[float]
    agent_id: Name
    tier: Name
    round: Annotated[int, Meta(ge=0)]
    completion_tokens: list[Annotated[int, Meta(ge=0)]]
    truncated: list[bool]
    rollout_id: Name = msgspec.field(default_factory=lambda: uuid.uuid4().hex)
    behaviour: Behaviour | None = None  # needs schema_version 2; see Behaviour
    schema_version: Literal[1, 2] = 1

    def __post_init__(self) -> None:
        size = len(self.completions)
        for name in ("rewards", "advantages", "completion_tokens", "truncated"):
            if len(getattr(self, name)) != size:
                raise ValueError(f"{name}: expected a list of {size} values, one per completion")
        for name in ("rewards", "advantages"):
            for i, value in enumerate(getattr(self, name)):
                if not math.isfinite(value):
                    raise ValueError(f"{name}[{i}]: invalid value {value!r}")
        if len(repr(self.metadata)) > MAX_METADATA_CHARS:
            raise ValueError(f"metadata: larger than {MAX_METADATA_CHARS} characters")
        if self.behaviour is not None:
            self._check_behaviour(self.behaviour)

    def _check_behaviour(self, behaviour: Behaviour) -> None:
        if self.schema_version < 2:
            raise ValueError("behaviour: needs schema_version 2")
        for name in ("completion_ids", "logp"):
            if len(getattr(behaviour, name)) != len(self.completions):
                raise ValueError(
                    f"behaviour.{name}: expected {len(self.completions)} lists, one per completion"
                )
        for g, (ids, logp) in enumerate(zip(behaviour.completion_ids, behaviour.logp, strict=True)):
            if not len(ids) == len(logp) == self.completion_tokens[g]:
                raise ValueError(
                    f"behaviour[{g}]: {len(ids)} token ids and {len(logp)} log-probs for "
                    f"completion_tokens {self.completion_tokens[g]}"
                )
            for t, value in enumerate(logp):
                if not (math.isfinite(value) and value <= 1e-3):  # a log-probability is <= 0
                    raise ValueError(f"behaviour.logp[{g}][{t}]: invalid log-probability {value!r}")

    @property
    def group_size(self) -> int:
        return len(self.completions)

    @property
    def zero_advantage(self) -> bool:
        """True when all G rewards are equal: the group carries no GRPO learning signal."""
        return zero_advantage(self.rewards)

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards)

    def to_json(self) -> dict[str, Any]:
        data = msgspec.to_builtins(self)
        if self.behaviour is None:
            del data["behaviour"]  # the version 1 layout, exactly
        return data

    @classmethod
    def from_json(cls, data: Any) -> Rollout:
        """Validate a decoded record (a dict) into a Rollout; raise :class:`RolloutError`."""
        try:
            return msgspec.convert(data, cls, strict=True)
        except msgspec.ValidationError as error:
            raise RolloutError(validation.message(error, "rollout")) from None
