"""Model tiers: what a node trains, where its weights come from, and what hardware it needs.

Every tier loads through the same ``from_pretrained`` call on a local directory or a hub id.
The built-in CPU tiers (``tiny-*``) are made offline by worker/engine/tiny.py; the ones the
demo uses ship with the project, built once, in ``worker/models/<tier>/`` (every machine then
runs the same weights, and a fresh clone trains at once); the others are built on first use into
the model cache. Either way they load exactly like a volunteer's downloaded Qwen model.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

GIB = 1024**3

# A built tiny tier (worker/engine/tiny.py) is a directory with this file written last: whether
# one is there is a question the coordinator asks too (the demo), without importing torch.
BUILD_FILE = "swarm_build.json"
RECIPE_VERSION = 2  # bump when the recipe changes: a cached build of another version is rebuilt
# Shipped builds: ``worker/models/<tier>/`` with ``CHECKSUM_FILE`` listing every other file's
# sha256 (``sha256sum`` format), checked before a shipped model is used.
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "models"
CHECKSUM_FILE = "SHA256SUMS"


@dataclass(frozen=True)
class ModelSpec:
    name: str  # tier name, e.g. "tiny-1m" or "qwen2.5-0.5b"
    source: str  # hub id, local path, or "builtin:<tier>" for the offline tiny tiers
    dtype: str = "float32"  # torch dtype name for training
    params: int = 0  # approximate parameter count
    min_ram_bytes: int = 2 * GIB  # needed to train on CPU
    min_vram_bytes: int = 0  # needed to train on a GPU (0: runs on CPU)
    cpu_ok: bool = True  # trains at a useful speed on a CPU
    learning_rate: float = 1e-5  # a default that learns without collapsing (measured, docs/engine.md)

    def to_json(self) -> dict:
        return asdict(self)


TIERS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("tiny-1m", "builtin:tiny-1m", params=920_000, min_ram_bytes=1 * GIB, learning_rate=1e-4),
        ModelSpec("tiny-5m", "builtin:tiny-5m", params=5_000_000, min_ram_bytes=1 * GIB, learning_rate=1e-4),
        ModelSpec(
            "tiny-20m", "builtin:tiny-20m", params=19_400_000, min_ram_bytes=2 * GIB, learning_rate=5e-5
        ),
        # Real tiers for volunteers with internet access. VRAM: the learner alone (transformers
        # generating) training one 1,224-token row: worker/engine/memory.py's minimum_vram_bytes
        # (11.21 and 30.56 GiB) rounded up to 0.1 GiB, below what "12 GB" and "32 GB" cards report
        # (11.8, 31.4-31.7 GiB); tests/worker/engine/test_memory.py pins them to the formula.
        ModelSpec(
            "qwen2.5-0.5b",
            "Qwen/Qwen2.5-0.5B-Instruct",
            dtype="bfloat16",
            params=494_000_000,
            min_ram_bytes=8 * GIB,
            min_vram_bytes=int(11.3 * GIB),
            cpu_ok=False,
        ),
        ModelSpec(
            "qwen2.5-1.5b",
            "Qwen/Qwen2.5-1.5B-Instruct",
            dtype="bfloat16",
            params=1_540_000_000,
            min_ram_bytes=16 * GIB,
            min_vram_bytes=int(30.6 * GIB),
            cpu_ok=False,
        ),
    )
}


def tier(name: str) -> ModelSpec:
    try:
        return TIERS[name]
    except KeyError:
        raise ValueError(f"unknown model tier {name!r}; tiers: {', '.join(TIERS)}") from None


def model_cache_dir(data_dir: Path | None = None) -> Path:
    """Where built and downloaded models live: $SWARM_MODEL_CACHE, else <data dir>/models."""
    if os.environ.get("SWARM_MODEL_CACHE"):
        return Path(os.environ["SWARM_MODEL_CACHE"])
    base = data_dir or Path(os.environ.get("SWARM_DATA_DIR") or Path.home() / ".swarm")
    return base / "models"


class ShippedModelDamaged(RuntimeError):
    """A shipped model's files do not match its checksums (a damaged or edited install)."""


def shipped_model_dir(name: str) -> Path | None:
    """The shipped build of tier ``name``, if the project ships one."""
    path = SHIPPED_DIR / name
    return path if (path / CHECKSUM_FILE).is_file() and is_built(path) else None


def checksums(model_dir: Path) -> dict[str, str]:
    """{file name: sha256} of every file of a model directory but the checksum file."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(Path(model_dir).iterdir())
        if path.is_file() and path.name != CHECKSUM_FILE
    }


def write_checksums(model_dir: Path) -> None:
    lines = [f"{digest}  {name}\n" for name, digest in checksums(model_dir).items()]
    (Path(model_dir) / CHECKSUM_FILE).write_text("".join(lines))


_VERIFIED: set[Path] = set()


def verify_shipped(model_dir: Path) -> Path:
    """``model_dir`` once its files match its ``SHA256SUMS`` (checked once per process: a few
    MB hash in milliseconds); raises :class:`ShippedModelDamaged` naming the bad files."""
    model_dir = Path(model_dir)
    if model_dir in _VERIFIED:
        return model_dir
    expected = {}
    for line in (model_dir / CHECKSUM_FILE).read_text().splitlines():
        digest, _, name = line.partition("  ")
        expected[name] = digest
    found = checksums(model_dir)
    bad = sorted(name for name in expected.keys() | found.keys() if expected.get(name) != found.get(name))
    if bad:
        raise ShippedModelDamaged(
            f"the shipped model {model_dir} does not match its {CHECKSUM_FILE} ({', '.join(bad)}): "
            f"reinstall the project, or rebuild it with `swarm-worker build-tiny {model_dir.name} --ship`"
        )
    _VERIFIED.add(model_dir)
    return model_dir


def tiny_model_ready(name: str, cache_dir: Path) -> bool:
    """Whether tier ``name`` loads without a build: shipped, or built in ``cache_dir``."""
    return shipped_model_dir(name) is not None or is_built(Path(cache_dir) / name)


def is_built(model_dir: Path) -> bool:
    """A complete build of this recipe version (an older recipe's build is rebuilt)."""
    try:
        build = json.loads((model_dir / BUILD_FILE).read_text())
    except (OSError, ValueError):
        return False
    return build.get("recipe", {}).get("recipe_version") == RECIPE_VERSION
