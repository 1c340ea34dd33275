"""A sample's tool chain in the report: each call with its arguments, result text, status, latency and
the pictures it made, plus a zoomed drawing of the geometry a box fit or a grasp reported.

What is geometry, and where, is the tool's own declaration: each call record carries the keys of its
structured ``value`` that hold geometry and their kinds (``ToolCallRecord.geometry``, from the tool
method's ``@tool_method(geometry=…)``). The report reads those keys only: no tool names, no result text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from spacetools.agent.protocol import truncate_middle
from spacetools.bench.dataset import Sample
from spacetools.bench.report.drawing import FULL, TOOL_POINT, crop, draw_geometry, square_around
from spacetools.bench.report.images import ReportImages
from spacetools.rewards.formats import BOX_CORNERS, GRASP_LABELS, format_grasp, format_points

TOOL_IMAGE_WIDTH = 320
RESULT_CHARS = 600
#: How many points each declared geometry kind holds (None: any number).
POINT_COUNTS: dict[str, int | None] = {"points": None, "corners": BOX_CORNERS, "grasp": len(GRASP_LABELS)}
#: The kinds drawn as a zoomed picture in the call's row (``points`` go on the sample's picture), and
#: the picture's caption. A box fit returns no picture; a grasp's own is too small to read the gripper.
ZOOMED_CAPTIONS = {
    "corners": "the fitted box's image corners (zoomed, drawn by the report)",
    "grasp": "the grasp's gripper points (zoomed, drawn by the report)",
}

Points = list[tuple[float, float]]


def _value_points(value: Any, key: str, count: int | None = None) -> Points | None:
    """``value[key]`` as a list of finite 2D points (of ``count`` when given), or None."""
    if not isinstance(value, Mapping):
        return None
    try:
        points = np.asarray(value.get(key), dtype=float)
    except (TypeError, ValueError):
        return None
    if points.ndim != 2 or points.shape[1] != 2 or not np.isfinite(points).all():
        return None
    if count is not None and len(points) != count:
        return None
    return [(float(x), float(y)) for x, y in points]


def declared_geometry(call: Mapping[str, Any]) -> list[tuple[str, Points]]:
    """``(kind, points)`` for each key of a successful call's ``value`` its tool declared as geometry,
    where the value holds readable points of that kind (nothing for a failed call)."""
    declared = call.get("geometry")
    if call.get("is_error") or not isinstance(declared, Mapping):
        return []
    found = []
    for key, kind in declared.items():
        if isinstance(key, str) and isinstance(kind, str) and kind in POINT_COUNTS:
            points = _value_points(call.get("value"), key, POINT_COUNTS[kind])
            if points is not None:
                found.append((kind, points))
    return found


def tool_points(trajectory: Mapping[str, Any]) -> Sequence[tuple[float, float]]:
    """Every point the episode's calls reported as ``points`` geometry (the pointing tools')."""
    return [
        point
        for call in trajectory["tool_calls"]
        for kind, points in declared_geometry(call)
        if kind == "points"
        for point in points
    ]


def tool_geometry_picture(image: np.ndarray, kind: str, points: Points) -> tuple[Image.Image, str] | None:
    """A zoomed view of a box's corners or a grasp's gripper points on ``image``, drawn by the report,
    and its caption; None for the other kinds."""
    caption = ZOOMED_CAPTIONS.get(kind)
    if caption is None:
        return None
    text = format_grasp(points) if kind == "grasp" else format_points(points)
    region = square_around(points) or FULL
    canvas = crop(Image.fromarray(image), region)
    canvas = canvas.resize((TOOL_IMAGE_WIDTH, max(1, round(canvas.height * TOOL_IMAGE_WIDTH / canvas.width))))
    draw_geometry(ImageDraw.Draw(canvas), kind, text, TOOL_POINT, canvas.size, region)
    return canvas, caption


@dataclass(frozen=True)
class Picture:
    """A picture in the chain: its thumbnail, caption and full size's side file (None: none)."""

    url: str
    caption: str
    link: str | None = None


@dataclass(frozen=True)
class ChainRow:
    """One call as the chain's table shows it."""

    turn: int
    name: str
    arguments: str
    result: str
    is_error: bool
    latency_ms: float
    pictures: list[Picture]


def _call_pictures(
    row: Mapping[str, Any], call: Mapping[str, Any], sample: Sample | None, images: ReportImages
) -> list[Picture]:
    """A call's pictures: those the tool returned (a thumbnail, the stored picture a side file), then
    a zoomed view of each box or grasp it reported (:func:`tool_geometry_picture`)."""
    thumbnails = row.get("tool_images", [])
    first = int(row["trajectory"].get("task_image_count", 1))
    pictures = []
    for i in call.get("image_indices", []):
        if 0 <= i - first < len(thumbnails):
            url, link = images.tool_picture(thumbnails[i - first], f"{row['id']}-tool-{i - first}")
            pictures.append(Picture(url, f"{call['name']} returned this picture", link))
    if sample is not None:
        for kind, points in declared_geometry(call):
            drawn = tool_geometry_picture(sample.images[0], kind, points)
            if drawn is not None:
                pictures.append(Picture(images.thumbnail(drawn[0]), drawn[1]))
    return pictures


def tool_chain(row: Mapping[str, Any], sample: Sample | None, images: ReportImages) -> list[ChainRow]:
    """Each call of the episode: turn, tool, arguments, result text, status, latency and pictures."""
    return [
        ChainRow(
            turn=call["turn"],
            name=call["name"],
            arguments=json.dumps(call["arguments"]),
            result=truncate_middle(call["result_text"], RESULT_CHARS),
            is_error=bool(call["is_error"]),
            latency_ms=1000 * float(call["latency_s"]),
            pictures=_call_pictures(row, call, sample, images),
        )
        for call in row["trajectory"]["tool_calls"]
    ]
