"""Spatial relations between two objects from the camera's viewpoint, with ambiguity margins.

Left/right compare camera-frame x of the box centres, front/behind their camera-frame z (in front =
closer), above/below their world heights. Each answer needs a gap of at least the margin below,
otherwise the pair is ambiguous and `relation_holds` returns None.
"""

from __future__ import annotations

import numpy as np

from spacetools.sim.groundtruth import ObjectTruth

#: Metres between the two centres along the compared axis before a relation counts as clear.
LATERAL_MARGIN = 0.04
DEPTH_MARGIN = 0.05
HEIGHT_MARGIN = 0.03
#: Normalized image distance between mask centroids needed for a 2D (image) relation.
IMAGE_MARGIN = 0.05
#: Depth difference (metres) needed to call one point or object closer than another.
CLOSER_MARGIN = 0.05

RELATIONS = ("left of", "right of", "in front of", "behind", "above", "below")
OPPOSITE = {
    "left of": "right of",
    "right of": "left of",
    "in front of": "behind",
    "behind": "in front of",
    "above": "below",
    "below": "above",
}


def _signed_gap(a: ObjectTruth, b: ObjectTruth, relation: str) -> tuple[float, float]:
    """How far `a` is on the relation's side of `b` (positive when it holds), and the margin."""
    if relation in ("left of", "right of"):
        gap = float(b.position_camera[0] - a.position_camera[0])
        return (gap if relation == "left of" else -gap), LATERAL_MARGIN
    if relation in ("in front of", "behind"):
        gap = float(b.position_camera[2] - a.position_camera[2])
        return (gap if relation == "in front of" else -gap), DEPTH_MARGIN
    height_a = float(np.mean(a.obb_corners_world[:, 2]))
    height_b = float(np.mean(b.obb_corners_world[:, 2]))
    gap = height_a - height_b
    return (gap if relation == "above" else -gap), HEIGHT_MARGIN


def relation_holds(a: ObjectTruth, b: ObjectTruth, relation: str) -> bool | None:
    """Whether `a` is `relation` `b`; None when the gap is inside the margin."""
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; expected one of {RELATIONS}")
    gap, margin = _signed_gap(a, b, relation)
    if abs(gap) < margin:
        return None
    return gap > 0


def image_relation(a: ObjectTruth, b: ObjectTruth) -> str | None:
    """The clearest 2D relation of `a` to `b` in the image (left/right/above/below), or None if unclear."""
    du, dv = (np.asarray(a.centroid_2d) - np.asarray(b.centroid_2d)).tolist()
    if max(abs(du), abs(dv)) < IMAGE_MARGIN or abs(abs(du) - abs(dv)) < IMAGE_MARGIN:
        return None  # too close, or diagonal so that both readings are plausible
    if abs(du) > abs(dv):
        return "left" if du < 0 else "right"
    return "above" if dv < 0 else "below"


def mask_depth(truth: ObjectTruth, depth: np.ndarray) -> float:
    """Median depth of an object's visible pixels (what a viewer judges closeness by)."""
    return float(np.median(depth[truth.mask]))
