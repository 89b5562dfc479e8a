"""Questions from reasoning-gym, addressable by (task mix, seed, index).

A question is identified by a :class:`QuestionRef` ``(task, seed, index)``: the task's
reasoning-gym dataset built with its config from the :class:`TaskMix` and ``seed`` yields entry
``index``. Anyone holding the mix can regenerate the question and its ground truth, which is how
the coordinator re-scores what workers send without trusting them.

Which task a stream position gets is drawn from the mix's weights with an RNG seeded by
``(seed, position)``, so a stream is reproducible and positions are independent.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any

import msgspec
import reasoning_gym
from msgspec import Meta
from reasoning_gym.factory import DATASETS

# reasoning-gym datasets are indexable far past their nominal size (entry i is generated from
# Random(seed + i)); the size only bounds iteration, so give it room for every question ever asked.
DATASET_SIZE = 10**9

# Bounds on a task's settings, so that an organizer's typo cannot make every lease (and the
# validation itself) generate megabytes: a number may be at most SETTING_FACTOR times
# reasoning-gym's own default for that setting (at least SETTING_FLOOR), a min_X setting at
# most the bound of its max_X; a setting without a numeric default at most SETTING_CAP. The
# first question is then generated and must stay under MAX_QUESTION_CHARS.
SETTING_FACTOR = 10
SETTING_FLOOR = 10
SETTING_CAP = 1000
MAX_SETTING_TEXT = 200  # characters of a text setting, items of a list setting
MAX_QUESTION_CHARS = 8000
COORDINATOR_SETTINGS = ("size", "seed")  # chosen by the coordinator for every question


@dataclass(frozen=True)
class TaskSpec:
    """One reasoning-gym task of a mix: its registered name, weight and dataset config."""

    name: str
    weight: float = 1.0
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "config": dict(self.config)}


class TaskError(ValueError):
    """A task mix that cannot be built: unknown task, bad weight or config."""


@dataclass(frozen=True)
class TaskMix:
    """A weighted composite of reasoning-gym tasks."""

    tasks: tuple[TaskSpec, ...]

    def __post_init__(self) -> None:
        if not self.tasks:
            raise TaskError("a task mix needs at least one task")
        names = [task.name for task in self.tasks]
        if len(set(names)) != len(names):
            raise TaskError(f"duplicate tasks in mix: {names}")
        for task in self.tasks:
            if task.name not in DATASETS:
                raise TaskError(f"unknown reasoning-gym task {task.name!r}")
            if not task.weight > 0:
                raise TaskError(f"task {task.name!r}: weight must be positive, got {task.weight}")

    @property
    def names(self) -> list[str]:
        return [task.name for task in self.tasks]

    def spec(self, name: str) -> TaskSpec:
        for task in self.tasks:
            if task.name == name:
                return task
        raise TaskError(f"task {name!r} is not in this mix ({', '.join(self.names)})")

    def validate_configs(self) -> None:
        """Check each task's settings against their bounds, then build its dataset and its first
        question, so that a bad config fails here with the task's name. The cost is bounded: the
        bounds are checked before anything is generated."""
        for task in self.tasks:
            check_setting_bounds(task)
            try:
                dataset = dataset_for(task.name, canonical_json(task.config), 0)
                first = dataset[0]["question"]
            except Exception as error:  # reasoning-gym raises assorted errors for bad configs
                raise TaskError(f"task {task.name!r}: invalid config {task.config}: {error}") from error
            if len(first) > MAX_QUESTION_CHARS:
                raise TaskError(
                    f"task {task.name!r}: these settings make questions of {len(first):,} characters; "
                    f"at most {MAX_QUESTION_CHARS:,} (a small model's context): lower them"
                )

    def to_json(self) -> list[dict[str, Any]]:
        return [task.to_json() for task in self.tasks]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> TaskMix:
        try:
            return cls(
                tuple(
                    TaskSpec(
                        str(item["name"]), float(item.get("weight", 1.0)), dict(item.get("config") or {})
                    )
                    for item in data
                )
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise TaskError(f"malformed task mix {data!r}: {error}") from error


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@lru_cache(maxsize=256)
def setting_bounds(name: str) -> dict[str, float]:
    """{setting: the largest magnitude allowed} for the numeric settings of task ``name``."""
    config_class = DATASETS[name][1]
    defaults: dict[str, Any] = {}
    for item in dataclasses.fields(config_class):
        if item.default is not dataclasses.MISSING:
            defaults[item.name] = item.default
        elif item.default_factory is not dataclasses.MISSING:
            defaults[item.name] = item.default_factory()
    bounds = {
        key: max(SETTING_FACTOR * abs(value), SETTING_FLOOR)
        for key, value in defaults.items()
        if _number(value)
    }
    for key in list(bounds):
        if key.startswith("min_") and f"max_{key[4:]}" in bounds:
            bounds[key] = bounds[f"max_{key[4:]}"]
    return bounds


def check_setting_bounds(task: TaskSpec) -> None:
    """Raise TaskError for a setting outside its bound (see SETTING_FACTOR)."""
    bounds = setting_bounds(task.name)
    for key, value in task.config.items():
        if key in COORDINATOR_SETTINGS:
            raise TaskError(f"task {task.name!r}: {key} is chosen by the coordinator, not a task setting")
        if _number(value):
            bound = bounds.get(key, SETTING_CAP)
            if not abs(value) <= bound:  # also refuses NaN
                raise TaskError(
                    f"task {task.name!r}: {key}={value:g} is too large; at most {bound:g} for this "
                    f"task ({SETTING_FACTOR}x reasoning-gym's default)"
                    if key in bounds
                    else f"task {task.name!r}: {key}={value:g} is too large; at most {bound:g}"
                )
        elif isinstance(value, str | list | tuple | dict) and len(value) > MAX_SETTING_TEXT:
            raise TaskError(f"task {task.name!r}: {key} is too long; at most {MAX_SETTING_TEXT} items")
        if isinstance(value, list | tuple) and any(
            _number(item) and not abs(item) <= SETTING_CAP * SETTING_FACTOR for item in value
        ):
            raise TaskError(
                f"task {task.name!r}: {key} holds a number above {SETTING_CAP * SETTING_FACTOR:g}"
            )


PRESETS: dict[str, TaskMix] = {
    # The nine-task composite of Gensyn's public rl-swarm/genrl reference code, default configs.
    "rgym9": TaskMix(
        tuple(
            TaskSpec(name)
            for name in (
                "arc_1d",
                "basic_arithmetic",
                "base_conversion",
                "bf",
                "binary_matrix",
                "calendar_arithmetic",
                "decimal_arithmetic",
                "fraction_simplification",
                "propositional_logic",
            )
        )
    ),
    # Short-answer tasks a ~1M-parameter model can learn on a CPU in minutes: two-term sums of
    # 1-2 digit numbers and reversing 3-5 letter words (see docs/engine.md for what was measured).
    "cpu": TaskMix(
        (
            TaskSpec("chain_sum", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}),
            TaskSpec("spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 5}),
        )
    ),
}


def preset(name: str) -> TaskMix:
    try:
        return PRESETS[name]
    except KeyError:
        raise TaskError(f"unknown task preset {name!r}; presets: {', '.join(PRESETS)}") from None


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=256)
def dataset_for(name: str, config_json: str, seed: int):
    """The reasoning-gym dataset of one task, config and seed (cached: building some is slow)."""
    config = json.loads(config_json)
    config.setdefault("size", DATASET_SIZE)
    return reasoning_gym.create_dataset(name, seed=seed, **config)


class QuestionRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where a question comes from: task ``name``, dataset ``seed`` and entry ``index``."""

    task: Annotated[str, Meta(min_length=1, max_length=200)]
    seed: int
    index: Annotated[int, Meta(ge=0)]

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "seed": self.seed, "index": self.index}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QuestionRef:
        return cls(str(data["task"]), int(data["seed"]), int(data["index"]))


