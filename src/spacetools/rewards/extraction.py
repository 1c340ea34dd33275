"""The one answer reader: the final answer in a model's raw output.

The rollout (``spacetools.agent.protocol.parse_turn``), the scorer and the report all read answers
here, so an output never ends an episode with one answer and scores with another.

Rule: the text inside the LAST complete ``<answer>…</answer>`` pair, wherever it stands (inside a
``<think>`` block too, as the original scorer's regex reads it; with nested or repeated opening tags
the innermost pair counts: ``<answer>a<answer>b</answer>`` answers ``b``). Fallbacks, in order, when
there is none:

1. an ``<answer>`` opened at the end and never closed (generation cut at the token limit): the text
   after the last ``<answer>``, provided no other protocol tag follows it (an opening tag mentioned
   in thinking, ``<think>… or <answer>.</think>``, is not an answer);
2. no answer tag to take: the whole output with every ``<think>``, ``<tool_call>`` and
   ``<tool_response>`` block removed (what the original evaluator effectively did when it wrapped
   untagged output in answer tags), if anything is left.

Stray protocol tags are removed from the answer text. The source of the answer is reported so that
callers can tell a tagged answer from a fallback; the rollout takes only ``tag`` and ``unclosed_tag``
answers. The reader makes one pass over the tags: linear in the output's length, whatever it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AnswerSource = Literal["tag", "unclosed_tag", "untagged", "none"]

_TAG_RE = re.compile(r"<(/?)(answer|think|tool_call|tool_response)>", re.IGNORECASE)
#: Blocks that are never part of an answer; an unclosed one runs to the end of the text.
_NON_ANSWER_BLOCKS = frozenset({"think", "tool_call", "tool_response"})


@dataclass(frozen=True)
class ExtractedAnswer:
    """The answer text (stripped; empty when none was found) and where it came from."""

    text: str
    source: AnswerSource

    @property
    def tagged(self) -> bool:
        """True when the answer was inside a complete ``<answer>…</answer>`` pair."""
        return self.source == "tag"


#: A protocol tag as (start, end, closing, lower-case name); plain tuples keep a 1 MB output fast.
_Tag = tuple[int, int, bool, str]


def _tags(text: str) -> list[_Tag]:
    return [(*match.span(), bool(match.group(1)), match.group(2).lower()) for match in _TAG_RE.finditer(text)]


def _without_tags(text: str) -> str:
    return _TAG_RE.sub("", text).strip()


def _last_pair(text: str, tags: list[_Tag]) -> str | None:
    """The content of the last ``</answer>`` paired with the nearest ``<answer>`` before it."""
    opened_at: int | None = None
    content: str | None = None
    for start, end, closing, name in tags:
        if name != "answer":
            continue
        if not closing:
            opened_at = end
        elif opened_at is not None:
            content, opened_at = text[opened_at:start], None
    return content


def _outside_blocks(text: str, tags: list[_Tag]) -> str:
    """``text`` without its think, tool-call and tool-response blocks (each up to its own closing tag)."""
    kept: list[str] = []
    position = 0
    inside: str | None = None
    for start, end, closing, name in tags:
        if inside is None and not closing and name in _NON_ANSWER_BLOCKS:
            kept.append(text[position:start])
            inside = name
        elif inside is not None and closing and name == inside:
            position, inside = end, None
    if inside is None:
        kept.append(text[position:])
    return "".join(kept)


def extract_answer(solution: str) -> ExtractedAnswer:
    """Return the final answer of ``solution`` by the rule and fallbacks in the module docstring."""
    if not isinstance(solution, str):
        return ExtractedAnswer("", "none")
    tags = _tags(solution)
    paired = _last_pair(solution, tags)
    if paired is not None:
        return ExtractedAnswer(_without_tags(paired), "tag")
    if tags and tags[-1][3] == "answer" and not tags[-1][2]:
        rest = _without_tags(solution[tags[-1][1] :])
        if rest:
            return ExtractedAnswer(rest, "unclosed_tag")
    rest = _without_tags(_outside_blocks(solution, tags))
    return ExtractedAnswer(rest, "untagged" if rest else "none")
