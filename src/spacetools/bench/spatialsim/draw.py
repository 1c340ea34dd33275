"""Pictures: the A/B markers and boxes drawn into question images, and `show`'s ground-truth overlay."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from spacetools.bench.dataset import Sample, decode_mask

Color = tuple[int, int, int]
MARKER_RADIUS = 9
TRUTH_COLOR: Color = (0, 255, 0)
_NUMBER = r"-?\d+(?:\.\d+)?"


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _to_pixels(points: Sequence[Sequence[float]], size: tuple[int, int]) -> list[tuple[float, float]]:
    width, height = size
    return [(float(u) * width, float(v) * height) for u, v in points]


def draw_point_markers(
    image: np.ndarray, points: Sequence[Sequence[float]], labels: Sequence[str]
) -> np.ndarray:
    """Red circles at normalized points with a label beside each (BLINK's marked points)."""
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    font = _font(18)
    for (x, y), label in zip(_to_pixels(points, canvas.size), labels, strict=True):
        r = MARKER_RADIUS
        draw.ellipse((x - r, y - r, x + r, y + r), outline=(255, 0, 0), width=3)
        draw.text(
            (x + r + 2, y - r - 4),
            label,
            fill=(255, 0, 0),
            font=font,
            stroke_width=2,
            stroke_fill=(255, 255, 255),
        )
    return np.asarray(canvas)


def draw_labelled_boxes(
    image: np.ndarray, boxes: Sequence[Sequence[float]], colors: Sequence[Color]
) -> np.ndarray:
    """Normalized `[x1, y1, x2, y2]` boxes outlined in the given colours (CV-Bench highlights)."""
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    width, height = canvas.size
    for (x1, y1, x2, y2), color in zip(boxes, colors, strict=True):
        draw.rectangle((x1 * width, y1 * height, x2 * width, y2 * height), outline=color, width=3)
    return np.asarray(canvas)


def _numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(_NUMBER, text)]


def _draw_truth(canvas: Image.Image, family: str, truth: str) -> None:
    """Overlay the ground truth of one family on an RGBA copy of the question image."""
    draw = ImageDraw.Draw(canvas, "RGBA")
    width, height = canvas.size
    if truth.startswith("data:image/png"):
        mask = decode_mask(truth)
        overlay = np.zeros((*mask.shape, 4), dtype=np.uint8)
        overlay[mask] = (*TRUTH_COLOR, 110)
        canvas.alpha_composite(Image.fromarray(overlay, "RGBA"))
        return
    if family == "bopgrasp":
        points = _to_pixels(np.reshape(_numbers(truth), (-1, 2)), canvas.size)
        centre, left_base, right_base, left_tip, right_tip = points
        for segment in ((left_tip, left_base), (left_base, right_base), (right_base, right_tip)):
            draw.line(segment, fill=TRUTH_COLOR, width=3)
        draw.line(
            (centre, ((left_base[0] + right_base[0]) / 2, (left_base[1] + right_base[1]) / 2)),
            fill=TRUTH_COLOR,
            width=2,
        )
        for (x, y), label in zip(points, ("C", "LB", "RB", "LT", "RT"), strict=True):
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=(255, 255, 0))
            draw.text((x + 4, y - 8), label, fill=(255, 255, 0), font=_font(12))
        return
    if family == "detect2d":
        for x1, y1, x2, y2 in ast.literal_eval(truth):
            draw.rectangle((x1 * width, y1 * height, x2 * width, y2 * height), outline=TRUTH_COLOR, width=3)
        return
    if truth.startswith("[("):
        points = _to_pixels(ast.literal_eval(truth), canvas.size)
        if family == "boppose" and len(points) == 8:
            edges = [(i, (i + 1) % 4) for i in range(4)] + [(i + 4, (i + 1) % 4 + 4) for i in range(4)]
            edges += [(i, i + 4) for i in range(4)]
            for i, j in edges:
                draw.line((points[i], points[j]), fill=TRUTH_COLOR, width=2)
        for k, (x, y) in enumerate(points):
            draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=(*TRUTH_COLOR, 255), outline=(0, 0, 0))
            if family == "boppose":
                draw.text((x + 5, y - 6), str(k), fill=(255, 255, 0), font=_font(12))


def render_sample(sample: Sample, wrap: int = 90) -> Image.Image:
    """The sample's first image with its ground truth drawn on it, under a header with question and answer."""
    family = sample.data_source.removeprefix("spatialsim_")
    canvas = Image.fromarray(sample.images[0]).convert("RGBA")
    _draw_truth(canvas, family, sample.ground_truth)
    truth_text = "<mask>" if sample.ground_truth.startswith("data:") else sample.ground_truth
    lines = [f"{sample.data_source} #{sample.extra_info.get('index', '?')}"]
    lines += textwrap.wrap(sample.question.replace("\n", " | "), wrap)
    lines += textwrap.wrap(f"Ground truth: {truth_text}", wrap)
    font = _font(14)
    header = 18 * len(lines) + 10
    page = Image.new("RGB", (max(canvas.width, 8 * wrap), canvas.height + header), (255, 255, 255))
    ImageDraw.Draw(page).multiline_text((6, 5), "\n".join(lines), fill=(0, 0, 0), font=font, spacing=4)
    page.paste(canvas.convert("RGB"), (0, header))
    return page
