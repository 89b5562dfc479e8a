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

from worker.cli.declared import add_declared_command, add_setting_flag, given

PROG = "swarm-worker campaign-config"


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
    for setting in SETTINGS.values():
        if setting.kind is not None:  # lists and dicts: --tiers, --settings
            add_setting_flag(settings, setting)
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
    for key, value in given(args, SETTINGS).items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:  # a scalar, or a section that --settings gave as a non-object, which check() names
            values[key] = value
    return values


def cmd_campaign_config(options: argparse.Namespace) -> int:
    from worker.shared.campaign import CampaignConfig

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
    add_declared_command(
        sub,
        "campaign-config",
        "a campaign's settings from a preset and flags, checked, as JSON (--help: every flag)",
        build_parser,
        cmd_campaign_config,
    )
