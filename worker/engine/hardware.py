"""What this machine offers a worker: device, memory, disk and generation backends.

The same facts feed `swarm-worker doctor` (advice for the volunteer) and the hello message
(the coordinator assigns a model tier from them).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from worker.shared.hardware import GIB, Hardware, cpu_host


def detect(data_dir: Path) -> Hardware:
    """:func:`~worker.shared.hardware.cpu_host`'s facts, with the device torch sees."""
    import torch

    host = cpu_host(data_dir)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        host = dataclasses.replace(
            host, device="cuda", device_name=props.name, vram_bytes=int(props.total_memory)
        )
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        host = dataclasses.replace(host, device="mps", device_name="Apple GPU")
    # str(): torch's version is a str subclass (TorchVersion), which msgspec does not encode
    return dataclasses.replace(host, torch=str(torch.__version__))


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
