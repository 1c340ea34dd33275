"""Plane geometry for the scorers: hulls, box IoU and the pointing distance reward (NNDC)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import shapely

from spacetools.rewards.formats import Box, Point

# exp(-5 * sqrt(2)): the raw NNDC term at the largest distance inside the unit image square.
_NNDC_FLOOR = math.exp(-5.0 * math.sqrt(2.0))


def nndc(distance: float) -> float:
    """Normalized negative-distance reward ``(exp(-5d) - exp(-5√2)) / (1 - exp(-5√2))``, clipped to [0, 1].

    ``distance`` is in normalized image coordinates: 1 at d = 0, 0 at the image diagonal and beyond.
    """
    value = (math.exp(-5.0 * max(distance, 0.0)) - _NNDC_FLOOR) / (1.0 - _NNDC_FLOOR)
    return min(max(value, 0.0), 1.0)


def convex_hull(points: Sequence[Point]) -> shapely.Geometry:
    """The convex hull of ``points`` (a polygon, or a line or point when the points are degenerate)."""
    return shapely.MultiPoint([tuple(p) for p in points]).convex_hull


def point_in_convex_hull(point: Point, points: Sequence[Point]) -> bool:
    """True when ``point`` lies inside the convex hull of ``points`` or on its boundary."""
    if not points:
        return False
    return bool(convex_hull(points).covers(shapely.Point(point)))


def convex_hull_iou(first: Sequence[Point], second: Sequence[Point]) -> float:
    """Intersection over union of the convex hulls of two point sets (0 when either hull has no area)."""
    if not first or not second:
        return 0.0
    hull_a, hull_b = convex_hull(first), convex_hull(second)
    intersection = hull_a.intersection(hull_b).area
    union = hull_a.area + hull_b.area - intersection
    # The overlay's rounding can put identical hulls a hair above 1.
    return min(float(intersection / union), 1.0) if union > 0 else 0.0


def box_iou(first: Box, second: Box) -> float:
    """IoU of two axis-aligned boxes ``(x1, y1, x2, y2)`` with x1<=x2 and y1<=y2."""
    width = min(first[2], second[2]) - max(first[0], second[0])
    height = min(first[3], second[3]) - max(first[1], second[1])
    intersection = max(width, 0.0) * max(height, 0.0)
    area_a = (first[2] - first[0]) * (first[3] - first[1])
    area_b = (second[2] - second[0]) * (second[3] - second[1])
    union = area_a + area_b - intersection
    return float(intersection / union) if union > 0 else 0.0


def mean_best_iou(predicted: Sequence[Box], truth: Sequence[Box]) -> float:
    """MIoU: the mean over predicted boxes of each one's best IoU with any true box (0 if either is empty)."""
    if not predicted or not truth:
        return 0.0
    return float(np.mean([max(box_iou(p, t) for t in truth) for p in predicted]))
