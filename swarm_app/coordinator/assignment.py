"""Which model tier a worker trains (the largest of the campaign's tiers its hardware fits), and
which of the tier's independent swarms it joins (a swarm of one first, else the emptiest)."""

from __future__ import annotations

from typing import Any

from worker.shared.protocol import ErrorCode, ProtocolError
from worker.shared.tiers import GIB, TIERS, ModelSpec


def fits(spec: ModelSpec, hardware: dict[str, Any]) -> tuple[bool, str]:
    """(fits, reason) for one tier on the reported hardware."""
    device = hardware.get("device", "cpu")
    ram = int(hardware.get("ram_bytes") or 0)
    vram = int(hardware.get("vram_bytes") or 0)
    if device == "cuda" and spec.min_vram_bytes:
        if vram >= spec.min_vram_bytes:
            return (
                True,
                f"{spec.name} needs {spec.min_vram_bytes / GIB:.0f} GiB VRAM, this GPU has {vram / GIB:.0f}",
            )
        return (
            False,
            f"{spec.name} needs {spec.min_vram_bytes / GIB:.0f} GiB VRAM, this GPU has {vram / GIB:.0f}",
        )
    if not spec.cpu_ok:
        return False, f"{spec.name} needs a GPU with {spec.min_vram_bytes / GIB:.0f} GiB VRAM"
    if ram < spec.min_ram_bytes:
        return (
            False,
            f"{spec.name} needs {spec.min_ram_bytes / GIB:.0f} GiB RAM, this machine has {ram / GIB:.1f}",
        )
    return True, f"{spec.name} runs on {device} with {ram / GIB:.0f} GiB RAM"


def assign_tier(tiers: list[str], hardware: dict[str, Any], preferred: str | None = None) -> tuple[str, str]:
    """(tier, reason); raises ``no_tier_fits`` saying why each tier was refused."""
    verdicts = {name: fits(TIERS[name], hardware) for name in tiers}
    if preferred:
        if preferred not in verdicts:
            raise ProtocolError(
                ErrorCode.NO_TIER_FITS, f"tier {preferred!r} is not in this campaign ({', '.join(tiers)})"
            )
        ok, reason = verdicts[preferred]
        if not ok:
            raise ProtocolError(ErrorCode.NO_TIER_FITS, reason)
        return preferred, f"requested by the worker; {reason}"
    fitting = [name for name, (ok, _) in verdicts.items() if ok]
    if not fitting:
        raise ProtocolError(ErrorCode.NO_TIER_FITS, "; ".join(reason for _, reason in verdicts.values()))
    best = max(fitting, key=lambda name: TIERS[name].params)
    return best, f"largest tier that fits: {verdicts[best][1]}"


def assign_replicate(replicates: int, connected: dict[int, int], joined: dict[int, int]) -> int:
    """The swarm (0..replicates-1) a new node joins. A swarm of one node shares nothing, so a
    node first completes a swarm that has exactly one connected node (the lowest); otherwise it
    joins the one with the fewest connected nodes, then the fewest ever joined, then the lowest
    number. Two volunteers make one swarm of two rather than two of one; 2R volunteers make R
    pairs; more fill the swarms evenly, and a volunteer who leaves is replaced where they left."""
    alone = [r for r in range(replicates) if connected.get(r, 0) == 1]
    if alone:
        return alone[0]
    return min(range(replicates), key=lambda r: (connected.get(r, 0), joined.get(r, 0), r))
