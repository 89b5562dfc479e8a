"""Turning msgspec's validation errors into the messages Swarm shows (one wording everywhere).

msgspec reports ``Expected `int`, got `str` - at `$.round```; Swarm's errors name the field
first, as an organizer's form and a volunteer's log show them: ``round: expected `int`, got
`str```. Unknown and missing fields keep the wording the protocol has always used.
"""

from __future__ import annotations

import re

import msgspec

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_MISSING = re.compile(r"Object missing required field `(?P<name>[^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]*)`")
# A rule of our own (a __post_init__'s ValueError) names its field first: "rewards[0]: ...".
_OWN = re.compile(r"(?P<name>[a-z_]+(?:\[\d+\])?): (?P<what>.*)", re.S)


def describe(error: msgspec.ValidationError | ValueError, prefix: str = "") -> tuple[str, str]:
    """(field path, message) of a validation error; the path is "" for the object itself.

    ``prefix`` names the root (``"rollout"`` makes ``$.rewards[0]`` read ``rollout.rewards[0]``).
    """
    match = _AT.match(str(error))
    what, path = (match["what"], match["path"] or "") if match else (str(error), "")
    path = path.lstrip(".")
    if (found := _MISSING.fullmatch(what)) is not None:
        what = f"missing field {found['name']!r}"
    elif (found := _UNKNOWN.fullmatch(what)) is not None:
        what = f"unknown fields [{found['name']!r}]"
    elif (found := _OWN.fullmatch(what)) is not None:
        path = ".".join(part for part in (path, found["name"]) if part)
        what = found["what"]
    elif what[:1].isupper():
        what = what[0].lower() + what[1:]
    full = ".".join(part for part in (prefix, path) if part).replace(".[", "[")
    return full, what


def message(error: msgspec.ValidationError | ValueError, prefix: str = "") -> str:
    """``"<field path>: <what>"``, or just ``"<prefix>: <what>"`` for the object itself."""
    path, what = describe(error, prefix)
    return f"{path}: {what}" if path else what
