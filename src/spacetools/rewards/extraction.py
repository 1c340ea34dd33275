"""Find the final answer in a model's raw output.

Rule: the text inside the LAST complete ``<answer>…</answer>`` pair. Fallbacks, in order, when there
is none:

1. an ``<answer>`` that is opened but never closed (generation cut at the token limit): the text
   after the last ``<answer>``;
2. no ``<answer>`` tag at all: the whole output with every ``<think>``, ``<tool_call>`` and
   ``<tool_response>`` block removed (what the original evaluator effectively did when it wrapped
   untagged output in answer tags), if anything is left.

The source of the answer is reported so callers can tell a tagged answer from a fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AnswerSource = Literal["tag", "unclosed_tag", "untagged", "none"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_OPEN_ANSWER_RE = re.compile(r"<answer>", re.IGNORECASE)
# Blocks that are never part of an answer; an unclosed block runs to the end of the text.
_NON_ANSWER_BLOCK_RE = re.compile(
    r"<(think|tool_call|tool_response)>.*?(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE
)
_STRAY_TAG_RE = re.compile(r"</?(?:answer|think|tool_call|tool_response)>", re.IGNORECASE)


@dataclass(frozen=True)
class ExtractedAnswer:
    """The answer text (stripped; empty when none was found) and where it came from."""

    text: str
    source: AnswerSource

    @property
    def tagged(self) -> bool:
        """True when the answer was inside a complete ``<answer>…</answer>`` pair."""
        return self.source == "tag"


def extract_answer(solution: str) -> ExtractedAnswer:
    """Return the final answer of ``solution`` by the rule and fallbacks in the module docstring."""
    if not isinstance(solution, str):
        return ExtractedAnswer("", "none")
    tagged = _ANSWER_RE.findall(solution)
    if tagged:
        return ExtractedAnswer(tagged[-1].strip(), "tag")
    opened = list(_OPEN_ANSWER_RE.finditer(solution))
    if opened:
        rest = _STRAY_TAG_RE.sub("", solution[opened[-1].end() :]).strip()
        return ExtractedAnswer(rest, "unclosed_tag" if rest else "none")
    rest = _STRAY_TAG_RE.sub("", _NON_ANSWER_BLOCK_RE.sub("", solution)).strip()
    return ExtractedAnswer(rest, "untagged" if rest else "none")
