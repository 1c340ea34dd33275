"""The pictures tools return for people (the paper's appendix B.2): markers, masks, depth, grippers.

They go into `ToolResult.images`; RL and evaluation show the model text only.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

_RED = (255, 0, 0)
_WHITE = (255, 255, 255)
_CYAN = (0, 255, 255)


def _to_pixels(points_2d: np.ndarray, width: int, height: int) -> list[tuple[float, float]]:
    return [(float(u) * width, float(v) * height) for u, v in np.asarray(points_2d).reshape(-1, 2)]


def draw_points(image: np.ndarray, points_2d: np.ndarray) -> np.ndarray:
    """Red dots with a white outline at normalized points."""
    picture = Image.fromarray(image)
    draw = ImageDraw.Draw(picture)
    radius = max(3, picture.width // 100)
    for x, y in _to_pixels(points_2d, picture.width, picture.height):
        draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=_RED, outline=_WHITE, width=1)
    return np.asarray(picture)


def draw_mask(image: np.ndarray, mask: np.ndarray, points_2d: np.ndarray | None = None) -> np.ndarray:
    """A translucent green mask with a white outline, plus the prompt points."""
    picture = image.astype(np.uint8, copy=True)
    # Half way to green on the masked pixels only, in integers: a float copy of a 16 Mpx photo is 200 MB.
    picture[mask] = ((picture[mask].astype(np.uint16) + np.array([0, 255, 0], np.uint16)) // 2).astype(
        np.uint8
    )
    outline = ndimage.binary_dilation(mask, iterations=2) & ~mask
    picture[outline] = _WHITE
    return picture if points_2d is None else draw_points(picture, points_2d)


def colorize_depth(depth: np.ndarray) -> np.ndarray:
    """A colourised depth map (near: warm, far: cool) with a "Depth (m)" scale bar on the right."""
    valid = depth[np.isfinite(depth) & (depth > 0)]
    near, far = np.percentile(valid, [1, 99]) if valid.size else (0.0, 1.0)
    scaled = np.clip((depth - near) / max(far - near, 1e-6), 0.0, 1.0)
    height, width = depth.shape
    bar_width = max(40, width // 8)
    canvas = np.full((height, width + bar_width, 3), 255, dtype=np.uint8)
    canvas[:, :width] = _ramp(scaled)
    gradient = np.linspace(0.0, 1.0, height)[:, None].repeat(bar_width // 3, axis=1)
    canvas[:, width + 4 : width + 4 + bar_width // 3] = _ramp(gradient)
    picture = Image.fromarray(canvas)
    draw = ImageDraw.Draw(picture)
    label_x = width + 6 + bar_width // 3
    draw.text((width + 2, 2), "Depth (m)", fill=(0, 0, 0))
    draw.text((label_x, 14), f"{near:.2f}", fill=(0, 0, 0))
    draw.text((label_x, height - 14), f"{far:.2f}", fill=(0, 0, 0))
    return np.asarray(picture)


def _ramp_exact(values: np.ndarray) -> np.ndarray:
    """Red (0) → yellow → cyan → blue (1), a turbo-like ramp without matplotlib."""
    stops = np.array([[220, 40, 30], [250, 220, 60], [60, 200, 220], [40, 60, 180]], dtype=np.float32)
    position = np.clip(values, 0.0, 1.0) * (len(stops) - 1)
    low = np.floor(position).astype(int).clip(0, len(stops) - 2)
    fraction = (position - low)[..., None]
    colours: np.ndarray = ((1 - fraction) * stops[low] + fraction * stops[low + 1]).astype(np.uint8)
    return colours


_RAMP_LEVELS = 1024
# The ramp looked up rather than interpolated per pixel (a depth picture is 300,000 pixels): 1,024
# levels are finer than the 8-bit colours they map to.
_RAMP_TABLE = _ramp_exact(np.linspace(0.0, 1.0, _RAMP_LEVELS))


def _ramp(values: np.ndarray) -> np.ndarray:
    """`_ramp_exact` of values in [0, 1] (clipped), by table."""
    levels = np.clip(values, 0.0, 1.0) * (_RAMP_LEVELS - 1)
    colours: np.ndarray = _RAMP_TABLE[np.rint(levels).astype(np.intp)]
    return colours


def draw_gripper(image: np.ndarray, points_2d: np.ndarray) -> np.ndarray:
    """The gripper's five points drawn as a U: centre to bases, bases to tips."""
    picture = Image.fromarray(image)
    draw = ImageDraw.Draw(picture)
    centre, left_base, right_base, left_tip, right_tip = _to_pixels(points_2d, picture.width, picture.height)
    for start, end in (
        (centre, left_base),
        (centre, right_base),
        (left_base, left_tip),
        (right_base, right_tip),
    ):
        draw.line([start, end], fill=_CYAN, width=3)
    return np.asarray(picture)
