"""The GPU volunteer's path on one device, offline, in a few minutes: a prepared device check.

    python bench/gpu_check.py --out DIR [--parts memory,precision,...] [--budget-s 420]

Every learner model is random, built from a Qwen2.5-0.5B- or 1.5B-shaped config (no download,
no internet); the tokenizer is a word-level one over the full 151,936-token vocabulary. Parts,
in this order (``--parts`` chooses; all by default):

    memory, saved_tensors, precision    bench/gpu_learner.py: torch and transformers only
    generation, sapo, vllm              bench/gpu_engines.py: sapo alone needs msgspec and
                                        reasoning-gym, vllm needs vLLM ("skipped" without it)

Each part imports what it needs when it runs, so a machine with torch and transformers alone
runs the learner parts; a part that fails is recorded as an error and the others still run.
``DIR/gpu_check.json`` is rewritten after every part (atomically: a kill leaves the last whole
file), so a run cut short keeps what it finished. On CUDA everything runs at full size; without
CUDA each part runs what a CPU can (plans, 2-layer models, a few tokens) and says so in a
``gpu_check:`` line and in the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.gpu_learner import GIB, Clock, check_memory, check_precision, check_saved_bytes, say  # noqa: E402
from worker.shared.hardware import vllm_importable  # noqa: E402

PARTS = ("memory", "saved_tensors", "precision", "generation", "sapo", "vllm")
# Seconds a part needs at least on CUDA; with less left of --budget-s it is skipped as out of time.
MIN_SECONDS = {"generation": 60, "sapo": 60, "vllm": 90}


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "vllm_importable": vllm_importable(),
    }
    with contextlib.suppress(ImportError):
        import transformers

        info["transformers"] = transformers.__version__
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            device=props.name,
            vram_gib=props.total_memory / GIB,
            capability=list(torch.cuda.get_device_capability(0)),
        )
    return info


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Replace ``path`` whole: a reader (or a kill) never sees half a file."""
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(report, indent=2, default=str))
    os.replace(temporary, path)


def part_runners(clock: Clock, cuda: bool, work: Path) -> dict[str, Callable[[], Any]]:
    def engines() -> Any:  # imported when a generating part runs, not before
        import bench.gpu_engines

        return bench.gpu_engines

    return {
        "memory": lambda: check_memory(clock, cuda),
        "saved_tensors": lambda: check_saved_bytes(cuda),
        "precision": lambda: check_precision(cuda),
        "generation": lambda: engines().check_generation(cuda, work),
        "sapo": lambda: engines().check_sapo(cuda),
        "vllm": lambda: engines().check_vllm(cuda, work),
    }


def skip_reason(name: str, clock: Clock, cuda: bool) -> str:
    if name == "vllm" and not vllm_importable():
        return "not installed"
    if cuda and clock.left() < MIN_SECONDS.get(name, 0):
        return "out of time"
    return ""


def parse_parts(text: str) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown parts {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    return [name for name in PARTS if name in chosen]  # always in the order above


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for gpu_check.json")
    parser.add_argument("--parts", type=parse_parts, default=list(PARTS), help=f"of {','.join(PARTS)}")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting parts after this long")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = args.out / "gpu_check.json"
    clock = Clock(args.budget_s)
    cuda = torch.cuda.is_available()
    report: dict[str, Any] = {
        "environment": environment(),
        "parts": args.parts,
        "ran": [],
        "skipped": [],
        "errors": {},
        "complete": False,
        "seconds": 0.0,
    }
    say(f"environment: {json.dumps(report['environment'])}")
    if not cuda:
        say("no CUDA: plans and CPU-sized parts only; no GPU figure comes from this run")
        report["skipped"].append("full sizes: no CUDA (plans, 2-layer models and short samples instead)")
    write_report(path, report)
    with tempfile.TemporaryDirectory() as tmp:
        runners = part_runners(clock, cuda, Path(tmp))
        for name in args.parts:
            reason = skip_reason(name, clock, cuda)
            if reason:
                report["skipped"].append(f"{name}: {reason}")
                say(f"skipped {name}: {reason}")
            else:
                start = time.perf_counter()
                try:
                    report[name] = runners[name]()
                    report["ran"].append(name)
                except Exception as error:  # a check reports, it does not stop the others
                    traceback.print_exc()
                    report["errors"][name] = f"{type(error).__name__}: {error}"
                    say(f"error in {name}: {type(error).__name__}: {error}")
                report.setdefault("part_seconds", {})[name] = time.perf_counter() - start
                if cuda:
                    torch.cuda.empty_cache()
            report["seconds"] = time.perf_counter() - clock.start
            write_report(path, report)
    report["complete"] = True
    write_report(path, report)
    say(
        f"ran {', '.join(report['ran']) or 'nothing'}; skipped {len(report['skipped'])}; errors {len(report['errors'])}; "
        f"{report['seconds']:.0f} s; wrote {path}"
    )
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
