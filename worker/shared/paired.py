"""The questions of an agent that draws its own stream: the simulator's agents and a campaign's
control nodes, whose questions the coordinator issues from the same functions.

A stream is a seed; its questions are :func:`worker.shared.questions.ref_at` positions. Round r
of an agent that generates B questions uses positions

    r * max(B, stride) .. r * max(B, stride) + B - 1

so a resumed agent gets the same questions for the same round, and with ``stride`` set to a base
B' >= B an arm at B sees the first B of the B' questions that an arm at B' sees (4/4@B4 against
4/4, the simulator). Over-generation (the ``dyn`` arm) takes questions beyond B from a stream of
their own per round, ``stable_seed(stream, "over-generate", r)``, so extra questions never shift
the B questions of this or any later round: every arm's first B agree.

A campaign's control seed s draws from ``stable_seed("control-questions", s)`` (:func:`control_stream`):
every control kind of one seed answers the very same questions, round by round (pairing).
"""

from __future__ import annotations

from worker.shared.config import stable_seed
from worker.shared.questions import QuestionRef, TaskMix, ref_at


def control_stream(seed: int) -> int:
    """The question stream of a campaign's control seed ``seed`` (shared by its every arm)."""
    return stable_seed("control-questions", seed)


def round_refs(mix: TaskMix, stream: int, round: int, count: int, stride: int = 0) -> list[QuestionRef]:
    """The ``count`` questions of round ``round`` of ``stream`` (positions above)."""
    start = round * max(count, stride)
    return [ref_at(mix, stream, start + offset) for offset in range(count)]


def extra_refs(mix: TaskMix, stream: int, round: int, start: int, count: int) -> list[QuestionRef]:
    """Questions ``start .. start + count - 1`` of round ``round``'s over-generation stream."""
    extra = stable_seed(stream, "over-generate", round)
    return [ref_at(mix, extra, start + offset) for offset in range(count)]


def control_seed_id(tier: str, seed: int) -> str:
    """What a campaign's control of ``tier`` and control seed ``seed`` draws its generation and
    batch seeds from (the engine's ``Agent.seed_id``): the same for its every arm (pairing)."""
    return f"control-{tier}-seed{seed}"