@dataclass(frozen=True)
class Question:
    ref: QuestionRef
    question: str
    answer: str
    metadata: dict[str, Any]


@lru_cache(maxsize=4096)
def _entry(name: str, config_json: str, seed: int, index: int) -> dict[str, Any]:
    return dataset_for(name, config_json, seed)[index]


def entry(mix: TaskMix, ref: QuestionRef) -> dict[str, Any]:
    """The reasoning-gym entry (question, answer, metadata) behind ``ref``; callers must not
    modify it.

    Cached: generating an entry costs several times more than scoring an answer against it, and
    every question is needed more than once (a coordinator generates it for the lease, then
    again to re-score the G completions of the submission; an agent, to prompt and to score).
    """
    spec = mix.spec(ref.task)
    return _entry(spec.name, canonical_json(spec.config), ref.seed, ref.index)


def question(mix: TaskMix, ref: QuestionRef) -> Question:
    item = entry(mix, ref)
    # Some tasks (propositional_logic) accept many answers: no single ground truth, the verifier
    # checks against the metadata. Their answer is "".
    answer = "" if item["answer"] is None else str(item["answer"])
    return Question(ref, item["question"], answer, item["metadata"])


def score_answer(mix: TaskMix, ref: QuestionRef, answer: str | None) -> float:
    """The task's own verifier: reasoning-gym's ``score_answer`` for the entry behind ``ref``."""
    spec = mix.spec(ref.task)
    config_json = canonical_json(spec.config)
    item = _entry(spec.name, config_json, ref.seed, ref.index)
    return float(dataset_for(spec.name, config_json, ref.seed).score_answer(answer, item))


def ref_at(mix: TaskMix, seed: int, position: int) -> QuestionRef:
    """The question at ``position`` of the stream ``seed``: a task drawn by weight, then an entry.

    Each task's dataset gets its own seed derived from the stream seed, so two tasks never share
    an RNG sequence.
    """
    rng = random.Random(f"{seed}:{position}")
    spec = rng.choices(mix.tasks, weights=[task.weight for task in mix.tasks], k=1)[0]
    task_seed = (seed * 1_000_003 + mix.names.index(spec.name)) % (2**31)
    return QuestionRef(spec.name, task_seed, position)


class QuestionStream:
    """Consecutive questions of one stream: what a coordinator issues or an isolated agent uses."""

    def __init__(self, mix: TaskMix, seed: int, position: int = 0) -> None:
        self.mix = mix
        self.seed = seed
        self.position = position

    def take(self, count: int) -> list[Question]:
        refs = [ref_at(self.mix, self.seed, self.position + offset) for offset in range(count)]
        self.position += count
        return [question(self.mix, ref) for ref in refs]
