"""Every answer format of the benchmarks, with its writer and its reader side by side.

``format_<kind>`` writes an answer the way the benchmarks print it (normalized coordinates with
three decimals); ``parse_<kind>`` reads one back from any text. Readers never raise, whatever the
text (they return None or an empty list when the format is not there), and run in time linear in its
length: every pattern here has one quantifier per run of characters, so a regex never backtracks
over the same run twice. Numbers may be signed (a negative coordinate is a point outside the image),
may omit the leading zero (``.5``) and may use exponents; a number that overflows to infinity drops
its point. Writers take finite numbers only and raise ValueError otherwise (a writer's input is
ours, not a model's).

The project has no other answer reader or writer: the generator, the expert, the scorers, the report
and ``data show`` all come here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import numpy as np

Point = tuple[float, float]
Box = tuple[float, float, float, float]
#: What the writers take: sequences or numpy arrays of numbers.
PointLike = Sequence[float] | np.ndarray
PointsLike = Iterable[PointLike] | np.ndarray

#: Decimals of every written coordinate (what the original benchmarks print).
DECIMALS = 3

NUMBER_PATTERN = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_RE = re.compile(NUMBER_PATTERN)
# A point is two numbers in matching round or square brackets: (x, y) or [x, y].
_POINT_RE = re.compile(
    rf"\(\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*\)"
    rf"|\[\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*\]"
)
_BOX_RE = re.compile(
    rf"\(\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*\)"
    rf"|\[\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*\]"
)
_YES_NO_RE = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_LEADING_LETTER_RE = re.compile(r"^\W*?(?:\(([A-Za-z])\)|([A-Z]))(?=$|[\s.,:;)\]])")
_PAREN_LETTER_RE = re.compile(r"\(([A-Z])\)")
_CHOICE_LABEL_RE = re.compile(r"^\(?[A-Za-z]\)?[.:)]?\s+")
_LABEL_ONLY_RE = re.compile(r"\(?\s*([A-Za-z])\s*\)?")

GRASP_LABELS: tuple[str, ...] = (
    "Grasp center",
    "Left finger base",
    "Right finger base",
    "Left finger tip",
    "Right finger tip",
)
# One character class between a label and its point (not ``\s*[:=]?\s*``, whose two quantifiers
# backtrack quadratically over a long run of spaces).
_GRASP_LABEL_RE = re.compile(
    r"(grasp\s*cent(?:er|re)|left\s*finger\s*base|right\s*finger\s*base|left\s*finger\s*tip"
    r"|right\s*finger\s*tip)[\s:=]*"
    rf"(?:\(\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*\)|\[\s*({NUMBER_PATTERN})\s*,\s*({NUMBER_PATTERN})\s*\])",
    re.IGNORECASE,
)
_WHITESPACE_RE = re.compile(r"\s+")

#: Corners of a box answer: bottom face (0-3), then top face (4-7), in BOP order.
BOX_CORNERS = 8
#: Edges of a BOP-ordered box for drawing: bottom face, top face, verticals.
BOX_EDGES: tuple[tuple[int, int], ...] = (
    *((i, (i + 1) % 4) for i in range(4)),
    *((4 + i, 4 + (i + 1) % 4) for i in range(4)),
    *((i, i + 4) for i in range(4)),
)
#: A gripper for drawing, as indices into GRASP_LABELS: the palm between the finger bases, then the
#: two fingers from base to tip.
GRASP_EDGES: tuple[tuple[int, int], ...] = ((1, 2), (1, 3), (2, 4))


# --- numbers --------------------------------------------------------------------------------------


def _coordinate(value: float, decimals: int) -> str:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"cannot write a non-finite coordinate: {value!r}")
    return f"{number:.{decimals}f}"


def parse_numbers(text: str) -> list[float]:
    """Every number in ``text``, in order (infinite ones as ``inf``); empty for a non-string."""
    if not isinstance(text, str):
        return []
    return [float(token) for token in _NUMBER_RE.findall(text)]


# --- points and corners ---------------------------------------------------------------------------


def format_point(point: PointLike, decimals: int = DECIMALS) -> str:
    """``(0.381, 0.428)``."""
    x, y = point
    return f"({_coordinate(x, decimals)}, {_coordinate(y, decimals)})"


def format_points(points: PointsLike, decimals: int = DECIMALS) -> str:
    """``[(0.383, 0.873), (0.390, 0.990)]``: the point-list format of RoboSpatial, RefSpatial, BOP-ASK."""
    return "[" + ", ".join(format_point(point, decimals) for point in points) + "]"


def parse_point_tokens(text: str) -> list[tuple[str, str]]:
    """Every ``(x, y)`` / ``[x, y]`` pair in ``text`` as the two number strings, as written (RefSpatial
    tells pixels from normalized coordinates by how a number is written)."""
    if not isinstance(text, str):
        return []
    tokens = []
    for match in _POINT_RE.finditer(text):
        x, y = (match.group(1), match.group(2)) if match.group(1) is not None else match.group(3, 4)
        tokens.append((x, y))
    return tokens


def parse_points(text: str) -> list[Point]:
    """Every ``(x, y)`` / ``[x, y]`` point in ``text``, in order; points with an infinite number dropped."""
    points = [(float(x), float(y)) for x, y in parse_point_tokens(text)]
    return [point for point in points if math.isfinite(point[0]) and math.isfinite(point[1])]


def format_corners(corners: Sequence[PointLike] | np.ndarray, decimals: int = DECIMALS) -> str:
    """The 8 image corners of a 3D box (BOP order) as a point list; ValueError for another count."""
    if len(corners) != BOX_CORNERS:
        raise ValueError(f"a box answer has {BOX_CORNERS} corners, got {len(corners)}")
    return format_points(corners, decimals)


def parse_corners(text: str) -> list[Point]:
    """The corner points of a 3D box answer, in the order written.

    The count is not checked here: the pose scorer gives 0 unless there are exactly 8.
    """
    return parse_points(text)


# --- 2D boxes -------------------------------------------------------------------------------------


def format_boxes(boxes: PointsLike, decimals: int = DECIMALS) -> str:
    """``[[x1, y1, x2, y2], ...]`` normalized 2D boxes."""
    written = []
    for box in boxes:
        if len(box) != 4:
            raise ValueError(f"a 2D box has 4 numbers [x1, y1, x2, y2], got {len(box)}")
        written.append("[" + ", ".join(_coordinate(value, decimals) for value in box) + "]")
    return "[" + ", ".join(written) + "]"


def parse_boxes(text: str) -> list[Box]:
    """Every ``[x1, y1, x2, y2]`` / ``(x1, y1, x2, y2)`` box in ``text``, corners sorted so x1<=x2, y1<=y2."""
    if not isinstance(text, str):
        return []
    boxes = []
    for match in _BOX_RE.finditer(text):
        numbers = match.group(1, 2, 3, 4) if match.group(1) is not None else match.group(5, 6, 7, 8)
        x1, y1, x2, y2 = (float(n) for n in numbers)
        if all(math.isfinite(v) for v in (x1, y1, x2, y2)):
            boxes.append((min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)))
    return boxes


# --- grasps ---------------------------------------------------------------------------------------


def format_grasp(points: Sequence[PointLike] | np.ndarray, decimals: int = DECIMALS) -> str:
    """``Grasp center: [x, y], Left finger base: [x, y], …``: the five labelled BOP-ASK grasp points."""
    if len(points) != len(GRASP_LABELS):
        raise ValueError(f"a grasp has {len(GRASP_LABELS)} points {GRASP_LABELS}, got {len(points)}")
    return ", ".join(
        f"{label}: [{_coordinate(x, decimals)}, {_coordinate(y, decimals)}]"
        for label, (x, y) in zip(GRASP_LABELS, points, strict=True)
    )


def _label_key(label: str) -> str:
    """Canonical key of a grasp label: "Grasp centre", "grasp  center" and "graspcenter" are the same."""
    return _WHITESPACE_RE.sub("", label.lower()).replace("centre", "center")


_GRASP_INDEX = {_label_key(label): i for i, label in enumerate(GRASP_LABELS)}


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
        x, y = float(numbers[0]), float(numbers[1])
        if math.isfinite(x) and math.isfinite(y):
            found[_GRASP_INDEX[_label_key(match.group(1))]] = (x, y)
    if found:
        if len(found) < len(GRASP_LABELS):
            return None
        return np.array([found[i] for i in range(len(GRASP_LABELS))], dtype=float)
    points = parse_points(text)
    if len(points) == len(GRASP_LABELS):
        return np.array(points, dtype=float)
    return None


# --- yes/no and multiple choice -------------------------------------------------------------------


def format_yes_no(answer: bool) -> str:
    """``Yes`` or ``No``."""
    return "Yes" if answer else "No"


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


def choice_letter(index: int) -> str:
    """``A`` for option 0, ``B`` for 1, …; ValueError beyond ``Z``."""
    if not 0 <= index < 26:
        raise ValueError(f"an option index is 0..25 (A..Z), got {index}")
    return chr(ord("A") + index)


def format_choice(index: int) -> str:
    """``(A)`` for option 0, ``(B)`` for 1, …: how the benchmarks write a multiple-choice answer."""
    return f"({choice_letter(index)})"


def _choice_text(choice: str) -> str:
    """A choice's text without a leading label such as ``(A)`` and without case or end punctuation."""
    return _CHOICE_LABEL_RE.sub("", choice.strip()).strip().strip(".").lower()


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
        for index, choice in enumerate(choices[:26]):
            if isinstance(choice, str) and wanted and _choice_text(choice) == wanted:
                letter = choice_letter(index)
                break
    if letter is not None and choices is not None and ord(letter) - ord("A") >= len(choices):
        return None
    return letter


def normalize_choice_label(label: str) -> str | None:
    """The letter of a ground-truth label such as ``"(A)"``, ``"A"`` or ``"a"``; None if it has none."""
    match = _LABEL_ONLY_RE.fullmatch(label.strip()) if isinstance(label, str) else None
    return match.group(1).upper() if match else None
