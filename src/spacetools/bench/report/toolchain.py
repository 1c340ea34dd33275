"""A sample's tool chain in the report: each call with its arguments, result text, status, latency and
the pictures it made, plus a zoomed drawing of the geometry a box fit or a grasp reported.

Geometry comes from a call's structured ``value`` (``ToolResult.value``: ``points``, ``corners_2d``,
``points_2d``); rows written before calls recorded it are read from the result text with the answer
readers of :mod:`spacetools.rewards.formats`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from spacetools.agent.protocol import truncate_middle
from spacetools.bench.dataset import Sample
from spacetools.bench.report.drawing import (
    FULL,
    TOOL_POINT,
    crop,
    draw_geometry,
    printable,
    square_around,
)
from spacetools.bench.report.images import ReportImages
from spacetools.rewards.formats import BOX_CORNERS, GRASP_LABELS, format_grasp, format_points, parse_points

TOOL_IMAGE_WIDTH = 320
RESULT_CHARS = 600
POINTING_TOOLS = ("roborefer.detect_one", "roborefer.detect_all", "vlm.detect_one", "vlm.detect_all")
BOX_TOOL = "bounding_box.compute_bbox"
GRASP_TOOL = "grasp_generator.compute_grasp"
# Where the points follow in result texts written before tools returned structured values.
_BOX_2D_LABEL = "Corners in normalized image coordinates:"
_GRASP_2D_LABEL = "Projected 2D gripper points:"

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


def _text_points(text: str, label: str, count: int) -> Points | None:
    """The ``count`` points on the line after ``label`` in an older result text, or None."""
    _, found, rest = text.partition(label)
    points = parse_points(rest.split("\n", 1)[0]) if found else []
    return points if len(points) == count else None


def pointed_points(call: Mapping[str, Any]) -> Points:
    """The points a pointing tool call reported (empty for other calls and failed ones)."""
    if call["name"] not in POINTING_TOOLS or call["is_error"]:
        return []
    from_value = _value_points(call.get("value"), "points")
    return from_value if from_value is not None else parse_points(call["result_text"])


def tool_geometry(name: str, result_text: str, value: Any = None) -> tuple[str, Points] | None:
    """``("corners", 8 points)`` for a box fit, ``("grasp", 5 points)`` for a grasp, else None."""
    if name == BOX_TOOL:
        corners = _value_points(value, "corners_2d", BOX_CORNERS) or _text_points(
            result_text, _BOX_2D_LABEL, BOX_CORNERS
        )
        return ("corners", corners) if corners is not None else None
    if name == GRASP_TOOL:
        count = len(GRASP_LABELS)
        grasp = _value_points(value, "points_2d", count) or _text_points(result_text, _GRASP_2D_LABEL, count)
        return ("grasp", grasp) if grasp is not None else None
    return None


def tool_geometry_picture(
    image: np.ndarray, name: str, result_text: str, value: Any = None
) -> tuple[Image.Image, str] | None:
    """A zoomed view of the geometry a box fit or a grasp reports (its structured ``value``, else its
    result text), drawn by the report (a box fit returns no picture; a grasp's own picture is too
    small to read the gripper), and its caption; None for other tools or no readable geometry."""
    geometry = tool_geometry(name, result_text, value)
    if geometry is None:
        return None
    kind, points = geometry
    if kind == "grasp":
        text, caption = format_grasp(points), "the grasp's gripper points (zoomed, drawn by the report)"
    else:
        text, caption = format_points(points), "the fitted box's image corners (zoomed, drawn by the report)"
    region = square_around(points) or FULL
    canvas = crop(Image.fromarray(image), region)
    canvas = canvas.resize((TOOL_IMAGE_WIDTH, max(1, round(canvas.height * TOOL_IMAGE_WIDTH / canvas.width))))
    draw_geometry(ImageDraw.Draw(canvas), kind, text, TOOL_POINT, canvas.size, region)
    return canvas, caption


Picture = tuple[str, str, str | None]  # data URL, caption, the full size's side file


def _tool_pictures(
    row: Mapping[str, Any], sample: Sample | None, images: ReportImages
) -> list[list[Picture]]:
    """Per tool call, its pictures: those the tool returned (a thumbnail, the stored picture a side
    file), then for a box fit or a grasp a zoomed view of its geometry (:func:`tool_geometry_picture`)."""
    trajectory = row["trajectory"]
    thumbnails = row.get("tool_images", [])
    first = int(trajectory.get("task_image_count", 1))
    pictures: list[list[Picture]] = []
    for call in trajectory["tool_calls"]:
        indices = [i - first for i in call.get("image_indices", []) if 0 <= i - first < len(thumbnails)]
        shown: list[Picture] = []
        for i in indices:
            url, link = images.tool_picture(thumbnails[i], f"{row['id']}-tool-{i}")
            shown.append((url, f"{call['name']} returned this picture", link))
        if sample is not None and not call["is_error"]:
            drawn = tool_geometry_picture(
                sample.images[0], call["name"], call["result_text"], call.get("value")
            )
            if drawn is not None:
                shown.append((images.thumbnail(drawn[0]), drawn[1], None))
        pictures.append(shown)
    return pictures


def escape(text: str) -> str:
    """HTML-escaped, printable text (see :func:`~spacetools.bench.report.drawing.printable`)."""
    return html.escape(printable(text))


def _picture_html(url: str, caption: str, link: str | None) -> str:
    """A picture in the chain, opening its full size on a click when it has a side file."""
    picture = f"<img class='thumb' src='{url}' alt='{escape(caption)}' title='{escape(caption)}'>"
    return f"<a href='{escape(link)}' target='_blank'>{picture}</a>" if link else picture


def tool_chain_html(row: Mapping[str, Any], sample: Sample | None, images: ReportImages | None = None) -> str:
    """Each call of the episode: turn, tool, arguments, result text, status, latency and pictures."""
    trajectory = row["trajectory"]
    if not trajectory["tool_calls"]:
        return "<p class='muted'>no tool calls</p>"
    images = images if images is not None else ReportImages(side_files=False)
    rows = []
    for call, pictures in zip(trajectory["tool_calls"], _tool_pictures(row, sample, images), strict=True):
        status = "<span class='err'>error</span>" if call["is_error"] else "ok"
        thumbnails = "".join(_picture_html(*picture) for picture in pictures)
        rows.append(
            "<tr>"
            f"<td>{call['turn']}</td><td><code>{escape(call['name'])}</code></td>"
            f"<td><code>{escape(json.dumps(call['arguments']))}</code></td>"
            f"<td><pre>{escape(truncate_middle(call['result_text'], RESULT_CHARS))}</pre></td>"
            f"<td>{status}</td><td>{1000 * float(call['latency_s']):.0f} ms</td><td>{thumbnails}</td>"
            "</tr>"
        )
    # Rows written before calls recorded their pictures: show the pictures together after the chain.
    unplaced = ""
    if row.get("tool_images") and not any(call.get("image_indices") for call in trajectory["tool_calls"]):
        for i, stored in enumerate(row["tool_images"]):
            url, link = images.tool_picture(stored, f"{row['id']}-tool-{i}")
            unplaced += _picture_html(url, "tool picture", link)
    return (
        "<table class='chain'><colgroup><col style='width:40px'><col style='width:150px'>"
        "<col style='width:190px'><col><col style='width:40px'><col style='width:64px'>"
        "<col style='width:330px'></colgroup><tr><th>turn</th><th>tool</th><th>arguments</th>"
        "<th>result</th><th></th><th>latency</th><th>picture</th></tr>"
        + "".join(rows)
        + "</table>"
        + unplaced
    )


def tool_points(trajectory: Mapping[str, Any]) -> Sequence[tuple[float, float]]:
    """Every point the episode's pointing tools reported."""
    return [point for call in trajectory["tool_calls"] for point in pointed_points(call)]
