"""Resolution of `"$name"` arguments against a session's variables, also inside lists and objects."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["REFERENCE", "referenced_names", "resolve_references"]

# "$depth_map" is a reference; "$5" or "costs $3" are plain text.
REFERENCE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def resolve_references(value: Any, lookup: Callable[[str], Any]) -> Any:
    """A copy of `value` with every `"$name"` string replaced by `lookup(name)` (which may raise)."""
    if isinstance(value, str):
        match = REFERENCE.match(value)
        return lookup(match.group(1)) if match else value
    if isinstance(value, list):
        return [resolve_references(item, lookup) for item in value]
    if isinstance(value, dict):
        return {key: resolve_references(item, lookup) for key, item in value.items()}
    return value


def referenced_names(value: Any) -> list[str]:
    """The variable names referenced anywhere in `value`, in order of appearance (an iterative walk
    of the lists and dicts `resolve_references` enters, copying nothing)."""
    names: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            match = REFERENCE.match(item) if item.startswith("$") else None
            if match:
                names.append(match.group(1))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(item.values()))
    return names
