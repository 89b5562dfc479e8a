"""What this machine offers a worker: device, memory, disk and generation backends.

The same facts feed `swarm-worker doctor` (advice for the volunteer) and the hello message
(the coordinator assigns a model tier from them).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from worker.shared.hardware import GIB, Hardware, cpu_host

# vLLM 0.32's wheels are built against CUDA 13.0 (its VLLM_MAIN_CUDA_VERSION); PyTorch's index
# for that build of the pinned torch.
TORCH_CUDA_INDEX = "https://download.pytorch.org/whl/cu130"
CUDA_TORCH_INSTALL = f"pip install --force-reinstall torch==2.13.0 --index-url {TORCH_CUDA_INDEX}"


def nvidia_gpu_present() -> bool:
    """An NVIDIA driver is loaded (whatever torch was built for)."""
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


def torch_cuda_version() -> str | None:
    """The CUDA version torch was built with; None for a CPU build."""
    import torch

    return torch.version.cuda


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


DETECT = "detect"  # doctor_checks' torch_cuda default: ask torch


def doctor_checks(
    hw: Hardware, *, torch_cuda: str | None = DETECT, nvidia_gpu: bool | None = None
) -> list[Check]:
    """Preflight checks with advice a volunteer can act on.

    ``torch_cuda`` (torch's CUDA version, None for a CPU build) and ``nvidia_gpu`` (a driver
    is loaded) are detected unless given: a CPU torch on a machine with an NVIDIA GPU trains on
    the CPU without a word, since `pip install torch==2.13.0` is satisfied by 2.13.0+cpu.
    """
    cuda = torch_cuda_version() if torch_cuda == DETECT else torch_cuda
    nvidia = nvidia_gpu_present() if nvidia_gpu is None else nvidia_gpu
    cpu_torch_on_gpu = cuda is None and nvidia
    checks = [
        Check(
            "python",
            sys.version_info >= (3, 11),
            hw.python,
            "" if sys.version_info >= (3, 11) else "Install Python 3.11 or newer.",
        ),
        Check(
            "torch",
            not cpu_torch_on_gpu,
            f"{hw.torch}, " + (f"CUDA {cuda}" if cuda else "CPU build"),
            f"An NVIDIA GPU is present but this torch is a CPU build: `{CUDA_TORCH_INSTALL}`"
            if cpu_torch_on_gpu
            else "",
        ),
        Check(
            "device",
            True,
            f"{hw.device} ({hw.device_name})"
            + (f", {hw.vram_bytes / GIB:.1f} GiB VRAM" if hw.vram_bytes else ""),
            ""
            if hw.device != "cpu"
            else "An NVIDIA GPU is present, but torch cannot use it: see torch."
            if cpu_torch_on_gpu
            else "No GPU found: this worker will run the small CPU tiers only.",
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
