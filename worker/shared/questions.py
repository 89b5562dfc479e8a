"""Questions from reasoning-gym, addressable by (task mix, seed, index).

A question is identified by a :class:`QuestionRef` ``(task, seed, index)``: the task's
reasoning-gym dataset built with its config from the :class:`TaskMix` and ``seed`` yields entry
``index``. Anyone holding the mix can regenerate the question and its ground truth, which is how
the coordinator re-scores what workers send without trusting them.

Which task a stream position gets is drawn from the mix's weights with an RNG seeded by
``(seed, position)``, so a stream is reproducible and positions are independent.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import json
import random
import re
import types
import typing
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Annotated, Any, Literal

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

# Settings that name a file (issue #27): reasoning-gym opens them on the coordinator, which
# would read a file of its own disk and hand its lines to volunteers as questions (or tell
# whether a path exists). Staff organise campaigns; they do not read the server's files. A text
# setting is one if its name says so (data_file, word_path, ...) or its default is a file name
# (words3to10.txt). The task then uses the file reasoning-gym ships.
PATH_NAME = re.compile(r"(?:^|_)(?:file|filename|path|dir|directory|folder)s?(?:_|$)")
FILE_NAME_DEFAULT = re.compile(r"[\\/]|\.[A-Za-z0-9]{1,5}$")


@dataclass(frozen=True)
class TaskSpec:
    """One reasoning-gym task of a mix: its registered name, weight and dataset config."""

    name: str
    weight: float = 1.0
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "config": dict(self.config)}

    @cached_property
    def config_json(self) -> str:
        """``config`` as canonical JSON, the datasets' cache key: made once per spec, not for every
        question looked up (16 a round at a coordinator; 2% of its GIL time at 1,000 volunteers)."""
        return canonical_json(self.config)


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
        """Check each task's settings against its allow-list and their bounds, then build its dataset and its first
        question, so that a bad config fails here with the task's name. The cost is bounded: the
        bounds are checked before anything is generated."""
        for task in self.tasks:
            check_settings(task)
            try:
                dataset = dataset_for(task.name, task.config_json, 0)
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
    defaults = {item.name: _default(item) for item in dataclasses.fields(DATASETS[name][1])}
    bounds = {
        key: max(SETTING_FACTOR * abs(value), SETTING_FLOOR)
        for key, value in defaults.items()
        if _number(value)
    }
    for key in list(bounds):
        if key.startswith("min_") and f"max_{key[4:]}" in bounds:
            bounds[key] = bounds[f"max_{key[4:]}"]
    return bounds


@dataclass(frozen=True)
class SettingKind:
    """What a campaign may give one setting of a task (see :func:`task_settings`)."""

    kind: Literal["number", "bool", "choice", "text", "list"]
    choices: tuple[Any, ...] = ()  # the values of a choice
    optional: bool = False  # null allowed (the setting's type is Optional)
    # A list that also takes text: reasoning-gym declares a few as `tuple` with a text default
    # (intermediate_integration's symbols = "x"), which it iterates as characters.
    text_too: bool = False


def _setting_kind(annotation: Any) -> SettingKind | None:
    """The kind of a config field of this type, or None for a type a campaign's JSON cannot
    give (a dataclass of options, a date, nested dataset specs)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [arg for arg in args if arg is not type(None)]
        inner = _setting_kind(rest[0]) if len(rest) == 1 else None
        return dataclasses.replace(inner, optional=True) if inner is not None else None
    if origin is Literal:
        return SettingKind("choice", args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return SettingKind("choice", tuple(member.value for member in annotation))
    if annotation is bool:
        return SettingKind("bool")
    if annotation in (int, float):
        return SettingKind("number")
    if annotation is str:
        return SettingKind("text")
    if annotation in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        return SettingKind("list")
    return None


def _default(item: dataclasses.Field) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return None


def _names_a_file(item: dataclasses.Field, kind: SettingKind) -> bool:
    if kind.kind not in ("text", "list"):
        return False  # a number, flag or fixed choice cannot name a file
    default = _default(item)
    return bool(PATH_NAME.search(item.name)) or (
        isinstance(default, str) and bool(FILE_NAME_DEFAULT.search(default))
    )


@dataclass(frozen=True)
class TaskSettings:
    """A task's config fields, sorted by what a campaign may do with them."""

    allowed: dict[str, SettingKind]
    paths: tuple[str, ...]  # name a file: refused (PATH_NAME)
    unsettable: tuple[str, ...]  # of a type a campaign's JSON cannot give: refused


@lru_cache(maxsize=256)
def task_settings(name: str) -> TaskSettings:
    """The settings of task ``name`` from its reasoning-gym config dataclass. Allowed (its
    allow-list): numbers (bounded: :func:`setting_bounds`), flags, choices (Literal and Enum
    fields), short text and lists; never the coordinator's own (size, seed), a setting that
    names a file, or one whose type JSON cannot give (an options dataclass, a date)."""
    config_class = DATASETS[name][1]
    hints = typing.get_type_hints(config_class)
    allowed: dict[str, SettingKind] = {}
    paths: list[str] = []
    unsettable: list[str] = []
    for item in dataclasses.fields(config_class):
        if item.name in COORDINATOR_SETTINGS:
            continue
        kind = _setting_kind(hints.get(item.name, item.type))
        if kind is None:
            unsettable.append(item.name)
        elif _names_a_file(item, kind):
            paths.append(item.name)
        elif kind.kind == "list" and isinstance(_default(item), str):
            allowed[item.name] = dataclasses.replace(kind, text_too=True)
        else:
            allowed[item.name] = kind
    return TaskSettings(allowed, tuple(paths), tuple(unsettable))


def _refusal(kind: SettingKind, value: Any) -> str | None:
    """Why ``value`` does not fit ``kind``, or None."""
    if value is None:
        return None if kind.optional else "expected a value, got null"
    if kind.kind == "number":
        return None if _number(value) else f"expected a number, got {value!r}"
    if kind.kind == "bool":
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if kind.kind == "choice":
        return None if value in kind.choices else f"expected one of {list(kind.choices)}, got {value!r}"
    if kind.kind == "text" or (kind.text_too and isinstance(value, str)):
        if not isinstance(value, str):
            return f"expected text, got {value!r}"
        return None if len(value) <= MAX_SETTING_TEXT else f"too long; at most {MAX_SETTING_TEXT} characters"
    if not isinstance(value, list | tuple):
        return f"expected a list, got {value!r}"
    if len(value) > MAX_SETTING_TEXT:
        return f"too long; at most {MAX_SETTING_TEXT} items"
    for item in value:
        if isinstance(item, str):
            if len(item) > MAX_SETTING_TEXT:
                return f"an item is too long; at most {MAX_SETTING_TEXT} characters"
            continue
        numbers = list(item) if isinstance(item, list | tuple) else [item]  # a number, or a range
        if not numbers or not all(_number(number) for number in numbers):
            return f"expected a list of numbers, texts or lists of numbers, got the item {item!r}"
        if not all(abs(number) <= SETTING_CAP * SETTING_FACTOR for number in numbers):  # NaN too
            return f"holds a number above {SETTING_CAP * SETTING_FACTOR:g}"
    return None


def check_settings(task: TaskSpec) -> None:
    """Raise TaskError for a setting not on the task's allow-list (:func:`task_settings`), of
    the wrong kind, or outside its bound (see SETTING_FACTOR)."""
    settings = task_settings(task.name)
    bounds = setting_bounds(task.name)
    for key, value in task.config.items():
        if key in COORDINATOR_SETTINGS:
            raise TaskError(f"task {task.name!r}: {key} is chosen by the coordinator, not a task setting")
        if key in settings.paths:
            raise TaskError(
                f"task {task.name!r}: invalid config: {key} names a file on the coordinator, which a "
                "campaign may not choose; the task uses the file reasoning-gym ships"
            )
        if key in settings.unsettable:
            raise TaskError(
                f"task {task.name!r}: invalid config: {key} cannot be set from a campaign "
                "(not a number, flag, choice, text or list)"
            )
        if key not in settings.allowed:
            raise TaskError(
                f"task {task.name!r}: invalid config: {key!r} is not a setting of this task; "
                f"its settings: {', '.join(sorted(settings.allowed))}"
            )
        if (why := _refusal(settings.allowed[key], value)) is not None:
            raise TaskError(f"task {task.name!r}: invalid config: {key}: {why}")
        if _number(value):
            bound = bounds.get(key, SETTING_CAP)
            if not abs(value) <= bound:  # also refuses NaN
                raise TaskError(
                    f"task {task.name!r}: {key}={value:g} is too large; at most {bound:g} for this "
                    f"task ({SETTING_FACTOR}x reasoning-gym's default)"
                    if key in bounds
                    else f"task {task.name!r}: {key}={value:g} is too large; at most {bound:g}"
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


# A coordinator at 1,000 volunteers (8 questions a round, a round every 30 s) leases 270
# questions a second and re-scores each when its submission comes, up to a round later: 16,384
# entries (about 60 s of leases; a few KB each) keep most of them; 4,096 kept 15 s.
@lru_cache(maxsize=16384)
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
    return _entry(spec.name, spec.config_json, ref.seed, ref.index)


def question(mix: TaskMix, ref: QuestionRef) -> Question:
    item = entry(mix, ref)
    # Some tasks (propositional_logic) accept many answers: no single ground truth, the verifier
    # checks against the metadata. Their answer is "".
    answer = "" if item["answer"] is None else str(item["answer"])
    return Question(ref, item["question"], answer, item["metadata"])


def answer_scorer(mix: TaskMix, ref: QuestionRef) -> collections.abc.Callable[[str | None], float]:
    """The task's own verifier for the entry behind ``ref``: reasoning-gym's ``score_answer``,
    with the dataset and the entry looked up once (a group's G completions share them)."""
    spec = mix.spec(ref.task)
    config_json = spec.config_json
    item = _entry(spec.name, config_json, ref.seed, ref.index)
    dataset = dataset_for(spec.name, config_json, ref.seed)
    return lambda answer: float(dataset.score_answer(answer, item))


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
