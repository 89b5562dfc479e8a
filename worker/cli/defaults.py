"""Options whose default is a setting's own (a dataclass field or a constant): None on the
command line, filled in from there when the command runs, and shown from there by --help. Read
lazily: worker.shared.config imports reasoning-gym and worker.research.simulate torch (seconds)."""

from __future__ import annotations

import argparse
import importlib
from typing import Any


def setting(source: str) -> Any:
    """The value ``"module:Name.attribute"`` names (a dataclass field's default, a constant)."""
    module, _, path = source.partition(":")
    value: Any = importlib.import_module(module)
    for name in path.split("."):
        value = getattr(value, name)
    return value


def fill_defaults(args: argparse.Namespace, defaults: dict[str, str]) -> None:
    """Options left out on the command line take their setting's default."""
    for dest, source in defaults.items():
        if getattr(args, dest) is None:
            setattr(args, dest, setting(source))


def formatter(defaults: dict[str, str]) -> type[argparse.HelpFormatter]:
    """A help formatter that shows each of ``defaults``' options' default, read from its setting."""

    class Formatter(argparse.HelpFormatter):
        def _get_help_string(self, action: argparse.Action) -> str | None:
            source = defaults.get(action.dest)
            if source is None:
                return action.help
            value, name = setting(source), source.partition(":")[2]
            return f"{action.help + ' ' if action.help else ''}(default: {value}, {name})"

    return Formatter
