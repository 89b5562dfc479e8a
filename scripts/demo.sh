#!/usr/bin/env bash
# Quick start, first command: install the coordinator and worker, then run the demo campaign.
# Options are passed on to `manage.py demo` (see `manage.py demo --help`).
SWARM_EXTRAS="coordinator,worker"
source "$(dirname "$0")/bootstrap.sh"
exec python manage.py demo "$@"
