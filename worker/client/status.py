"""The volunteer's live status: one line per node (worker/client/volunteer.py updates it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from worker.client.connection import RUNNING

if TYPE_CHECKING:
    from rich.text import Text

    from worker.client.transport import WebsocketTransport


class StatusLine:
    """The live one-line status (a rich renderable, re-read on every refresh)."""

    def __init__(self, transport: WebsocketTransport, label: str = "") -> None:
        self.transport = transport
        self.label = label  # the node, when one process runs several
        self.phase = "starting"
        self.round = 0
        self.rounds: int | None = None
        self.tier = ""
        self.reward: float | None = None
        self.tokens_per_second: float | None = None
        self.external_fraction: float | None = None
        self.held_out: float | None = None  # the last held-out accuracy the coordinator scored

    def update(self, metrics: dict[str, float]) -> None:
        self.reward = metrics.get("reward")
        self.tokens_per_second = metrics.get("tokens_per_second")
        self.external_fraction = metrics.get("external_fraction")

    def render(self) -> str:
        total = f"/{self.rounds}" if self.rounds else ""
        parts = [f"{self.label}round {self.round}{total}"]
        if self.tier:
            parts.append(self.tier)
        parts.append(self.phase)
        parts.append("reward " + ("-" if self.reward is None else f"{self.reward:.3f}"))
        parts.append(("-" if self.tokens_per_second is None else f"{self.tokens_per_second:.0f}") + " tok/s")
        parts.append(
            "external " + ("-" if self.external_fraction is None else f"{100 * self.external_fraction:.0f}%")
        )
        if self.held_out is not None:
            parts.append(f"held-out {self.held_out:.3f}")
        connection = self.transport.connection_state
        if self.transport.campaign_state not in (RUNNING, "unknown"):
            connection += f", campaign {self.transport.campaign_state}"
        parts.append(f"coordinator: {connection}")
        return " | ".join(parts)


class StatusLines:
    """The live status: one line per started node (a rich renderable, re-read on every refresh)."""

    def __init__(self, runs: Sequence[Any]) -> None:
        """``runs``: objects with a ``line`` (a StatusLine, or None before they start)."""
        self.runs = runs

    def __rich__(self) -> Text:
        from rich.text import Text

        return Text("\n".join(run.line.render() for run in self.runs if run.line is not None))
