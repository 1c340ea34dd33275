"""Pictures: the A/B markers and boxes drawn into question images, and `show`'s ground-truth overlay."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import shapely
from PIL import Image, ImageDraw, ImageFont

from spacetools.bench.dataset import Sample
from spacetools.kit.imagecodec import decode_mask
from spacetools.rewards.benchmarks import SPATIALSIM_PREFIX
from spacetools.rewards.formats import BOX_EDGES, GRASP_EDGES, parse_boxes, parse_grasp, parse_points

Color = tuple[int, int, int]
MARKER_RADIUS = 9
TRUTH_COLOR: Color = (0, 255, 0)
#: `show` magnifies a drawn ground truth that fits in half the image height: by up to this factor, with
#: this many pixels of context around it, beside the image (this gap apart).
ZOOM_MAX = 4.0
ZOOM_PADDING = 24
ZOOM_GAP = 10
PixelBox = tuple[float, float, float, float]


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _to_pixels(
    points: Sequence[Sequence[float]] | np.ndarray, size: tuple[int, int]
) -> list[tuple[float, float]]:
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


def _extent(points: Sequence[tuple[float, float]]) -> PixelBox:
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return min(xs), min(ys), max(xs), max(ys)


def _draw_truth(canvas: Image.Image, family: str, truth: str) -> PixelBox | None:
    """Overlay the ground truth of one family on an RGBA copy of the question image.

    Returns the pixel box of what was drawn (None for answers that are not drawn, like option letters).
    """
    draw = ImageDraw.Draw(canvas, "RGBA")
    width, height = canvas.size
    if truth.startswith("data:image/png"):
        mask = decode_mask(truth)
        if mask.shape != (height, width):  # a magnified canvas: every mask pixel becomes a block
            mask = np.asarray(Image.fromarray(mask).resize((width, height), Image.Resampling.NEAREST))
        overlay = np.zeros((*mask.shape, 4), dtype=np.uint8)
        overlay[mask] = (*TRUTH_COLOR, 110)
        canvas.alpha_composite(Image.fromarray(overlay, "RGBA"))
        ys, xs = np.nonzero(mask)
        return (
            (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)) if len(xs) else None
        )
    grasp = parse_grasp(truth) if family == "bopgrasp" else None
    if grasp is not None:
        points = _to_pixels(grasp, canvas.size)
        centre, left_base, right_base = points[:3]
        for i, j in GRASP_EDGES:
            draw.line((points[i], points[j]), fill=TRUTH_COLOR, width=3)
        draw.line(
            (centre, ((left_base[0] + right_base[0]) / 2, (left_base[1] + right_base[1]) / 2)),
            fill=TRUTH_COLOR,
            width=2,
        )
        for (x, y), label in zip(points, ("C", "LB", "RB", "LT", "RT"), strict=True):
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=(255, 255, 0))
            draw.text((x + 4, y - 8), label, fill=(255, 255, 0), font=_font(12))
        return _extent(points)
    if family == "detect2d":
        corners: list[tuple[float, float]] = []
        for x1, y1, x2, y2 in parse_boxes(truth):
            draw.rectangle((x1 * width, y1 * height, x2 * width, y2 * height), outline=TRUTH_COLOR, width=3)
            corners += [(x1 * width, y1 * height), (x2 * width, y2 * height)]
        return _extent(corners) if corners else None
    if points := _to_pixels(parse_points(truth), canvas.size):
        if family == "robospatial" and len(points) >= 3:
            # Vacant space is scored by the convex hull of the listed points: shade it.
            hull = shapely.MultiPoint(points).convex_hull
            if isinstance(hull, shapely.Polygon):
                shade = Image.new("RGBA", canvas.size)  # drawn apart and blended: RGBA drawing overwrites
                ImageDraw.Draw(shade).polygon(list(hull.exterior.coords), fill=(*TRUTH_COLOR, 90))
                canvas.alpha_composite(shade)
                draw.polygon(list(hull.exterior.coords), outline=TRUTH_COLOR)
        if family == "boppose" and len(points) == 8:
            for i, j in BOX_EDGES:
                draw.line((points[i], points[j]), fill=TRUTH_COLOR, width=2)
        for k, (x, y) in enumerate(points):
            draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=(*TRUTH_COLOR, 255), outline=(0, 0, 0))
            if family == "boppose":
                draw.text((x + 5, y - 6), str(k), fill=(255, 255, 0), font=_font(12))
        return _extent(points)
    return None


def _zoomed(image: Image.Image, family: str, truth: str, box: PixelBox | None) -> Image.Image | None:
    """A magnified view around a small ground truth, drawn again at that scale (markers keep their size).

    None when there is nothing drawn or it is large enough to check as is.
    """
    if box is None:
        return None
    x1, y1, x2, y2 = box
    side = max(x2 - x1, y2 - y1) + 2 * ZOOM_PADDING
    if side > image.height / 2:
        return None
    scale = min(ZOOM_MAX, image.height / side)
    # Nearest neighbour: every rendered pixel stays a visible square, so masks can be checked pixel by pixel.
    big = image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.NEAREST)
    big = big.convert("RGBA")
    _draw_truth(big, family, truth)
    left = float(np.clip((x1 + x2 - side) / 2, 0, image.width - side)) * scale
    top = float(np.clip((y1 + y2 - side) / 2, 0, image.height - side)) * scale
    return big.crop((round(left), round(top), round(left + side * scale), round(top + side * scale)))


def render_sample(sample: Sample, wrap: int = 90) -> Image.Image:
    """The sample's first image with its ground truth drawn on it, under a header with question and answer.

    A small ground truth (a grasp, the corners of a small object) also gets a magnified view on the right.
    """
    family = sample.data_source.removeprefix(SPATIALSIM_PREFIX)
    image = Image.fromarray(sample.images[0])
    canvas = image.convert("RGBA")
    zoom = _zoomed(image, family, sample.ground_truth, _draw_truth(canvas, family, sample.ground_truth))
    truth_text = "<mask>" if sample.ground_truth.startswith("data:") else sample.ground_truth
    lines = [f"{sample.data_source} #{sample.extra_info.get('index', '?')}"]
    lines += textwrap.wrap(sample.question.replace("\n", " | "), wrap)
    lines += textwrap.wrap(f"Ground truth: {truth_text}", wrap)
    font = _font(14)
    header = 18 * len(lines) + 10
    images_width = canvas.width + (zoom.width + ZOOM_GAP if zoom is not None else 0)
    height = canvas.height + header
    page = Image.new("RGB", (max(images_width, 8 * wrap), height), (255, 255, 255))
    ImageDraw.Draw(page).multiline_text((6, 5), "\n".join(lines), fill=(0, 0, 0), font=font, spacing=4)
    page.paste(canvas.convert("RGB"), (0, header))
    if zoom is not None:
        page.paste(zoom.convert("RGB"), (canvas.width + ZOOM_GAP, header))
    return page
