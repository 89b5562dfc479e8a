"""One name per agent, the same on every page, in the dashboard's picker and in the export.

A swarm node: its volunteer's display name (swarm_app/volunteers/) and its short id,
"Ada · 3f9c21d0"; "worker · 3f9c21d0" when an organizer's token runs it. A control run: its arm,
tier and seed, as the picker has always named it.
"""

from __future__ import annotations

SHORT_ID = 8


def node_label(node_id: str, display_name: str | None = "") -> str:
    return f"{display_name or 'worker'} · {node_id[:SHORT_ID]}"


def control_label(arm: str, tier: str, seed: int | None) -> str:
    return f"{arm} {tier} seed {seed}"
