"""What a worker's machine offers, as the hello message carries it (torch-free).

The worker fills it in with :func:`worker.engine.hardware.detect` (which asks torch for the
device); the coordinator reads it to assign a model tier (swarm_app/coordinator/assignment.py).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from worker.shared.tiers import GIB

__all__ = ["GIB", "Hardware", "cpu_host", "total_ram_bytes", "vllm_importable"]


@dataclass(frozen=True)
class Hardware:
    device: str  # "cuda", "mps" or "cpu"
    device_name: str
    vram_bytes: int  # 0 without a GPU
    ram_bytes: int
    cpu_count: int
    disk_free_bytes: int
    backends: list[str] = field(default_factory=list)  # generation backends importable here
    python: str = ""
    torch: str = ""
    os: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    def share(self, nodes: int) -> Hardware:
        """What one of ``nodes`` nodes sharing this machine has: its share of the GPU's memory,
        the RAM and the disk (so the coordinator assigns a tier that fits the share, and vLLM's
        engine and the learner plan for it); the device and core count are the machine's."""
        if nodes <= 1:
            return self
        return replace(
            self,
            vram_bytes=self.vram_bytes // nodes,
            ram_bytes=self.ram_bytes // nodes,
            disk_free_bytes=self.disk_free_bytes // nodes,
        )


def total_ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def vllm_importable() -> bool:
    # find_spec does not import vllm (which takes ~14 s); it only finds it.
    return importlib.util.find_spec("vllm") is not None


def cpu_host(data_dir: Path) -> Hardware:
    """This machine as a CPU-only worker would report it, without importing torch: the
    coordinator uses it to check that its local workers can run a campaign's tiers (a tier
    that fits the CPU fits any device); the worker's own detection adds the device to it
    (worker/engine/hardware.py)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    return Hardware(
        device="cpu",
        device_name=platform.processor() or platform.machine(),
        vram_bytes=0,
        ram_bytes=total_ram_bytes(),
        cpu_count=os.cpu_count() or 1,
        disk_free_bytes=shutil.disk_usage(data_dir).free,
        backends=["transformers"] + (["vllm"] if vllm_importable() else []),
        python=platform.python_version(),
        os=f"{platform.system()} {platform.release()}",
    )
