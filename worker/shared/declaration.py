"""Settings declared once, read many ways.

A setting's type, bounds, default, title and help live in one place: its field's declaration,
``Annotated[int, Meta(ge=2, le=64, title=..., description=...)]`` on a msgspec Struct or a
dataclass (worker/shared/campaign.py, worker/shared/config.py). This module reads those
declarations for what follows from them: the check of one value against its declaration (so
that every problem of a settings dict is found, not only the first msgspec meets), the wording
of a bound ("between 2 and 64"), and the list of scalar settings from which the campaign form
(swarm_app/web/forms.py) and the command line (worker/cli/campaign.py) build their fields.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import inspect

from worker.shared import validation

SCALARS = {inspect.BoolType: bool, inspect.IntType: int, inspect.FloatType: float, inspect.StrType: str}


@dataclass(frozen=True)
class Setting:
    """One declared setting: ``path`` is dotted for nested ones (``controls.seeds``,
    ``grpo.learning_rate``); ``kind`` is bool, int, float or str for a scalar (None otherwise:
    a list, a dict, a tuple), ``choices`` a Literal's values."""

    path: str
    hint: Any  # the declared type, Annotated with its Meta: what a value is checked against
    kind: type | None
    default: Any
    title: str
    description: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] = ()

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def bounds(self) -> str:
        """The declared bounds in words: "between 2 and 64", "above 0 and at most 0.01"."""
        lower = _number(self.ge) if self.ge is not None else None
        upper = _number(self.le) if self.le is not None else None
        if lower is not None and upper is not None:
            return f"between {lower} and {upper}"
        parts = []
        if lower is not None:
            parts.append(f"at least {lower}")
        if self.gt is not None:
            parts.append(f"above {_number(self.gt)}")
        if upper is not None:
            parts.append(f"at most {upper}")
        if self.lt is not None:
            parts.append(f"below {_number(self.lt)}")
        return " and ".join(parts)

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this setting (None: nothing): its bounds in words
        when only they are broken, msgspec's wording otherwise ("expected `int`, got `str`")."""
        try:
            msgspec.convert(value, self.hint, strict=True)
            return None
        except msgspec.ValidationError as error:
            if self.bounds() and _is_a(value, self.kind):
                return f"must be {self.bounds()}"
            if self.choices:
                return f"choose one of {', '.join(map(repr, self.choices))}"
            return validation.describe(error)[1]


def _number(value: float) -> str:
    """A bound as written: 100000, 2147483647, 0.01, 1e-05."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _is_a(value: Any, kind: type | None) -> bool:
    """Of the setting's kind, as a strict msgspec.convert takes it (an int for a float, never a
    bool for a number)."""
    if kind is None or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    return isinstance(value, int | float) if kind is float else isinstance(value, kind)


def _literal_values(hint: Any) -> tuple[Any, ...]:
    """A Literal's values in their declared order (msgspec's inspect sorts them)."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return typing.get_args(hint)


def declared(cls: type, prefix: str = "") -> dict[str, Setting]:
    """Every field of ``cls`` (a Struct or dataclass) by path, nested Structs' fields too."""
    hints = typing.get_type_hints(cls, include_extras=True)
    found: dict[str, Setting] = {}
    for field in inspect.type_info(cls).fields:
        path = prefix + field.name
        info, schema = field.type, {}
        if isinstance(info, inspect.Metadata):
            info, schema = info.type, info.extra_json_schema or {}
        if isinstance(info, inspect.StructType):
            found.update(declared(info.cls, path + "."))
            continue
        default = field.default if field.default is not msgspec.NODEFAULT else field.default_factory()
        choices = _literal_values(hints[field.name]) if isinstance(info, inspect.LiteralType) else ()
        kind = type(choices[0]) if choices else SCALARS.get(type(info))
        limits = {key: getattr(info, key, None) for key in ("ge", "gt", "le", "lt")}
        found[path] = Setting(
            path,
            hints[field.name],
            kind,
            default,
            schema.get("title", ""),
            schema.get("description", ""),
            choices=choices,
            **limits,
        )
    return found


def setting_problems(settings: dict[str, Setting], data: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, message) for each setting of ``data`` its declaration in ``settings`` refuses, or
    that none declares; a section (``controls``, ``grpo``: paths below it are declared) is an
    object whose settings are checked in turn."""
    problems = []
    for key, value in data.items():
        if any(path.startswith(f"{key}.") for path in settings):
            if not isinstance(value, dict):
                problems.append((key, f"expected an object, got {type(value).__name__}"))
                continue
            items = [(f"{key}.{name}", item) for name, item in value.items()]
        else:
            items = [(key, value)]
        for path, item in items:
            if path not in settings:
                problems.append((path, "unknown setting"))
            elif (message := settings[path].problem(item)) is not None:
                problems.append((path, message))
    return problems


def settings_table(settings: dict[str, Setting]) -> str:
    """The settings as a markdown table (docs/web.md's reference is generated by it)."""
    lines = ["| setting | type | allowed | default | what |", "|---|---|---|---|---|"]
    for path, setting in settings.items():
        kind = setting.kind.__name__ if setting.kind else "object"
        allowed = setting.bounds() or ", ".join(f"`{choice!r}`" for choice in setting.choices)
        what = setting.description.replace("|", "\\|")
        lines.append(f"| `{path}` | {kind} | {allowed} | `{setting.default!r}` | {what} |")
    return "\n".join(lines) + "\n"
