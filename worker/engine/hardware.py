"""What this machine offers a worker: device, memory, disk and generation backends.

The same facts feed `swarm-worker doctor` (advice for the volunteer) and the hello message
(the coordinator assigns a model tier from them).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from worker.engine.checkpoint import checkpoint_bytes
from worker.shared.hardware import GIB, Hardware, cpu_host
from worker.shared.tiers import TIERS, ModelSpec

# vLLM 0.32's wheels are built against CUDA 13.0 (its VLLM_MAIN_CUDA_VERSION); PyTorch's index
# for that build of the pinned torch.
TORCH_CUDA_INDEX = "https://download.pytorch.org/whl/cu130"
CUDA_TORCH_INSTALL = f"pip install --force-reinstall torch==2.13.0 --index-url {TORCH_CUDA_INDEX}"


# The oldest Linux driver each CUDA major version runs on (NVIDIA's CUDA release notes: 12.x
# needs 525.60.13, 13.x 580.65.06). Older, a CUDA torch finds no GPU and says nothing else.
MIN_DRIVER = {"12": "525.60.13", "13": "580.65.06"}
DRIVER_DOWNLOAD = "https://www.nvidia.com/en-us/drivers/"


def nvidia_driver_version() -> str | None:
    """The loaded NVIDIA kernel driver's version ("580.65.06"), None without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    if found:
        return found.group(1)
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def driver_mismatch(torch_cuda: str, driver: str | None) -> str:
    """Why a CUDA ``torch_cuda`` build sees no GPU beside a loaded driver, and the fix."""
    minimum = MIN_DRIVER.get(torch_cuda.split(".")[0])

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    if minimum and driver and version(driver) < version(minimum):
        return (
            f"torch is built for CUDA {torch_cuda}, which needs NVIDIA driver {minimum} or newer; this "
            f"driver is {driver}, so torch sees no GPU. Update the driver ({DRIVER_DOWNLOAD} or your "
            f"distribution's nvidia-driver package, {minimum.split('.')[0]} or newer), reboot, and run "
            "the doctor again."
        )
    return (
        f"torch is built for CUDA {torch_cuda} and an NVIDIA driver ({driver or 'version unknown'}) is "
        "loaded, but torch sees no GPU: run `nvidia-smi`; a driver older than the CUDA build needs an "
        "update, a container needs the GPU passed in (--gpus all)."
    )


def largest_tier(hw: Hardware) -> ModelSpec:
    """The largest tier this machine trains: a GPU tier its VRAM holds, else a CPU tier its RAM
    holds (the coordinator chooses among a campaign's tiers by the same minimums)."""
    fitting = [
        spec
        for spec in TIERS.values()
        if (hw.device == "cuda" and spec.min_vram_bytes and hw.vram_bytes >= spec.min_vram_bytes)
        or (spec.cpu_ok and hw.ram_bytes >= spec.min_ram_bytes)
    ]
    return max(fitting, key=lambda spec: spec.params, default=TIERS["tiny-1m"])


def disk_needed_bytes(spec: ModelSpec) -> int:
    """Disk a node of ``spec`` needs: two checkpoints (an atomic save writes the new one beside
    the old) and, for a hub tier, its downloaded bf16 weights (2 bytes a parameter)."""
    download = 0 if spec.source.startswith("builtin:") else 2 * spec.params
    return 2 * checkpoint_bytes(spec.params) + download


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
    hw: Hardware,
    *,
    torch_cuda: str | None = DETECT,
    nvidia_gpu: bool | None = None,
    driver: str | None = DETECT,
) -> list[Check]:
    """Preflight checks with advice a volunteer can act on.

    ``torch_cuda`` (torch's CUDA version, None for a CPU build), ``nvidia_gpu`` (a driver is
    loaded) and ``driver`` (its version) are detected unless given: a CPU torch on a machine
    with an NVIDIA GPU trains on the CPU without a word, since `pip install torch==2.13.0` is
    satisfied by 2.13.0+cpu; a CUDA 13 torch on a driver older than 580 sees no GPU either.
    """
    cuda = torch_cuda_version() if torch_cuda == DETECT else torch_cuda
    nvidia = nvidia_gpu_present() if nvidia_gpu is None else nvidia_gpu
    cpu_torch_on_gpu = cuda is None and nvidia
    unseen_gpu = cuda is not None and nvidia and hw.device == "cpu"
    mismatch = ""
    if unseen_gpu:
        assert cuda is not None
        mismatch = driver_mismatch(cuda, nvidia_driver_version() if driver == DETECT else driver)
    spec = largest_tier(hw)
    disk_needed = disk_needed_bytes(spec)
    checks = [
        Check(
            "python",
            sys.version_info >= (3, 11),
            hw.python,
            "" if sys.version_info >= (3, 11) else "Install Python 3.11 or newer.",
        ),
        Check(
            "torch",
            not (cpu_torch_on_gpu or unseen_gpu),
            f"{hw.torch}, " + (f"CUDA {cuda}" if cuda else "CPU build"),
            f"An NVIDIA GPU is present but this torch is a CPU build: `{CUDA_TORCH_INSTALL}`"
            if cpu_torch_on_gpu
            else mismatch,
        ),
        Check(
            "device",
            True,
            f"{hw.device} ({hw.device_name})"
            + (f", {hw.vram_bytes / GIB:.1f} GiB VRAM" if hw.vram_bytes else ""),
            ""
            if hw.device != "cpu"
            else "An NVIDIA GPU is present, but torch cannot use it: see torch."
            if cpu_torch_on_gpu or unseen_gpu
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
            hw.disk_free_bytes >= disk_needed,
            f"{hw.disk_free_bytes / GIB:.1f} GiB free in the data directory; {spec.name}, the largest "
            f"tier this machine trains, needs {disk_needed / GIB:.1f} GiB (two checkpoints"
            + (", its download" if not spec.source.startswith("builtin:") else "")
            + ")",
            ""
            if hw.disk_free_bytes >= disk_needed
            else f"Free at least {disk_needed / GIB:.0f} GiB for {spec.name}'s checkpoints, or pass --data-dir.",
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
