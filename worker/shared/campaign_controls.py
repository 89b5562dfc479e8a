"""Which isolated controls a campaign runs beside its swarm (CampaignConfig.controls), declared
like every campaign setting (worker/shared/campaign.py)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from worker.shared.arms import CONTROL_KINDS


class ControlsConfig(msgspec.Struct, forbid_unknown_fields=True):
    """Which isolated controls a campaign runs per tier and seed, beside its swarm arm I/J
    (worker/shared/arms.py's control kinds; new fields go last: tests build it positionally)."""

    isolated: Annotated[
        bool,
        Meta(
            title="Plain isolated control (I + J)/0",
            description="per tier, a node trained alone on I + J of its own groups, uniformly "
            "sampled (the paper's 8/0 arm): controls for sharing as a whole",
        ),
    ] = True
    filtered: Annotated[
        bool,
        Meta(
            title="Filtered isolated control (I + J)/0-filtered: a sanity arm",
            description="the same, zero-advantage groups dropped. A sanity check only: with I + J of "
            "its own I + J groups the filter can only delete groups that give no gradient anyway, "
            "so it cannot differ much from the plain control (issue #18)",
        ),
    ] = True
    seeds: Annotated[
        int,
        Meta(
            ge=0,
            le=16,
            title="Control seeds per tier and arm",
            description="independent runs of each control, for an interval; each is a Celery task "
            "for the whole campaign (16 per tier and kind: 64 tasks for one tier's four kinds)",
        ),
    ] = 1
    self_replay: Annotated[
        bool,
        Meta(
            title="Self-replay control I/J-self",
            description="I own groups of the round plus J replayed from the node's own recent "
            "groups (a window as old as the pool's), both filtered: the same batch, curation and "
            "staleness as the swarm without any other node; controls for curation plus reuse "
            "(needs J >= 1)",
        ),
    ] = False
    over_generation: Annotated[
        bool,
        Meta(
            title="Over-generation control (I + J)/0-dyn",
            description="alone, generating more questions (up to 2 (I + J)) until it has I + J "
            "groups with an advantage (DAPO's dynamic sampling): the swarm's informative batch "
            "bought with more generation; the dashboard shows its questions per round beside its reward",
        ),
    ] = False
    self_window: Annotated[
        int,
        Meta(
            ge=0,
            le=4096,
            title="Self-replay window",
            description="groups the self-replay control draws from; 0: automatic, max(8, pool "
            "window / 8). 4096 groups is 16 times the default pool's 256 rollouts",
        ),
    ] = 0
    reference: Annotated[
        Literal[("", *CONTROL_KINDS)],
        Meta(
            title="Headline control",
            description="the control the dashboard's headline gain is measured against (one the "
            "campaign runs; automatic: the first it runs); the gain over every other control is "
            "shown beside it",
        ),
    ] = ""

    def enabled(self) -> dict[str, bool]:
        """{control kind: on} in worker.shared.arms.CONTROL_KINDS order."""
        flags = {
            "isolated": self.isolated,
            "filtered": self.filtered,
            "self": self.self_replay,
            "dyn": self.over_generation,
        }
        return {kind: flags[kind] for kind in CONTROL_KINDS}

    def reference_kind(self) -> str | None:
        """The headline's control: ``reference`` when the campaign runs it, else the first it
        runs (``reference`` left automatic), None without controls."""
        running = [kind for kind, on in self.enabled().items() if on] if self.seeds >= 1 else []
        if self.reference in running:
            return self.reference
        return running[0] if running else None
