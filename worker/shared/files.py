"""Files written whole or not at all.

:func:`write_atomic` fills a temporary file in the target's directory, flushes it to disk and
renames it over the target (or, ``exclusive``, hard-links it into place, which fails when the
target exists): a reader never sees half a file, and a crash mid-write leaves the previous
version intact. It writes the node's identity and stats (worker/client/identity.py),
checkpoints (worker/engine/checkpoint.py), the simulator's state (worker/research/simulate.py)
and the study's results (lab/swarm_lab/study_runner.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(
    path: Path | str, write: Callable[[IO[bytes]], object], *, exclusive: bool = False, mode: int = 0o644
) -> bool:
    """Write ``path`` with ``write(handle)`` (a binary file), all of it or nothing.

    ``exclusive``: only create, never replace; returns False, writing nothing, when ``path``
    already exists (also when another process creates it at the same moment). ``mode``: the
    file's permissions, umask aside (a temporary file starts private, 0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if not exclusive:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # atomic, and fails if the file exists
        except FileExistsError:
            return False
        except OSError:
            # A filesystem without hard links: O_EXCL on the final name, then fill it. A crash
            # in between leaves an empty file, which a reader must report rather than replace.
            try:
                final = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                return False
            with os.fdopen(final, "wb") as handle:
                handle.write(tmp.read_bytes())
                handle.flush()
                os.fsync(handle.fileno())
        return True
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(
    path: Path | str,
    data: Any,
    *,
    indent: int | None = 2,
    sort_keys: bool = False,
    exclusive: bool = False,
    mode: int = 0o644,
) -> bool:
    """:func:`write_atomic` of ``data`` as JSON (UTF-8, a final newline)."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n"
    return write_atomic(path, lambda handle: handle.write(text.encode()), exclusive=exclusive, mode=mode)
