"""Reading the questions: the wordings of RoboSpatial, RefSpatial, CV-Bench, BLINK and BOP-ASK.

The expert sees the question, the images and the public metadata of a task (choices, marked points,
question type), never the scene behind it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from spacetools.agent.types import Task
from spacetools.rewards.formats import format_choice

_RELATION = r"(?:to the )?(?P<rel>left of|right of|in front of|behind|above|below|on top of|under)"
CONFIGURATION_RE = re.compile(rf"\bis the (?P<a>.+?) {_RELATION} the (?P<b>.+?)\?", re.IGNORECASE)
COMPATIBILITY_RE = re.compile(
    rf"(?:\b(?:can|could) the (?P<a>.+?) (?:fit|be placed|be put)|enough room for the (?P<a2>.+?))"
    rf" {_RELATION} the (?P<b>.+?)(?: on the table)?\?",
    re.IGNORECASE,
)
SIDE_OF_RE = re.compile(
    rf"{_RELATION} the (?P<b>[^.?,]+?)(?: where| suitable| to put| on the table|[.?,])", re.I
)
LOCATION_RE = re.compile(
    rf"(?:point out|locate|where is) the (?P<a>.+?) (?:that is )?{_RELATION} the (?P<b>.+?)(?: in the image)?[.?]",
    re.IGNORECASE,
)
PAIR_2D_RE = re.compile(
    r"(?:where is the (?P<a>.+?) located with respect to the (?P<b>.+?)"
    r"|position of the (?P<a2>.+?) relative to the (?P<b2>.+?))(?: in the image)?\?",
    re.IGNORECASE,
)
TARGET_RE = re.compile(
    r"(?:bounding box of the|box that tightly encloses the|grasp for picking up the|grasp the|grasp of the)"
    r" (?P<a>.+?)(?: in the image| with a parallel gripper)?[.?]",
    re.IGNORECASE,
)
CATEGORY_RE = re.compile(
    r"(?:detect every|instances of|boxes of all) (?P<a>.+?)(?: objects)?(?: in the image| and)", re.IGNORECASE
)
POINTING_QUESTION_RE = re.compile(r"\b(?:pinpoint|point to|point out|vacant|free spot|empty space)\b", re.I)
_CHOICE_LINE_RE = re.compile(r"^\s*\((?P<letter>[A-Z])\)\s*(?P<text>.+?)\s*$", re.MULTILINE)


class QuestionNotUnderstood(ValueError):
    """The question does not match any wording the scripted expert knows."""


def match(pattern: re.Pattern[str], question: str, family: str) -> re.Match[str]:
    """The pattern's match in the question; `QuestionNotUnderstood` naming the family otherwise."""
    found = pattern.search(question)
    if found is None:
        raise QuestionNotUnderstood(f"scripted policy cannot read this {family} question: {question[:120]!r}")
    return found


def group(found: re.Match[str], *names: str) -> str:
    """The first of the named groups that matched, stripped."""
    return next(found.group(n) for n in names if n in found.groupdict() and found.group(n)).strip()


def relation(found: re.Match[str]) -> str:
    """Canonical relation: ``left of``, ``right of``, ``in front of``, ``behind``, ``above``, ``below``."""
    rel = found.group("rel").lower()
    return {"on top of": "above", "under": "below"}.get(rel, rel)


def side_words(side: str) -> str:
    """A side as a phrase reads it: ``to the left of``, ``behind``."""
    return f"to the {side}" if side in ("left of", "right of") else side


def choices_of(task: Task) -> list[str]:
    """The option texts, from ``extra_info["choices"]`` or else the ``(A) …`` lines of the question."""
    choices = task.extra_info.get("choices")
    if choices:
        return [str(c) for c in choices]
    return [m.group("text") for m in _CHOICE_LINE_RE.finditer(task.question)]


def letter_of(choices: Sequence[str], wanted: str) -> str:
    """``(X)`` for the choice whose text is ``wanted`` (case-insensitive; ``(A)`` when none matches)."""
    for k, text in enumerate(choices):
        if text.strip().strip(".").lower() == wanted.lower():
            return format_choice(k)
    return format_choice(0)
