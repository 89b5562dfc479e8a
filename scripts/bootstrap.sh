# Sourced by scripts/demo.sh and scripts/test.sh: creates the project's virtualenv if needed and
# installs the project into it with the extras named in $SWARM_EXTRAS, and the lab (lab/, editable)
# with those in $SWARM_LAB_EXTRAS when that is set. Re-running is cheap: the install is skipped
# while pyproject.toml, lab/pyproject.toml and the extras are unchanged.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SWARM_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"

if ! "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "Swarm needs Python 3.11 or newer; $PYTHON_BIN is $("$PYTHON_BIN" --version 2>&1)." >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtualenv $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
fi

stamp="$VENV/.swarm-installed"
want="$(cat "$ROOT/pyproject.toml" "$ROOT/lab/pyproject.toml" "$ROOT/scripts/bootstrap.sh" | sha256sum | cut -c1-16) $SWARM_EXTRAS ${SWARM_LAB_EXTRAS-}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> installing swarm-sapo[$SWARM_EXTRAS] into $VENV (first run takes a few minutes)"
    "$VENV/bin/pip" install --quiet --upgrade pip
    # The worker extra's torch first, alone: its pinned CPU build must win over any CUDA build a
    # resolver might pick. The coordinator alone installs no torch.
    case ",$SWARM_EXTRAS," in
        *,worker,*) "$VENV/bin/pip" install --quiet "torch==2.13.0" ;;
    esac
    # The lab in the same resolve: its swarm-sapo[worker] is this checkout's.
    lab=()
    if [ -n "${SWARM_LAB_EXTRAS+set}" ]; then lab=(-e "$ROOT/lab[$SWARM_LAB_EXTRAS]"); fi
    "$VENV/bin/pip" install --quiet -e "$ROOT[$SWARM_EXTRAS]" "${lab[@]}"
    echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
