"""`swarm-worker`: the volunteer's command line.

swarm-worker doctor                 check this machine before joining
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from worker import __version__


def default_data_dir() -> Path:
    return Path(os.environ.get("SWARM_DATA_DIR") or Path.home() / ".swarm")


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from worker.hardware import detect, doctor_checks

    hw = detect(args.data_dir)
    table = Table(title=f"swarm-worker {__version__}: preflight")
    for column in ("check", "status", "detail", "advice"):
        table.add_column(column)
    checks = doctor_checks(hw)
    for check in checks:
        table.add_row(check.name, "ok" if check.ok else "FAIL", check.detail, check.advice)
    Console().print(table)
    return 0 if all(check.ok for check in checks) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-worker", description="Swarm volunteer worker and SAPO engine."
    )
    parser.add_argument("--version", action="version", version=f"swarm-worker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="check Python, torch, device, memory and disk")
    doctor.add_argument("--data-dir", type=Path, default=default_data_dir())
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
