"""What this machine offers a worker: device, memory, disk and generation backends.

The same facts feed `swarm-worker doctor` (advice for the volunteer) and the hello message
(the coordinator assigns a model tier from them).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from worker.shared.hardware import GIB, Hardware, total_ram_bytes, vllm_importable


def detect(data_dir: Path) -> Hardware:
    import torch

    if torch.cuda.is_available():
        device = "cuda"
        props = torch.cuda.get_device_properties(0)
        device_name, vram = props.name, int(props.total_memory)
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device, device_name, vram = "mps", "Apple GPU", 0
    else:
        device, device_name, vram = "cpu", platform.processor() or platform.machine(), 0
    data_dir.mkdir(parents=True, exist_ok=True)
    backends = ["transformers"] + (["vllm"] if vllm_importable() else [])
    return Hardware(
        device=device,
        device_name=device_name,
        vram_bytes=vram,
        ram_bytes=total_ram_bytes(),
        cpu_count=os.cpu_count() or 1,
        disk_free_bytes=shutil.disk_usage(data_dir).free,
        backends=backends,
        python=platform.python_version(),
        torch=str(torch.__version__),  # a str subclass (TorchVersion), which msgspec does not encode
        os=f"{platform.system()} {platform.release()}",
    )


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    advice: str = ""


def doctor_checks(hw: Hardware) -> list[Check]:
    """Preflight checks with advice a volunteer can act on."""
    checks = [
        Check(
            "python",
            sys.version_info >= (3, 11),
            hw.python,
            "" if sys.version_info >= (3, 11) else "Install Python 3.11 or newer.",
        ),
        Check("torch", True, hw.torch),
        Check(
            "device",
            True,
            f"{hw.device} ({hw.device_name})"
            + (f", {hw.vram_bytes / GIB:.1f} GiB VRAM" if hw.vram_bytes else ""),
            "" if hw.device != "cpu" else "No GPU found: this worker will run the small CPU tiers only.",
        ),
        Check(
            "memory",
            hw.ram_bytes >= 4 * GIB,
            f"{hw.ram_bytes / GIB:.1f} GiB RAM",
            ""
            if hw.ram_bytes >= 4 * GIB
            else "Less than 4 GiB RAM: close other programs or use a bigger machine.",
        ),
        Check(
            "disk",
            hw.disk_free_bytes >= 5 * GIB,
            f"{hw.disk_free_bytes / GIB:.1f} GiB free in the data directory",
            ""
            if hw.disk_free_bytes >= 5 * GIB
            else "Free at least 5 GiB for models and checkpoints, or pass --data-dir.",
        ),
        Check(
            "backends",
            True,
            ", ".join(hw.backends),
            ""
            if "vllm" in hw.backends or hw.device != "cuda"
            else "A GPU without vLLM: `pip install 'swarm-sapo[vllm]'` generates several times faster.",
        ),
    ]
    try:
        import reasoning_gym  # noqa: F401

        checks.append(Check("reasoning-gym", True, "importable"))
    except ImportError as error:
        checks.append(
            Check("reasoning-gym", False, str(error), "Reinstall the worker: pip install swarm-sapo")
        )
    return checks
