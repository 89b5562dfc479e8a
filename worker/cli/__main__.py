"""``python -m worker.cli``: the same as ``swarm-worker``."""

import sys

from worker.cli import main

sys.exit(main())
