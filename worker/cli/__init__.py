"""`swarm-worker`: the volunteer's command line.

swarm-worker doctor                 check this machine before joining
swarm-worker join URL               train with a swarm (token from --token or $SWARM_TOKEN)
swarm-worker export --out DIR       the node's trained model as a Hugging Face model directory
swarm-worker campaign-config        a campaign's settings from a preset and flags, checked, as JSON

and, where the lab (lab/, distribution swarm-sapo-lab) is installed, its commands, found through
the ``swarm_worker.commands`` entry points (this package never imports the lab):

swarm-worker study [--quick]        run the SAPO table study (issues #8, #18, #29), resumable
swarm-worker study-report [JSON]    write its markdown report and plots
swarm-worker study-batches [JSON]   print what each arm generated and trained on, round by round
swarm-worker heterogeneous          two model sizes in one pool vs a pool per size vs alone (#29)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import MutableMapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from worker import __version__
from worker.cli import campaign, simulate

# The lab's commands and arms (lab/pyproject.toml's entry points): the volunteer's package runs
# without them, and names them with the install that adds them.
COMMANDS_GROUP = "swarm_worker.commands"  # each: a callable that adds its commands to the subparsers
ARMS_GROUP = "swarm_worker.arms"  # a callable (name, 4/4-self window) -> Arm, ValueError if unknown
LAB_COMMANDS = ("study", "study-report", "study-batches", "heterogeneous")
LAB_INSTALL = "pip install -e './lab[study]' in a Swarm checkout (docs/experiments/README.md)"


def default_data_dir() -> Path:
    return Path(os.environ.get("SWARM_DATA_DIR") or Path.home() / ".swarm")


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from worker.engine.hardware import detect, doctor_checks

    hw = detect(args.data_dir)
    table = Table(title=f"swarm-worker {__version__}: preflight")
    for column in ("check", "status", "detail", "advice"):
        table.add_column(column)
    checks = doctor_checks(hw)
    for check in checks:
        table.add_row(check.name, "ok" if check.ok else "FAIL", check.detail, check.advice)
    Console().print(table)
    return 0 if all(check.ok for check in checks) else 1


def cmd_export(args: argparse.Namespace) -> int:
    """Write a node's checkpoint as a Hugging Face model directory."""
    from worker.client.export import (
        ExportError,
        coordinator_of,
        export_model,
        find_checkpoint,
        held_out_text,
        hub_token,
        push_to_hub,
    )

    try:
        token = hub_token() if args.push_to_hub else None
        checkpoint = find_checkpoint(args.data_dir, args.node, args.campaign)
        url = args.url or os.environ.get("SWARM_URL") or coordinator_of(args.data_dir, args.node)
        worker_token = args.token or os.environ.get("SWARM_TOKEN") or None
        card = export_model(checkpoint, args.out, url=url, token=worker_token)
    except ExportError as error:
        print(f"swarm-worker export: {error}", file=sys.stderr)
        return 2
    print(
        f"exported node {card['node']} of campaign {card['campaign']} ({card['tier']}, "
        f"{card['rounds']} rounds) to {args.out}: AutoModelForCausalLM.from_pretrained({str(args.out)!r})"
    )
    print(f"held-out accuracy: {held_out_text(card['held_out'], card['campaign'])}")
    if token:
        print(f"pushed to {push_to_hub(args.out, args.push_to_hub, token)}")
    return 0


def cmd_build_tiny(args: argparse.Namespace) -> int:
    from worker.engine.tiny import ensure_tiny_model, ship_tiny_model
    from worker.shared.tiers import model_cache_dir

    if args.ship:
        path = ship_tiny_model(args.tier, steps=args.steps)
    else:
        path = ensure_tiny_model(args.tier, args.cache_dir or model_cache_dir(), steps=args.steps)
    print(path)
    return 0


