"""The node's identity on disk: who this worker is across restarts, and where its state lives.

The coordinator keys a node's tier, round and statistics by ``node_id`` (per campaign and
token), so a worker that restarts must say the same id again to resume instead of joining as a
new node. The id is created once, as a uuid4 hex (letters and digits only, which the
coordinator's hello accepts), in ``<data_dir>/node.json`` and never rewritten:

* creation is atomic and exclusive (worker/shared/files.py: write a temporary file, then
  hard-link it into place, which fails if another process got there first), so two workers
  started at once on the same data directory still end up with one id;
* a damaged ``node.json`` is an error, not a reason to mint a new id silently: a new id would
  orphan the node's progress on the coordinator.

Two running workers must not share a data directory (they would be one node to the
coordinator, and overwrite each other's checkpoints): :func:`lock_data_dir` holds an exclusive
lock for the worker's lifetime.

Facts the worker measures about itself (its generation speed, sent in the next hello) live in
``<data_dir>/node-stats.json``, rewritten freely, so ``node.json`` stays write-once.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from worker.shared.files import write_json_atomic

NODE_FILE = "node.json"
STATS_FILE = "node-stats.json"
LOCK_FILE = "worker.lock"
MAX_NODE_ID = 64
PRIVATE = 0o600  # node.json and node-stats.json: readable by their user only


class IdentityError(RuntimeError):
    """The data directory's identity cannot be used (damaged file, or in use by another worker)."""


@dataclass(frozen=True)
class Identity:
    node_id: str
    created_at: float  # unix time
    path: Path  # the node.json it was read from


def valid_node_id(node_id: object) -> bool:
    """What the coordinator's hello accepts: 1-64 letters, digits, '-' or '_'."""
    return (
        isinstance(node_id, str)
        and 0 < len(node_id) <= MAX_NODE_ID
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in node_id)
    )


def _write_json(path: Path, data: dict[str, Any], exclusive: bool) -> bool:
    return write_json_atomic(path, data, indent=2, sort_keys=True, exclusive=exclusive, mode=PRIVATE)


def _read_identity(path: Path) -> Identity:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise IdentityError(
            f"{path} is damaged ({error}); restore it from a backup to resume as the same node, "
            "or delete it to join as a new node"
        ) from None
    node_id = data.get("node_id") if isinstance(data, dict) else None
    if not valid_node_id(node_id):
        raise IdentityError(f"{path}: 'node_id' must be 1-{MAX_NODE_ID} letters, digits, '-' or '_'")
    created = data.get("created_at", 0.0)
    return Identity(node_id, float(created) if isinstance(created, int | float) else 0.0, path)


def load_identity(data_dir: Path, node_id: str | None = None) -> Identity:
    """This data directory's identity, created on first use: as ``node_id`` when given (a
    campaign's control node, whose id the coordinator chose), else a new uuid4 hex. A given
    ``node_id`` that differs from the one on disk is an error."""
    if node_id is not None and not valid_node_id(node_id):
        raise IdentityError(f"node id {node_id!r}: 1-{MAX_NODE_ID} letters, digits, '-' or '_'")
    path = Path(data_dir) / NODE_FILE
    if not path.exists():
        record = {"node_id": node_id or uuid.uuid4().hex, "created_at": time.time()}
        # False when another process created it first: then that one is read.
        _write_json(path, record, exclusive=True)
    identity = _read_identity(path)
    if node_id is not None and identity.node_id != node_id:
        raise IdentityError(f"{path} is node {identity.node_id}, not {node_id}")
    return identity


def checkpoint_path(data_dir: Path, campaign_id: int | str, node_id: str) -> Path:
    """Where this node keeps its checkpoint for one campaign."""
    return Path(data_dir) / "checkpoints" / f"campaign-{campaign_id}" / f"{node_id}.pt"


def load_stats(data_dir: Path) -> dict[str, Any]:
    """What the worker last measured about itself; {} when nothing (or nothing readable) is there."""
    try:
        data = json.loads((Path(data_dir) / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_stats(data_dir: Path, **values: Any) -> None:
    """Merge ``values`` into the stats file (atomic replace)."""
    _write_json(Path(data_dir) / STATS_FILE, {**load_stats(data_dir), **values}, exclusive=False)


@contextlib.contextmanager
def lock_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data directory; IdentityError if another worker holds it.

    The lock is ``filelock``'s on ``<data_dir>/worker.lock``: an advisory ``flock`` on Unix
    (``msvcrt`` on Windows), released by the kernel when the process dies, so a crashed worker
    never leaves a stale lock behind.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(data_dir / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise IdentityError(
            f"another swarm-worker is running with the data directory {data_dir}; "
            "give each worker its own --data-dir"
        ) from None
    try:
        yield
    finally:
        lock.release()
