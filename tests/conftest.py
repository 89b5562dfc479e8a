from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import asgi_server


@pytest.fixture
def coordinator(transactional_db, tmp_path: Path) -> Iterator[str]:
    """A real ASGI coordinator on a loopback port, on the test database; yields its base URL."""
    with asgi_server(tmp_path / "daphne.log") as base:
        yield base
