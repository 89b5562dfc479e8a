#!/usr/bin/env bash
# Quick start, second command: install everything the tests need, then run the whole suite.
# Arguments are passed to pytest. Set DATABASE_URL and REDIS_URL to test against PostgreSQL
# and Redis; leave them unset to test the embedded mode.
SWARM_EXTRAS="coordinator,dev"
source "$(dirname "$0")/bootstrap.sh"
# Tests keep their own data directory (database file, broker queue, built models) apart from
# the demo's, and need no real secret.
export SWARM_DATA_DIR="${SWARM_DATA_DIR:-$ROOT/data/test}"
export SECRET_KEY="${SECRET_KEY:-insecure-key-for-tests-only}"
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
exec python -m pytest "$@"
