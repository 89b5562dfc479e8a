"""``python -m worker.cli``: the same as ``swarm-worker``."""

import sys

from worker.cli import main

if __name__ == "__main__":  # imported as a module (every module is, in tests/test_foundation.py)
    sys.exit(main())
