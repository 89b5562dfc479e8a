#!/usr/bin/env bash
# Quick start, first command: install the coordinator and worker, then run the demo campaign.
# Options are passed on to `manage.py demo` (see `manage.py demo --help`).
SWARM_EXTRAS="coordinator"
source "$(dirname "$0")/bootstrap.sh"
python manage.py migrate --noinput
exec daphne -b 127.0.0.1 -p "${PORT:-8000}" swarm_app.asgi:application
