"""What a tool call gives back: `ToolResult` (text for the model, a structured value for code, pictures),
and error texts made fit for the model to read (`sanitize_error_text`: no tracebacks, no directories).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["MAX_ERROR_CHARS", "ToolResult", "sanitize_error_text"]

MAX_ERROR_CHARS = 500


@dataclass
class ToolResult:
    """What a tool call gives back: text for the model, a structured value for code, pictures, variables.

    ``text`` is the model's protocol (byte-compatible with the original tools); ``value`` is the same
    result as JSON-able data (dicts, lists, floats, strings; no numpy) that the expert and the report
    read instead of parsing the text. ``image_indices`` are the conversation indices the session gave
    ``images`` when it stored them (filled by the Toolshed, not by tools). ``attachments`` (empty, or
    one per picture, None for none) is the metadata the session keeps with each picture for later tool
    calls on it, like a task image's (e.g. the simulated scene a robot's photo shows); it is for the
    tools only: the model never sees it, and the HTTP API does not send it.
    """

    text: str
    images: list[np.ndarray] = field(default_factory=list)
    attachments: list[dict[str, Any] | None] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False
    value: Any = None  # the structured, JSON-able result that code reads (text is for the model)
    image_indices: list[int] = field(default_factory=list)

    @classmethod
    def error(cls, message: str) -> ToolResult:
        """An error result whose text is `"Error: <message>"`."""
        return cls(text=f"Error: {message}", is_error=True)


_TRACEBACK_LINE = re.compile(r'^\s*(Traceback \(most recent call last\)|File "|\^+$|~+$)')
_PATH = re.compile(r"(?:[A-Za-z]:\\|/)(?:[\w.+-]+[/\\])+([\w.+-]+)")


def sanitize_error_text(text: str, max_chars: int = MAX_ERROR_CHARS) -> str:
    """Strip traceback lines and directories, collapse whitespace and cap the length of an error text."""
    lines = [line for line in text.splitlines() if not _TRACEBACK_LINE.match(line)]
    cleaned = " ".join(" ".join(lines).split())
    cleaned = _PATH.sub(r"\1", cleaned)
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - 3].rstrip() + "..."
    return cleaned
