"""Parsers for every answer format the benchmarks use.

Each parser takes an answer string (already extracted, see ``extraction``) and returns ``None`` or an
empty list when the format is not there; none of them raises on arbitrary text. Numbers may be signed
(a negative coordinate is a point outside the image, not a positive one), may omit the leading zero
(``.5``) and may use exponents.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

Point = tuple[float, float]
Box = tuple[float, float, float, float]

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# A point is two numbers in matching round or square brackets: (x, y) or [x, y].
_POINT_RE = re.compile(rf"\(\s*({_NUM})\s*,\s*({_NUM})\s*\)|\[\s*({_NUM})\s*,\s*({_NUM})\s*\]")
_BOX_RE = re.compile(
    rf"\(\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*\)"
    rf"|\[\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*\]"
)
_YES_NO_RE = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_LEADING_LETTER_RE = re.compile(r"^\W*?(?:\(([A-Za-z])\)|([A-Z]))(?=$|[\s.,:;)\]])")
_PAREN_LETTER_RE = re.compile(r"\(([A-Z])\)")
_CHOICE_LABEL_RE = re.compile(r"^\s*\(?[A-Za-z]\)?[.:)]?\s+")

GRASP_LABELS: tuple[str, ...] = (
    "Grasp center",
    "Left finger base",
    "Right finger base",
    "Left finger tip",
    "Right finger tip",
)
_GRASP_LABEL_RE = re.compile(
    r"(grasp\s*cent(?:er|re)|left\s*finger\s*base|right\s*finger\s*base|left\s*finger\s*tip"
    rf"|right\s*finger\s*tip)\s*[:=]?\s*(?:\(\s*({_NUM})\s*,\s*({_NUM})\s*\)|\[\s*({_NUM})\s*,\s*({_NUM})\s*\])",
    re.IGNORECASE,
)


def _label_key(label: str) -> str:
    """Canonical key of a grasp label: "Grasp centre", "grasp  center" and "graspcenter" are the same."""
    return re.sub(r"\s+", "", label.lower()).replace("centre", "center")


_GRASP_INDEX = {_label_key(label): i for i, label in enumerate(GRASP_LABELS)}


def parse_point_tokens(text: str) -> list[tuple[str, str]]:
    """Every ``(x, y)`` / ``[x, y]`` pair in ``text`` as the two number strings, as written."""
    if not isinstance(text, str):
        return []
    tokens = []
    for match in _POINT_RE.finditer(text):
        x, y = (match.group(1), match.group(2)) if match.group(1) is not None else match.group(3, 4)
        tokens.append((x, y))
    return tokens


def _finite_pairs(tokens: Sequence[tuple[str, str]]) -> list[Point]:
    """Convert number strings to floats, dropping pairs that overflow to inf."""
    pairs = [(float(x), float(y)) for x, y in tokens]
    return [p for p in pairs if np.isfinite(p).all()]


def parse_points(text: str) -> list[Point]:
    """Every ``(x, y)`` / ``[x, y]`` point in ``text``, in order (normalized coordinates expected)."""
    return _finite_pairs(parse_point_tokens(text))


def parse_corners(text: str) -> list[Point]:
    """The corner points of a 3D box answer, in the order written.

    The count is not checked here: the pose scorer gives 0 unless there are exactly 8.
    """
    return parse_points(text)


def parse_grasp(text: str) -> np.ndarray | None:
    """The five grasp points as a ``(5, 2)`` array in ``GRASP_LABELS`` order, or None.

    Labelled points (``Grasp center: [x, y], Left finger base: …``) may come in any order and any
    letter case; when no labels are present, exactly five bare points are read in the canonical order.
    A label written twice keeps its last value.
    """
    if not isinstance(text, str):
        return None
    found: dict[int, Point] = {}
    for match in _GRASP_LABEL_RE.finditer(text):
        numbers = match.group(2, 3) if match.group(2) is not None else match.group(4, 5)
        point = (float(numbers[0]), float(numbers[1]))
        if np.isfinite(point).all():
            found[_GRASP_INDEX[_label_key(match.group(1))]] = point
    if found:
        if len(found) < len(GRASP_LABELS):
            return None
        return np.array([found[i] for i in range(len(GRASP_LABELS))], dtype=float)
    points = parse_points(text)
    if len(points) == len(GRASP_LABELS):
        return np.array(points, dtype=float)
    return None


def parse_boxes(text: str) -> list[Box]:
    """Every ``[x1, y1, x2, y2]`` / ``(x1, y1, x2, y2)`` box in ``text``, corners sorted so x1<=x2, y1<=y2."""
    if not isinstance(text, str):
        return []
    boxes = []
    for match in _BOX_RE.finditer(text):
        numbers = match.group(1, 2, 3, 4) if match.group(1) is not None else match.group(5, 6, 7, 8)
        x1, y1, x2, y2 = (float(n) for n in numbers)
        if np.isfinite([x1, y1, x2, y2]).all():
            boxes.append((min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)))
    return boxes


def parse_yes_no(text: str) -> bool | None:
    """True for an answer that starts with "yes", False for "no" (any case), else None.

    Like the original scorer the answer must START with the word ("No, because …" is no); leading
    punctuation such as quotes or markdown stars is skipped, and "yesterday" or "none" do not count.
    """
    if not isinstance(text, str):
        return None
    match = _YES_NO_RE.match(text)
    if match is None:
        return None
    return match.group(1).lower() == "yes"


def _choice_text(choice: str) -> str:
    """A choice's text without a leading label such as ``(A)`` and without case or end punctuation."""
    return _CHOICE_LABEL_RE.sub("", choice).strip().strip(".").lower()


def parse_choice(text: str, choices: Sequence[str] | None = None) -> str | None:
    """The option letter an answer picks (``"A"``, ``"(A)"``, ``"A. left"``, ``"(b)"``), upper case.

    Falls back to the first ``(X)`` anywhere in the text, then to an answer equal to one choice's text.
    With ``choices`` given, a letter beyond the number of choices is rejected (None).
    """
    if not isinstance(text, str):
        return None
    letter: str | None = None
    match = _LEADING_LETTER_RE.match(text.strip())
    if match is not None:
        letter = (match.group(1) or match.group(2)).upper()
    elif (inner := _PAREN_LETTER_RE.search(text)) is not None:
        letter = inner.group(1)
    elif choices:
        wanted = text.strip().strip(".").lower()
        for index, choice in enumerate(choices):
            if isinstance(choice, str) and wanted and _choice_text(choice) == wanted:
                letter = chr(ord("A") + index)
                break
    if letter is not None and choices is not None and ord(letter) - ord("A") >= len(choices):
        return None
    return letter


def normalize_choice_label(label: str) -> str | None:
    """The letter of a ground-truth label such as ``"(A)"``, ``"A"`` or ``"a"``; None if it has none."""
    match = re.fullmatch(r"\s*\(?\s*([A-Za-z])\s*\)?\s*", label) if isinstance(label, str) else None
    return match.group(1).upper() if match else None
