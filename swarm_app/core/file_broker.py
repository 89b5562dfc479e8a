"""The embedded mode's Celery broker: kombu's filesystem transport, with messages that appear whole.

kombu's filesystem transport (5.7) creates a message's file in the queue folder first and only
then serialises and writes it. A consumer in another process that lists the folder in between
moves the still empty file away, fails to decode it, and Celery takes that for an unrecoverable
error: the worker shuts down once its running tasks end (seen in the demo on a loaded machine,
``JSONDecodeError: Expecting value: line 1 column 1 (char 0)``, after which nothing ran the
controls' next tasks). Here a message is written whole to a staging name that consumers skip and
then renamed into place; a rename within one folder is atomic, so a consumer sees a message
complete or not at all.

``swarmfs://`` (settings.py) names this transport; swarm_app/celery.py registers the alias in
every process that imports the Celery app.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

ALIAS = "swarmfs"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        """Put ``payload`` on ``queue``: written under a staging name, then renamed into place."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        body = str_to_bytes(dumps(payload))
        final = os.path.join(self.data_folder_out, name)
        staging = os.path.join(self.data_folder_out, f".staging-{name}")  # never matches a queue
        try:
            with open(staging, "wb", buffering=0) as f:
                f.write(body)
            os.replace(staging, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> None:
    """Make ``swarmfs://`` resolve to :class:`Transport` (kombu's alias table)."""
    from kombu.transport import TRANSPORT_ALIASES

    TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")
