"""Command-line flags built from settings' declarations (worker/shared/declaration.py).

A declared setting becomes one flag named after its path (``group_size`` -> ``--group-size``,
``grpo.learning_rate`` -> ``--grpo-learning-rate``, ``controls.self_replay`` ->
``--controls-self-replay`` / ``--no-controls-self-replay``), of its declared type and choices,
its help the declaration's with its bounds and default. The flag's value is None when left
out, so that the command knows what was given; the declaration's bounds and the rules between
settings are checked where the campaign checks them (``CampaignConfig.check``), and every
problem is printed. A command's older flag names stay as aliases.

A command whose flags come from the campaign's declarations builds its parser when it runs
(:func:`add_declared_command`): the declarations load reasoning-gym (a second or more), which
``swarm-worker``'s other commands never wait for.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

from worker.shared.declaration import Setting

METAVARS = {int: "N", float: "X", str: "TEXT"}


def flag(path: str) -> str:
    """The command-line flag of a setting: ``controls.self_replay`` -> ``--controls-self-replay``."""
    return "--" + path.replace(".", "-").replace("_", "-")


def add_setting_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    setting: Setting,
    aliases: Iterable[str] = (),
    default_words: str | None = None,
) -> argparse.Action:
    """The flag of ``setting`` (and its ``aliases``), value None unless given; its help says the
    declared bounds and default (``default_words``: the default in words where it is not the
    declaration's value, e.g. "the tier's")."""
    bounds = setting.bounds() or (
        f"one of {', '.join(map(repr, setting.choices))}" if setting.choices else ""
    )
    default = default_words if default_words is not None else f"default {setting.default!r}"
    words = "; ".join(part for part in (bounds, default) if part)
    options: dict[str, Any] = {
        "dest": setting.path,
        "default": None,
        "help": f"{setting.description} ({words})",
    }
    if setting.kind is bool:
        options["action"] = argparse.BooleanOptionalAction
    else:
        options["type"] = setting.kind
        options["metavar"] = (
            "{" + ",".join(map(str, setting.choices)) + "}" if setting.choices else METAVARS[setting.kind]
        )
    return parser.add_argument(flag(setting.path), *aliases, **options)


def given(args: argparse.Namespace, settings: dict[str, Setting]) -> dict[str, Any]:
    """The declared settings given on the command line, nested as a campaign stores them
    (``grpo.beta`` -> ``{"grpo": {"beta": ...}}``)."""
    values: dict[str, Any] = {}
    for path, value in vars(args).items():
        if path in settings and value is not None:
            section, _, key = path.rpartition(".")
            target = values.setdefault(section, {}) if section else values
            target[key] = value
    return values


def joined(argv: list[str]) -> list[str]:
    """``--flag -1e-05`` as ``--flag=-1e-05``: argparse takes a negative number in exponent
    notation for an option (its test for negative numbers knows no exponent)."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and arg.startswith("-") and _number(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def add_declared_command(
    sub: argparse._SubParsersAction,
    name: str,
    help: str,
    build_parser: Callable[[], argparse.ArgumentParser],
    run: Callable[[argparse.Namespace], int],
) -> None:
    """A subcommand whose parser :func:`build_parser` makes when the command runs ("+"
    prefixes: every argument, --help included, is passed on to it), then ``run(options)``."""
    parser = sub.add_parser(name, help=help, add_help=False, prefix_chars="+")
    parser.add_argument("flags", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run(build_parser().parse_args(joined(args.flags))))
