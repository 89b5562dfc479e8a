"""``swarm-worker control``: one isolated control run of a campaign, in a process of its own
(worker/client/control.py). The coordinator's Celery worker starts it with ``--step`` and
supervises it; by hand it runs a control to the end, one JSON line per round."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from worker.shared.arms import CONTROL_KINDS

INSTALL_HINT = (
    "the control trains a model, which needs the worker's packages (torch, transformers) in the "
    "Python that runs it: pip install 'swarm-sapo[worker]' there, or point the coordinator's "
    "SWARM_CONTROL_PYTHON at a Python that has them"
)


def cmd_control(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401  (checked here so that the supervisor gets one clear line)
        import transformers  # noqa: F401
    except ImportError as error:
        from worker.client.control import event

        event(sys.stdout, "error", error=f"{type(error).__name__}: {error}: {INSTALL_HINT}", traceback="")
        return 1
    from worker.client.control import ControlSpec, main

    spec = ControlSpec(
        campaign=args.campaign,
        tier=args.tier,
        arm=args.arm,
        seed=args.seed,
        checkpoint=args.checkpoint,
        model_cache=args.model_cache,
        device=args.device,
    )
    return main(spec, args.rounds, args.step)


def add_parser(sub: argparse._SubParsersAction) -> None:
    control = sub.add_parser(
        "control",
        help="run one isolated control of a campaign (what the coordinator's Celery worker starts)",
        description=(
            "Train one control arm of a campaign with the same engine as a swarm node, sharing "
            "nothing, and print one JSON line per round on stdout."
        ),
    )
    control.add_argument(
        "--campaign", type=Path, required=True, help="the campaign's settings (CampaignConfig JSON)"
    )
    control.add_argument("--tier", required=True, help="the model tier, e.g. tiny-1m")
    control.add_argument("--arm", required=True, choices=CONTROL_KINDS, help="the control kind")
    control.add_argument("--seed", type=int, required=True, help="the control seed (pairs the kinds)")
    control.add_argument(
        "--rounds", type=int, default=None, help="stop after this round (default: the campaign's rounds)"
    )
    control.add_argument("--checkpoint", type=Path, default=None, help="resume from and save to this file")
    control.add_argument(
        "--model-cache",
        type=Path,
        default=None,
        help="where the tiers' models are (default: $SWARM_MODEL_CACHE)",
    )
    control.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when available)")
    control.add_argument(
        "--step",
        action="store_true",
        help="run nothing on its own: read 'round' and 'save' commands on stdin, one per line",
    )
    control.set_defaults(func=cmd_control)
