"""A sample's picture in the report: the image with the true (green) and predicted (red) answer drawn
in its format, the points the pointing tools reported (blue), and a zoomed view.

What is drawn follows the benchmark registry's drawing kind, and answers are read with
:mod:`spacetools.rewards.formats` only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from spacetools.bench.pages import printable
from spacetools.rewards import BENCHMARKS
from spacetools.rewards.formats import (
    BOX_CORNERS,
    BOX_EDGES,
    GRASP_EDGES,
    parse_boxes,
    parse_grasp,
    parse_points,
)
from spacetools.rewards.masks import load_mask

TRUTH = (20, 190, 80)
PREDICTED = (235, 40, 40)
TOOL_POINT = (40, 120, 255)
IMAGE_WIDTH = 400
Color = tuple[int, int, int]
Region = tuple[float, float, float, float]
#: The whole image, as a normalized ``(x0, y0, x1, y1)`` region.
FULL: Region = (0.0, 0.0, 1.0, 1.0)
#: A zoomed view is drawn only when what it shows spans less than this much of the image.
ZOOM_MAX_SPAN = 0.6
#: Kinds whose answer is written under the picture rather than drawn on it.
VERDICT_KINDS = ("yes_no", "choice", "text")


def answer_kind(data_source: str, ground_truth: str) -> str:
    """How to draw a sample: its benchmark's drawing kind (yes_no, choice, points, mask, corners, grasp,
    boxes), or ``text`` for a data source the registry does not know."""
    entry = BENCHMARKS.get(data_source)
    return entry.drawing(ground_truth) if entry is not None else "text"


def _pixels(
    points: Sequence[Sequence[float]], size: tuple[int, int], region: Region = FULL
) -> list[tuple[float, float]]:
    """Normalized image points as pixels of a canvas of ``size`` showing ``region`` of the image."""
    width, height = size
    x0, y0, x1, y1 = region
    return [((float(x) - x0) / (x1 - x0) * width, (float(y) - y0) / (y1 - y0) * height) for x, y in points]


def _dot(draw: ImageDraw.ImageDraw, point: tuple[float, float], color: Color, r: int = 4) -> None:
    x, y = point
    draw.ellipse([x - r, y - r, x + r, y + r], fill=color, outline=(255, 255, 255))


def _cross(draw: ImageDraw.ImageDraw, point: tuple[float, float], color: Color, r: int = 5) -> None:
    x, y = point
    draw.line([x - r, y, x + r, y], fill=color, width=2)
    draw.line([x, y - r, x, y + r], fill=color, width=2)


def crop(image: Image.Image, region: Region) -> Image.Image:
    """The part of ``image`` that ``region`` covers."""
    x0, y0, x1, y1 = region
    box = (
        round(x0 * image.width),
        round(y0 * image.height),
        round(x1 * image.width),
        round(y1 * image.height),
    )
    return image if box == (0, 0, image.width, image.height) else image.crop(box)


def _draw_mask(canvas: Image.Image, mask: np.ndarray, region: Region = FULL) -> Image.Image:
    """A translucent green fill and a solid outline of ``mask`` (its ``region``), resized to the canvas."""
    picture = crop(Image.fromarray(mask.astype(np.uint8) * 255), region)
    small = np.asarray(picture.resize(canvas.size, Image.Resampling.NEAREST)) > 0
    interior = small.copy()
    interior[1:-1, 1:-1] = (
        small[1:-1, 1:-1] & small[:-2, 1:-1] & small[2:, 1:-1] & small[1:-1, :-2] & small[1:-1, 2:]
    )
    pixels = np.asarray(canvas).astype(np.float32)
    pixels[small] = 0.65 * pixels[small] + 0.35 * np.array(TRUTH)
    pixels[small & ~interior] = TRUTH
    return Image.fromarray(pixels.astype(np.uint8))


def _visible(points: Sequence[Sequence[float]], limit: float = 1e4) -> list[tuple[float, float]]:
    """Points a canvas can take: a coordinate a model wrote as 1e300 would overflow the drawing."""
    return [(float(x), float(y)) for x, y in points if abs(x) < limit and abs(y) < limit]


def draw_geometry(
    draw: ImageDraw.ImageDraw,
    kind: str,
    text: str,
    color: Color,
    size: tuple[int, int],
    region: Region = FULL,
) -> None:
    """Draw what ``text`` says in the format of ``kind`` (nothing when it does not parse)."""
    if kind == "corners":
        parsed = parse_points(text)
        corners = _pixels(_visible(parsed), size, region)
        if len(parsed) == len(corners) == BOX_CORNERS:
            for a, b in BOX_EDGES:
                draw.line([corners[a], corners[b]], fill=color, width=2)
        for corner in corners:
            _dot(draw, corner, color, r=3)
    elif kind == "grasp":
        grasp = parse_grasp(text)
        if grasp is not None and len(_visible(grasp.tolist())) == len(grasp):
            points = _pixels(grasp.tolist(), size, region)
            for a, b in GRASP_EDGES:
                draw.line([points[a], points[b]], fill=color, width=3)
            _dot(draw, points[0], color)
    elif kind == "boxes":
        for x1, y1, x2, y2 in parse_boxes(text):
            if len(_visible([(x1, y1), (x2, y2)])) == 2:
                (left, top), (right, bottom) = _pixels([(x1, y1), (x2, y2)], size, region)
                draw.rectangle([left, top, right, bottom], outline=color, width=2)
    elif kind in ("points", "mask"):
        for point in _pixels(_visible(parse_points(text)), size, region):
            _dot(draw, point, color)


def annotate(
    image: np.ndarray,
    kind: str,
    answer: str,
    ground_truth: str,
    tool_points: Sequence[Sequence[float]] = (),
    width: int = IMAGE_WIDTH,
    region: Region = FULL,
) -> Image.Image:
    """The sample image (its ``region``, scaled to ``width``) with truth (green), prediction (red) and
    tool points (blue); yes/no and multiple-choice verdicts are written under it."""
    canvas = crop(Image.fromarray(image), region)
    canvas = canvas.resize(
        (width, max(1, round(canvas.height * width / canvas.width))), Image.Resampling.BILINEAR
    )
    if kind == "mask":
        # An unreadable mask is left out of the picture; the text cell still shows the row.
        with contextlib.suppress(ValueError, OSError):
            canvas = _draw_mask(canvas, load_mask(ground_truth), region)
    draw = ImageDraw.Draw(canvas)
    if kind != "mask":
        draw_geometry(draw, kind, ground_truth, TRUTH, canvas.size, region)
    for point in _pixels(_visible(tool_points), canvas.size, region):
        _cross(draw, point, TOOL_POINT)
    draw_geometry(draw, kind, answer, PREDICTED, canvas.size, region)
    if kind in VERDICT_KINDS:
        canvas = _with_banner(canvas, answer, ground_truth)
    return canvas


def _geometry_points(kind: str, text: str) -> list[tuple[float, float]]:
    """The normalized points an answer or a ground truth of ``kind`` draws (a mask: its bounding box)."""
    if kind == "grasp":
        grasp = parse_grasp(text)
        return [] if grasp is None else [(float(x), float(y)) for x, y in grasp.tolist()]
    if kind == "boxes":
        return [corner for x1, y1, x2, y2 in parse_boxes(text) for corner in ((x1, y1), (x2, y2))]
    if kind == "mask" and text.startswith("data:image"):
        with contextlib.suppress(ValueError, OSError):
            mask = load_mask(text)
            rows, cols = np.nonzero(mask)
            if rows.size:
                height, width = mask.shape
                return [
                    (cols.min() / width, rows.min() / height),
                    ((cols.max() + 1) / width, (rows.max() + 1) / height),
                ]
        return []
    if kind in ("corners", "points", "mask"):
        return parse_points(text)
    return []


def focus_region(kind: str, answer: str, ground_truth: str, margin: float = 0.06) -> Region | None:
    """A square (in normalized units, so undistorted) region around the answer and the truth, for a
    zoomed view; None when there is nothing to zoom on or it would cover most of the image."""
    points = [
        (x, y)
        for x, y in _geometry_points(kind, answer) + _geometry_points(kind, ground_truth)
        if 0.0 <= x <= 1.0 and 0.0 <= y <= 1.0
    ]
    return square_around(points, margin)


def square_around(points: Sequence[Sequence[float]], margin: float = 0.06) -> Region | None:
    """The smallest square region (normalized units) holding ``points`` plus ``margin``, inside the
    image; None for no points or a square wider than :data:`ZOOM_MAX_SPAN`."""
    if not points:
        return None
    xs, ys = [float(p[0]) for p in points], [float(p[1]) for p in points]
    side = max(max(xs) - min(xs), max(ys) - min(ys), 0.08) + 2 * margin
    if side > ZOOM_MAX_SPAN:
        return None
    x0 = min(max((min(xs) + max(xs) - side) / 2, 0.0), 1.0 - side)
    y0 = min(max((min(ys) + max(ys) - side) / 2, 0.0), 1.0 - side)
    return (x0, y0, x0 + side, y0 + side)


def _with_banner(canvas: Image.Image, answer: str, ground_truth: str) -> Image.Image:
    """The picture with a strip below it reading the answer (red) against the truth (green)."""
    font = ImageFont.load_default(size=15)
    strip = 24
    framed = Image.new("RGB", (canvas.width, canvas.height + strip), (255, 255, 255))
    framed.paste(canvas, (0, 0))
    draw = ImageDraw.Draw(framed)
    said = f"answer: {one_line(answer, 20)}"
    draw.text((6, canvas.height + 4), said, fill=PREDICTED, font=font)
    offset = 24 + draw.textlength(said, font=font)
    draw.text((offset, canvas.height + 4), f"truth: {one_line(ground_truth, 20)}", fill=TRUTH, font=font)
    return framed


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (printable), a clean prefix ending in "…" when longer than ``limit``."""
    flat = " ".join(printable(text).split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"
