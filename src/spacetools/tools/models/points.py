"""Pointing models' answers read as normalized points, and the prompts that ask for them.

Three syntaxes are in use:
- ``molmo``: ``<point x="61.5" y="40.2" alt="mug">mug</point>`` or ``<points x1=".." y1=".." x2=..>``,
  coordinates in percent of the image;
- ``normalized`` (RoboRefer): ``[(0.41, 0.62), (0.45, 0.60)]``, coordinates in [0, 1];
- ``pixels`` (Qwen2.5-VL): ``[{"point_2d": [412, 233], "label": "mug"}]`` or pixel tuples, in pixels of
  the image the model saw (its resized input, or the original image behind an endpoint).
``auto`` picks by what the answer contains. An answer with no point syntax at all is a `ToolError`
quoting the answer; an explicit empty list (``[]``) means the model found nothing.
"""

from __future__ import annotations

import json
import re
from typing import Literal

import numpy as np

from spacetools.kit.definition import ToolError

PointFormat = Literal["auto", "molmo", "normalized", "pixels"]

PROMPTS: dict[str, str] = {
    # RoboRefer's own answer instruction.
    "normalized": (
        "Point to {obj_name}. Your answer should be formatted as a list of tuples, i.e. [(x1, y1)], where "
        "each tuple contains the x and y coordinates of a point satisfying the conditions above. The "
        "coordinates should be between 0 and 1, indicating the normalized pixel locations of the points "
        "in the image."
    ),
    "molmo": "Point to {obj_name}",
    "pixels": (
        "Locate {obj_name} in the image and output the coordinates of a point on each instance in JSON "
        'format as [{{"point_2d": [x, y], "label": "..."}}].'
    ),
}
PROMPTS["auto"] = PROMPTS["normalized"]

_NUMBER = r"-?\d+(?:\.\d+)?"
_MOLMO_TAG = re.compile(r"<points?\b([^>]*)>", re.IGNORECASE)
_MOLMO_ATTRIBUTE = re.compile(rf'\b(x|y)(\d*)\s*=\s*"({_NUMBER})"', re.IGNORECASE)
_TUPLE = re.compile(rf"[\(\[]\s*({_NUMBER})\s*,\s*({_NUMBER})\s*[\)\]]")
_JSON_LIST = re.compile(r"\[.*\]", re.DOTALL)
_EMPTY_LIST = re.compile(r"\[\s*\]")


def prompt_for(obj_name: str, point_format: PointFormat, template: str | None = None) -> str:
    """The question asking for points on ``obj_name`` (``template`` with ``{obj_name}``, or the default)."""
    return (template or PROMPTS[point_format]).format(obj_name=obj_name)


def parse_points(text: str, point_format: PointFormat, width: int, height: int) -> np.ndarray:
    """Normalized points ``(N, 2)`` from a model's answer; ``width`` x ``height`` is the image it saw.

    Points outside the image are dropped. Raises `ToolError` when the answer holds no point syntax.
    """
    chosen = point_format if point_format != "auto" else _detect_format(text)
    points: np.ndarray | None
    if chosen == "molmo":
        points = _molmo_points(text) / 100.0
    elif chosen == "pixels":
        points = _pixel_points(text) / np.array([width, height], dtype=np.float64)
    else:
        points = _tuples(text)
    if points is None or (not len(points) and not _EMPTY_LIST.search(text)):
        shown = " ".join(text.split())
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        raise ToolError(f"the pointing model's answer has no {chosen} points: {shown!r}")
    inside = np.all((points >= 0.0) & (points <= 1.0), axis=1)
    return points[inside].reshape(-1, 2)


def _detect_format(text: str) -> PointFormat:
    if _MOLMO_TAG.search(text):
        return "molmo"
    if "point_2d" in text:
        return "pixels"
    tuples = _tuples(text)
    if tuples is not None and len(tuples) and np.any(tuples > 1.0):
        return "pixels"
    return "normalized"


def _molmo_points(text: str) -> np.ndarray:
    points: list[tuple[float, float]] = []
    for tag in _MOLMO_TAG.finditer(text):
        coordinates: dict[str, dict[str, float]] = {}
        for axis, index, value in _MOLMO_ATTRIBUTE.findall(tag.group(1)):
            coordinates.setdefault(index, {})[axis.lower()] = float(value)
        points.extend((xy["x"], xy["y"]) for _, xy in sorted(coordinates.items()) if {"x", "y"} <= set(xy))
    return np.asarray(points, dtype=np.float64).reshape(-1, 2)


def _pixel_points(text: str) -> np.ndarray:
    """Qwen2.5-VL's JSON (``point_2d`` entries, possibly in a code fence) or plain pixel tuples."""
    match = _JSON_LIST.search(text)
    if match and "point_2d" in match.group(0):
        try:
            entries = json.loads(match.group(0))
        except json.JSONDecodeError:
            entries = None
        if isinstance(entries, list):
            points = [
                entry["point_2d"]
                for entry in entries
                if isinstance(entry, dict)
                and isinstance(entry.get("point_2d"), list)
                and len(entry["point_2d"]) == 2
                and all(isinstance(v, (int, float)) for v in entry["point_2d"])
            ]
            return np.asarray(points, dtype=np.float64).reshape(-1, 2)
    tuples = _tuples(text)
    return np.zeros((0, 2)) if tuples is None else tuples


def _tuples(text: str) -> np.ndarray | None:
    """Every ``(x, y)`` or ``[x, y]`` pair; ``None`` when there is neither a pair nor an empty list."""
    pairs = _TUPLE.findall(text)
    if not pairs:
        return np.zeros((0, 2)) if _EMPTY_LIST.search(text) else None
    return np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
