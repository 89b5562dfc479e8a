"""Markdown for a generated message reference: one entry per declaration, its heading, its
description and its JSON Schema (docs/protocol.md's and docs/messages.md's reference sections)."""

from __future__ import annotations

import json
from typing import Any


def schema_entry(name: str, schema: dict[str, Any], note: str = "") -> list[str]:
    """The lines of one entry: ``#### `name` ``, the schema's description (plus ``note``) and the
    schema without its description and title, as a JSON block."""
    schema = dict(schema)
    description = schema.pop("description", "")
    schema.pop("title", None)
    return [f"#### `{name}`", "", description + note, "", "```json", json.dumps(schema, indent=2), "```", ""]


def definitions_section(definitions: dict[str, dict[str, Any]]) -> list[str]:
    """The ``### Definitions`` section: every referenced schema, by name."""
    lines = ["### Definitions", ""]
    for name, schema in sorted(definitions.items()):
        lines += schema_entry(name, schema)
    return lines
