"""Tool names as function-calling APIs accept them, and back.

OpenAI's and Anthropic's function names must match ``^[a-zA-Z0-9_-]{1,64}$``, so a tool method name like
``sam2.segment_from_point`` cannot be sent as it is. :class:`FunctionNames` maps every name of one tool set
to a valid one and back; the table, not a string rule, guarantees that the mapping is reversible.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

FUNCTION_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LENGTH = 64


def _candidate(name: str) -> str:
    # A dot separates tool and method; "-" is unused in tool names, so it reads naturally and stays unique.
    return _INVALID_CHARS.sub("_", name.replace(".", "-"))


class FunctionNames:
    """A reversible mapping between tool method names and function-calling names."""

    def __init__(self, names: Iterable[str]) -> None:
        self._to_wire: dict[str, str] = {}
        self._from_wire: dict[str, str] = {}
        for name in names:
            wire = _candidate(name)
            if len(wire) > _MAX_LENGTH or wire in self._from_wire or not wire:
                # Too long or taken: keep a readable prefix and make it unique with a digest of the name.
                digest = hashlib.sha1(name.encode()).hexdigest()[:8]
                wire = f"{wire[: _MAX_LENGTH - 9]}_{digest}"
            self._to_wire[name] = wire
            self._from_wire[wire] = name

    def to_wire(self, name: str) -> str:
        """The function name for a tool method name; `KeyError` for a name not in the tool set."""
        return self._to_wire[name]

    def from_wire(self, wire: str) -> str | None:
        """The tool method name for a function name, or None when no tool has that name."""
        return self._from_wire.get(wire)

    def __len__(self) -> int:
        return len(self._to_wire)
