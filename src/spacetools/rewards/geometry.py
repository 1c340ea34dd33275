"""Plane geometry for the scorers: hulls, box IoU and the pointing distance reward (NNDC).

Every function here takes points a model wrote and never raises on them: non-finite input scores 0,
and hulls are computed on coordinates moved into a unit square and snapped to a fine grid first, as
GEOS raises on denormal (``5e-324``) and nearly collinear input and areas overflow near ``1e308``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import shapely
from shapely.errors import GEOSException

from spacetools.rewards.formats import Box, Point

# exp(-5 * sqrt(2)): the raw NNDC term at the largest distance inside the unit image square.
_NNDC_FLOOR = math.exp(-5.0 * math.sqrt(2.0))


def nndc(distance: float) -> float:
    """Normalized negative-distance reward ``(exp(-5d) - exp(-5√2)) / (1 - exp(-5√2))``, clipped to [0, 1].

    ``distance`` is in normalized image coordinates: 1 at d = 0, 0 at the image diagonal and beyond.
    """
    value = (math.exp(-5.0 * max(distance, 0.0)) - _NNDC_FLOOR) / (1.0 - _NNDC_FLOOR)
    return min(max(value, 0.0), 1.0)


#: Decimals of the grid that hull coordinates are snapped to, in units of the point sets' extent.
_SNAP_DECIMALS = 12


def convex_hull(points: Sequence[Point]) -> shapely.Geometry:
    """The convex hull of ``points`` (a polygon, or a line or point when the points are degenerate)."""
    return shapely.MultiPoint([tuple(p) for p in points]).convex_hull


def _unit_frame(*point_sets: np.ndarray) -> list[np.ndarray] | None:
    """The point sets moved and scaled together into [-1, 1]² and snapped to a grid; None when they are
    not finite or have no extent. Area ratios (IoU) and containment are unchanged by the move."""
    both = np.vstack(point_sets)
    if not np.isfinite(both).all():
        return None
    # Powers of two scale exactly; halving first keeps the centre and the spans below overflow.
    magnitude = float(np.max(np.abs(both)))
    if magnitude == 0.0:
        return None
    exponent = int(np.frexp(magnitude)[1])
    scaled = [np.ldexp(points, -exponent) for points in point_sets]
    stacked = np.vstack(scaled)
    centre = (stacked.min(axis=0) + stacked.max(axis=0)) / 2.0
    extent = float(np.max(stacked.max(axis=0) - stacked.min(axis=0)))
    if extent == 0.0:
        return None
    exponent = int(np.frexp(extent)[1])
    return [np.round(np.ldexp(points - centre, -exponent), _SNAP_DECIMALS) for points in scaled]


def _as_points(points: Sequence[Point]) -> np.ndarray | None:
    array = np.asarray(points, dtype=float)
    return array if array.ndim == 2 and array.shape[1] == 2 and len(array) else None


def point_in_convex_hull(point: Point, points: Sequence[Point]) -> bool:
    """True when ``point`` lies inside the convex hull of ``points`` or on its boundary."""
    region, probe = _as_points(points), _as_points([point])
    if region is None or probe is None:
        return False
    frame = _unit_frame(region, probe)
    if frame is None:  # non-finite, or the point and the region are one and the same point
        return bool(np.isfinite(probe).all() and np.isfinite(region).all())
    try:
        return bool(convex_hull(frame[0].tolist()).covers(shapely.Point(frame[1][0])))
    except (GEOSException, ValueError):
        return False


def convex_hull_iou(first: Sequence[Point], second: Sequence[Point]) -> float:
    """Intersection over union of the convex hulls of two point sets (0 when either hull has no area,
    or the points are not finite)."""
    a, b = _as_points(first), _as_points(second)
    if a is None or b is None:
        return 0.0
    frame = _unit_frame(a, b)
    if frame is None:
        return 0.0
    try:
        hull_a, hull_b = convex_hull(frame[0].tolist()), convex_hull(frame[1].tolist())
        intersection = hull_a.intersection(hull_b).area
    except (GEOSException, ValueError):
        return 0.0
    union = hull_a.area + hull_b.area - intersection
    iou = float(intersection / union) if union > 0 else 0.0
    # The overlay's rounding can put identical hulls a hair above 1.
    return min(iou, 1.0) if math.isfinite(iou) else 0.0


def box_iou(first: Box, second: Box) -> float:
    """IoU of two axis-aligned boxes ``(x1, y1, x2, y2)`` with x1<=x2 and y1<=y2."""
    width = min(first[2], second[2]) - max(first[0], second[0])
    height = min(first[3], second[3]) - max(first[1], second[1])
    intersection = max(width, 0.0) * max(height, 0.0)
    area_a = (first[2] - first[0]) * (first[3] - first[1])
    area_b = (second[2] - second[0]) * (second[3] - second[1])
    union = area_a + area_b - intersection
    iou = float(intersection / union) if union > 0 else 0.0
    # Boxes near 1e308 overflow their areas to inf (and inf - inf is NaN): score them 0.
    return min(max(iou, 0.0), 1.0) if math.isfinite(iou) else 0.0


def mean_best_iou(predicted: Sequence[Box], truth: Sequence[Box]) -> float:
    """MIoU: the mean over predicted boxes of each one's best IoU with any true box (0 if either is empty)."""
    if not predicted or not truth:
        return 0.0
    return float(np.mean([max(box_iou(p, t) for t in truth) for p in predicted]))
