"""``swarm-worker campaign-config``: a campaign's settings from a preset and flags, checked as the
coordinator checks them, printed as the JSON it stores.

Its flags are built from the settings' declarations (worker/shared/declaration.py), one per
setting: ``--group-size 8``, ``--controls-seeds 3``, ``--grpo-learning-rate 3e-4``,
``--controls-self-replay`` / ``--no-controls-self-replay``; the help shows each one's bounds and
default. Every problem is printed (``swarm-worker campaign-config: num_local: ...``), exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PROG = "swarm-worker campaign-config"


def flag(path: str) -> str:
    """The command-line flag of a setting: ``controls.self_replay`` -> ``--controls-self-replay``."""
    return "--" + path.replace(".", "-").replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    """The command's parser: a flag per scalar setting, from the declarations (imported here, not
    when ``swarm-worker`` starts: the campaign module loads reasoning-gym, seconds)."""
    from worker.shared.campaign import CAMPAIGN_PRESETS, SETTINGS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print a campaign's settings (JSON, as the coordinator stores them) from a preset "
        "and flags, after the coordinator's checks; every problem is listed, exit 2.",
    )
    parser.add_argument(
        "--preset", choices=list(CAMPAIGN_PRESETS), help="start from a preset (default: none)"
    )
    parser.add_argument("--settings", type=Path, help="start from a JSON file of settings (before the flags)")
    parser.add_argument("--tiers", help="model tiers, comma-separated (tiny-1m,tiny-5m)")
    settings = parser.add_argument_group("settings (default: the preset's, else the declaration's)")
    for path, setting in SETTINGS.items():
        if setting.kind is None:
            continue  # lists and dicts: --tiers, --settings
        bounds = setting.bounds() or (
            f"one of {', '.join(map(repr, setting.choices))}" if setting.choices else ""
        )
        words = "; ".join(part for part in (bounds, f"default {setting.default!r}") if part)
        options: dict[str, Any] = {"dest": path, "default": None, "help": f"{setting.description} ({words})"}
        if setting.kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = setting.kind
            metavar = {int: "N", float: "X", str: "TEXT"}[setting.kind]
            options["metavar"] = (
                "{" + ",".join(map(str, setting.choices)) + "}" if setting.choices else metavar
            )
        settings.add_argument(flag(path), **options)
    return parser


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give, on top of the preset's (or the declaration's defaults)."""
    from worker.shared.campaign import CAMPAIGN_PRESETS, SETTINGS, CampaignConfig

    base = CAMPAIGN_PRESETS[args.preset]() if args.preset else CampaignConfig()
    values = base.to_json()
    if args.settings:
        values.update(json.loads(args.settings.read_text()))
    if args.tiers is not None:
        values["tiers"] = [name.strip() for name in args.tiers.split(",") if name.strip()]
    for path, value in vars(args).items():
        if path in SETTINGS and value is not None:
            section, _, key = path.rpartition(".")
            target = values.setdefault(section, {}) if section else values
            if isinstance(target, dict):  # else --settings gave a non-object, which check() names
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


def cmd_campaign_config(args: argparse.Namespace) -> int:
    from worker.shared.campaign import CampaignConfig

    options = build_parser().parse_args(joined(args.flags))
    try:
        values = settings_from(options)
    except (OSError, ValueError, TypeError) as error:  # an unreadable or malformed --settings file
        print(f"{PROG}: {options.settings}: {error}", file=sys.stderr)
        return 2
    problems = CampaignConfig.check(values)
    for problem in problems:
        print(f"{PROG}: {problem.path}: {problem.message}", file=sys.stderr)
    if problems:
        return 2
    print(json.dumps(CampaignConfig.from_json(values).to_json(), indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    # Its flags are parsed by build_parser() when it runs ("+" prefixes: every argument,
    # --help included, is passed on), so that swarm-worker's other commands start fast.
    parser = sub.add_parser(
        "campaign-config",
        help="a campaign's settings from a preset and flags, checked, as JSON (--help: every flag)",
        add_help=False,
        prefix_chars="+",
    )
    parser.add_argument("flags", nargs=argparse.REMAINDER)
    parser.set_defaults(func=cmd_campaign_config)