def cmd_join(args: argparse.Namespace) -> int:
    """Join a coordinator and train until its campaign ends; exit 0 on a clean stop (Ctrl-C too)."""
    import logging

    from rich.console import Console

    from worker.client.errors import ClientError, FatalError
    from worker.client.identity import IdentityError
    from worker.client.volunteer import run_nodes

    token = args.token or os.environ.get("SWARM_TOKEN", "")
    url = args.url or os.environ.get("SWARM_URL", "")
    if not url or not token:
        missing = "URL (or $SWARM_URL)" if not url else "--token (or $SWARM_TOKEN)"
        print(f"swarm-worker join: error: {missing} is required", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    status = not args.no_status and console.is_terminal
    if status:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=console, show_path=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("worker").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if args.nice:
        os.nice(args.nice)
    try:
        import torch  # noqa: F401  (checked here, so that a missing install says what to do)
        import transformers  # noqa: F401
    except ImportError as error:
        print(
            f"swarm-worker: error: {error}: the worker trains a model and needs the project's "
            "worker extra (torch, transformers) in this Python (docs/volunteers.md)",
            file=sys.stderr,
        )
        return 2
    try:
        results = run_nodes(
            url,
            token,
            args.data_dir,
            backend=args.backend,
            max_rounds=args.max_rounds,
            preferred_tier=args.tier,
            status=status,
            nodes=args.nodes,
            torch_threads=args.threads,
            node_id=args.node_id,
            console=console,
        )
    except KeyboardInterrupt:  # before the worker's own handling took over
        print("swarm-worker: interrupted", file=sys.stderr)
        return 0
    except FatalError as error:
        print(f"swarm-worker: cannot continue: {error}", file=sys.stderr)
        if error.what_to_do:
            print(f"swarm-worker: what to do: {error.what_to_do}", file=sys.stderr)
        return 2
    except (ClientError, IdentityError, ValueError) as error:
        print(f"swarm-worker: error: {error}", file=sys.stderr)
        return 2
    for result in results:
        rounds = (
            f", rounds {result.start_round}-{result.next_round}, {result.rounds_run} this run"
            if result.tier
            else ""
        )
        print(
            f"swarm-worker: {result.message or result.reason} (node {result.node_id}{rounds})",
            file=sys.stderr,
        )
    # A node the coordinator refused while the others went on (every node refused raises above).
    return 2 if any(result.reason == "fatal" for result in results) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-worker", description="Swarm volunteer worker and SAPO engine."
    )
    parser.add_argument("--version", action="version", version=f"swarm-worker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="check Python, torch, device, memory and disk")
    doctor.add_argument("--data-dir", type=Path, default=default_data_dir())
    doctor.set_defaults(func=cmd_doctor)

    simulate.add_parser(sub)

    export = sub.add_parser(
        "export", help="write a node's trained model as a Hugging Face model directory (from_pretrained)"
    )
    export.add_argument("--data-dir", type=Path, default=default_data_dir(), help="the worker's --data-dir")
    export.add_argument("--node", type=int, default=0, help="which node of a --nodes process (default 0)")
    export.add_argument("--campaign", default=None, help="the campaign id (default: the newest checkpoint)")
    export.add_argument("--out", type=Path, required=True, help="the model directory to write")
    export.add_argument(
        "--url",
        default=None,
        help="the coordinator, for the model card's held-out accuracy (default: $SWARM_URL, else the one joined last)",
    )
    export.add_argument(
        "--token",
        default=None,
        help="the node's worker token, needed for a private campaign (default: $SWARM_TOKEN)",
    )
    export.add_argument(
        "--push-to-hub",
        default=None,
        metavar="REPO",
        help="then upload it to this Hugging Face model repository (private; needs huggingface-cli login or HF_TOKEN)",
    )
    export.set_defaults(func=cmd_export)

    build = sub.add_parser(
        "build-tiny",
        help="a built-in CPU tier (tiny-1m, tiny-5m, tiny-20m): the shipped build (checksums checked), "
        "else built once into the model cache",
    )
    build.add_argument("tier")
    build.add_argument("--cache-dir", type=Path, default=None)
    build.add_argument(
        "--ship",
        action="store_true",
        help="maintainers: (re)build the tier into worker/models/<tier>/ with its checksums, to commit",
    )
    build.add_argument(
        "--steps", type=int, default=None, help="warm-start steps of a build (default: the tier's)"
    )
    build.set_defaults(func=cmd_build_tiny)

    join = sub.add_parser("join", help="join a coordinator's campaign and train with the swarm")
    join.add_argument(
        "url",
        nargs="?",
        default=None,
        help="coordinator, e.g. wss://swarm.example.org/ws/worker/ or https://host (default: $SWARM_URL)",
    )
    join.add_argument(
        "--token", default=None, help="worker token (default: $SWARM_TOKEN, which keeps it out of ps)"
    )
    join.add_argument("--backend", choices=["auto", "transformers", "vllm"], default="auto")
    join.add_argument("--data-dir", type=Path, default=default_data_dir())
    join.add_argument("--max-rounds", type=int, default=None, help="stop after N rounds of this run")
    join.add_argument("--tier", default=None, help="preferred model tier (honoured if it fits)")
    join.add_argument("--no-status", action="store_true", help="log lines only, no live status line")
    join.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    join.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes this process runs, each its own node to the coordinator (node 0 in --data-dir, "
        "node k in <data-dir>/nodes/node-k), taking turns on the device round by round",
    )
    join.add_argument(
        "--node-id",
        default=None,
        help="the node's id when its data directory has none yet (default: a new random id)",
    )
    join.add_argument(
        "--nice",
        type=int,
        default=0,
        choices=range(0, 20),
        metavar="0-19",
        help="lower this process's CPU priority by N (the coordinator's machine: training yields to its servers)",
    )
    join.add_argument("-v", "--verbose", action="store_true")
    join.set_defaults(func=cmd_join)

    missing = add_lab_commands(sub)
    campaign.add_parser(sub)
    parser.set_defaults(lab_missing=missing)
    return parser


def add_lab_commands(sub: Any) -> tuple[str, ...]:
    """Add the commands of every installed ``swarm_worker.commands`` entry point; the lab's
    commands none added are listed with the install they need. Returns those."""
    for entry in entry_points(group=COMMANDS_GROUP):
        entry.load()(sub)
    missing = tuple(name for name in LAB_COMMANDS if name not in sub.choices)
    for name in missing:
        sub.add_parser(name, help=f"the lab's, not installed here: {LAB_INSTALL}", add_help=False)
    return missing


def lab_arms() -> Any:
    """The lab's arm resolver (``swarm_worker.arms``: (name, 4/4-self window) -> Arm, ValueError
    if unknown), or None without the lab."""
    resolvers = list(entry_points(group=ARMS_GROUP))
    return resolvers[0].load() if resolvers else None


def lab_missing(command: str) -> int:
    """A lab command without the lab: one line that says how to install it, status 2."""
    print(f"swarm-worker {command}: a command of the lab, not installed here: {LAB_INSTALL}", file=sys.stderr)
    return 2


def hub_telemetry_off(environ: MutableMapping[str, str]) -> None:
    """Hugging Face's usage telemetry stays off unless the volunteer opts in by setting
    HF_HUB_DISABLE_TELEMETRY=0 (docs/volunteers.md, "What the worker sends"); set before
    huggingface_hub is imported, which reads it once."""
    environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def main(argv: list[str] | None = None) -> int:
    hub_telemetry_off(os.environ)
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    # Before parsing: the lab's options are not known without it, and its command says only this.
    if words and words[0] in parser.get_default("lab_missing"):
        return lab_missing(words[0])
    args = parser.parse_args(words)
    return args.func(args)
