{% autoescape off %}#!/bin/sh
# Swarm: install this coordinator's worker into a virtual environment and join the coordinator.
# Served by the coordinator at /join.sh (swarm_app/core/join.py). Run it as its pages show:
#
#   {{ command_text }}
#
# Its own options come first, everything else goes to `swarm-worker join`:
#   --venv DIR      the virtual environment (default: $SWARM_VENV, else ~/.swarm/venv); kept and
#                   reused, so a second run downloads only what changed
#   --install-only  install, do not join (the worker's systemd unit runs the join itself)
#   --dry-run       print what would be installed and run, change nothing
# SWARM_TORCH_CPU_INDEX: a mirror of PyTorch's CPU-only wheel index, if you have one.
#
# torch: a Linux machine without an NVIDIA GPU (nvidia-smi lists none) gets PyTorch's CPU-only
# build; the Python Package Index's Linux torch is the CUDA build, several GB with its nvidia-*
# libraries. An NVIDIA GPU gets that CUDA build; macOS gets the Index's torch (CPU and MPS).
set -eu

COORDINATOR={{ coordinator }}
WORKER_WHEEL={{ wheel_url }}
TORCH_VERSION={{ torch_version }}
TORCH_CPU_INDEX=${SWARM_TORCH_CPU_INDEX:-{{ torch_cpu_index }}}

say() { printf 'swarm: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

# Runs a command, or only prints it with --dry-run.
run() {
    if [ "$dry_run" = 1 ]; then printf '+ %s\n' "$*"; else "$@"; fi
}

# The first Python 3.11 or newer on PATH.
find_python() {
    for candidate in python3 python3.14 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# Where torch comes from: PyTorch's CPU-only index, or nothing (the Python Package Index).
torch_index() {
    if [ "$(uname -s)" = Linux ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        printf '%s\n' "$TORCH_CPU_INDEX"
    fi
}

main() {
    venv=${SWARM_VENV:-$HOME/.swarm/venv}
    install_only=0
    dry_run=0
    while [ $# -gt 0 ]; do
        case $1 in
            --venv)
                [ $# -ge 2 ] || fail "--venv needs a directory"
                venv=$2
                shift 2
                ;;
            --install-only) install_only=1; shift ;;
            --dry-run) dry_run=1; shift ;;
            *) break ;;
        esac
    done

    python=$(find_python) || fail "the worker needs Python 3.11 or newer, and this machine's python3 is \
$(python3 --version 2>/dev/null || echo missing). Install one (Debian/Ubuntu: sudo apt install python3.11 \
python3.11-venv; macOS: brew install python@3.11, or python.org's installer), then run this command again."
    if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        say "creating a virtual environment in $venv ($("$python" --version 2>&1))"
        run "$python" -m venv "$venv" || fail "$python could not make a virtual environment in \
$venv (Debian/Ubuntu: sudo apt install python3-venv, or python3.X-venv for your version; then remove \
$venv and run this command again)."
    fi

    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('torch').split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
        say "torch $TORCH_VERSION is installed"
    else
        index=$(torch_index)
        if [ -n "$index" ]; then
            say "no NVIDIA GPU: torch $TORCH_VERSION, CPU-only build, from $index"
            run "$venv/bin/python" -m pip install --index-url "$index" "torch==$TORCH_VERSION"
        else
            say "torch $TORCH_VERSION from the Python Package Index"
            run "$venv/bin/python" -m pip install "torch==$TORCH_VERSION"
        fi
    fi
    say "the worker from $COORDINATOR"
    run "$venv/bin/python" -m pip install "swarm-sapo[worker] @ $WORKER_WHEEL"
    # The same version number may carry newer code after the coordinator's upgrade: this
    # coordinator's wheel, whatever was there.
    run "$venv/bin/python" -m pip install --no-deps --force-reinstall "swarm-sapo @ $WORKER_WHEEL"

    if [ "$install_only" = 1 ]; then
        say "installed; join with: $venv/bin/swarm-worker join $COORDINATOR --token <your token>"
        return 0
    fi
    run exec "$venv/bin/swarm-worker" join "$COORDINATOR" "$@"
}

# The whole script is read before anything runs (it arrives through a pipe).
main "$@"
{% endautoescape %}