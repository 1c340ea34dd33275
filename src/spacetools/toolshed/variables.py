"""Resolution of `"$name"` arguments against a session's variables, also inside lists, tuples and
objects (where the argument walk of `arguments.py` finds them)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["REFERENCE", "resolve_references"]

# "$depth_map" is a reference; "$5" or "costs $3" are plain text.
REFERENCE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def resolve_references(value: Any, lookup: Callable[[str], Any]) -> Any:
    """A copy of `value` with every `"$name"` string replaced by `lookup(name)` (which may raise)."""
    if isinstance(value, str):
        match = REFERENCE.match(value)
        return lookup(match.group(1)) if match else value
    if isinstance(value, list):
        return [resolve_references(item, lookup) for item in value]
    if isinstance(value, tuple):
        return tuple(resolve_references(item, lookup) for item in value)
    if isinstance(value, Mapping):
        return {key: resolve_references(item, lookup) for key, item in value.items()}
    return value
