"""The rules between a round's settings, written once.

A declaration says what one setting may be (its type and bounds: worker/shared/campaign.py,
worker/shared/config.py); a rule says what settings may be together (I + J at least 1, I at
most B, backfill's J at least 1...). Both readers of the rules take them from here: a campaign
reports each broken rule at the setting to change, with the settings it read
(``CampaignConfig.check``: the form, the API, ``swarm-worker campaign-config``), and a node's
``AgentConfig`` refuses to run with the first (the engine, the simulator, the studies).

Torch-free and msgspec-free: the learner imports it on a bare GPU machine (bench/gpu_check.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.shared.sampling import BATCH_RULES, STRATEGIES

FILTER = "nonzero_advantage"


@dataclass(frozen=True)
class Broken:
    """A broken rule: the setting to change, what is wrong, and every setting the rule read
    (a campaign skips a rule that read a setting already refused by its declaration)."""

    setting: str
    message: str
    reads: tuple[str, ...]


def round_rules(
    *,
    questions_per_round: int,
    num_local: int,
    num_external: int,
    local_strategy: str,
    external_strategy: str,
    batch_rule: str,
    decay_rounds: int,
    max_questions: int = 0,
    replay: str = "pool",
    self_window: int = 0,
) -> list[Broken]:
    """Every rule the round settings break, in the order a reader should fix them.

    B = ``questions_per_round``, I = ``num_local``, J = ``num_external``. ``max_questions``
    (over-generation's cap), ``replay`` and ``self_window`` are an arm's (worker/shared/arms.py),
    not a campaign's: a campaign's nodes run with their defaults.
    """
    i, j, b = num_local, num_external, questions_per_round
    ij = ("num_local", "num_external")
    broken: list[Broken] = []
    for name, strategy in (("local_strategy", local_strategy), ("external_strategy", external_strategy)):
        if strategy not in STRATEGIES:
            broken.append(
                Broken(
                    name,
                    f"unknown sampling strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}",
                    (name,),
                )
            )
    if batch_rule not in BATCH_RULES:
        broken.append(
            Broken(
                "batch_rule",
                f"batch_rule must be one of {', '.join(BATCH_RULES)}, got {batch_rule!r}",
                ("batch_rule",),
            )
        )
    if i < 0 or j < 0:
        broken.append(Broken("num_local" if i < 0 else "num_external", "I and J must be at least 0", ij))
    elif i + j == 0:
        broken.append(Broken("num_local", "I + J must be at least 1: a node must train on something", ij))
    if max_questions and max_questions <= b:
        broken.append(
            Broken(
                "max_questions",
                f"max_questions = {max_questions} must be 0 (off) or more than the {b} questions per round",
                ("max_questions", "questions_per_round"),
            )
        )
    elif i > max(b, max_questions):
        broken.append(
            Broken(
                "num_local",
                f"I = {i} exceeds the {b} questions per round",
                ("num_local", "questions_per_round", "max_questions"),
            )
        )
    if replay not in ("pool", "self"):
        broken.append(Broken("replay", f"replay must be 'pool' or 'self', got {replay!r}", ("replay",)))
    if self_window < 0 or (replay == "self" and self_window < 1):
        broken.append(
            Broken("self_window", "self-replay needs self_window >= 1 (groups)", ("replay", "self_window"))
        )
    if batch_rule == "backfill":
        if j < 1:
            broken.append(
                Broken(
                    "num_external",
                    "backfill needs J >= 1: the most external groups it adds",
                    ("batch_rule", "num_external"),
                )
            )
        if local_strategy != FILTER:
            broken.append(
                Broken(
                    "local_strategy",
                    "backfill fills the batch past the informative own groups: it needs the "
                    "nonzero_advantage local strategy (with uniform every own group counts)",
                    ("batch_rule", "local_strategy"),
                )
            )
    if batch_rule == "decay":
        if replay != "pool":
            broken.append(
                Broken(
                    "replay",
                    "batch_rule 'decay' draws its J from the pool (replay='pool')",
                    ("batch_rule", "replay"),
                )
            )
        if decay_rounds < 1:
            broken.append(
                Broken(
                    "decay_rounds", "the decay rule needs decay_rounds >= 1", ("batch_rule", "decay_rounds")
                )
            )
        if i + j > b:
            broken.append(
                Broken(
                    "num_external",
                    f"the decay rule ends at I + J = {i + j} own groups: more than the {b} questions per round",
                    ("batch_rule", *ij, "questions_per_round"),
                )
            )
    elif decay_rounds < 0:
        broken.append(Broken("decay_rounds", "decay_rounds must be >= 0", ("decay_rounds",)))
    return broken


ROUND_SETTINGS = (
    "questions_per_round",
    "num_local",
    "num_external",
    "local_strategy",
    "external_strategy",
    "batch_rule",
    "decay_rounds",
    "max_questions",
    "replay",
    "self_window",
)


def rules_of(settings: object) -> list[Broken]:
    """:func:`round_rules` of the round settings among a config's fields (a CampaignConfig's, a
    msgspec Struct; an AgentConfig's, a dataclass); the arm's settings a campaign lacks take
    their defaults."""
    fields = getattr(settings, "__struct_fields__", None) or getattr(settings, "__dataclass_fields__", {})
    return round_rules(**{name: getattr(settings, name) for name in ROUND_SETTINGS if name in fields})


def grpo_rules(eps_low: float, eps_high: float) -> list[Broken]:
    """The rules between GRPO settings: the learner's invariant (GRPOConfig) and a campaign's
    problem (its ``grpo`` settings)."""
    if eps_high < eps_low:  # clip-higher (DAPO): the upper clip is the wider one
        return [
            Broken("eps_high", "the upper clip ε must not be below the lower one", ("eps_low", "eps_high"))
        ]
    return []
