"""The expert's measuring steps: the calls it makes and how it reads their structured results.

Every reading comes from a tool result's ``value`` (never from its text). A reading that is missing
or not finite is None, and the plan decides what to do without it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spacetools.agent.policies.scripted.replay import Call, ToolOutcome, ToolReplay
from spacetools.rewards.formats import format_point, format_points

Point = tuple[float, float]
Vector = tuple[float, float, float]

DEPTH_WITH_CLOUD: Call = ("depth_estimator.estimate_depth_with_pointcloud", {"image_index": 0})
DEPTH: Call = ("depth_estimator.estimate_depth", {"image_index": 0})
REFERENCES = {
    "point_cloud": "$point_cloud",
    "mask": "$segmentation_mask",
    "focal_length_px": "$focal_length_px",
}
FIT_BOX: Call = ("bounding_box.compute_bbox", dict(REFERENCES))
FIT_GRASP: Call = ("grasp_generator.compute_grasp", {**REFERENCES, "image_index": 0})
CROP_MASK: Call = ("vision_ops.mask_crop", {"image_index": 0, "mask": "$segmentation_mask"})


def point_args(point: Point, image_index: int = 0) -> dict[str, Any]:
    """``x``, ``y`` and ``image_index`` arguments for a point-taking tool."""
    return {"x": round(point[0], 4), "y": round(point[1], 4), "image_index": image_index}


def index_at(variable: str, point: Point) -> Call:
    """``vision_ops.index_at`` on a stored array at a normalized point."""
    return ("vision_ops.index_at", {"data": f"${variable}", "u": round(point[0], 4), "v": round(point[1], 4)})


def detect(name: str, tool: str = "roborefer") -> Call:
    """``<tool>.detect_one`` of a referring expression on the user's image."""
    return (f"{tool}.detect_one", {"obj_name": name, "image_index": 0})


def segment_call(point: Point) -> Call:
    """``sam2.segment_from_point`` at a normalized point of the user's image."""
    return ("sam2.segment_from_point", point_args(point))


def _finite(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def points_of(outcome: ToolOutcome) -> list[Point]:
    """The points a pointing result reports (empty for an error)."""
    points = outcome.get("points") or []
    return [(float(p[0]), float(p[1])) for p in points if len(p) == 2 and _finite(p)]


def first_point(outcome: ToolOutcome) -> Point | None:
    """The first point a pointing result reports, if any."""
    points = points_of(outcome)
    return points[0] if points else None


def scalar(outcome: ToolOutcome) -> float | None:
    """An ``index_at`` reading of a scalar map (a depth in metres), if finite."""
    value = outcome.value
    return float(value) if not outcome.is_error and _finite([value]) else None


def vector3(outcome: ToolOutcome) -> Vector | None:
    """An ``index_at`` reading of a per-pixel point cloud (a 3D point), if finite."""
    value = outcome.value
    if outcome.is_error or not isinstance(value, list) or len(value) != 3 or not _finite(value):
        return None
    return (float(value[0]), float(value[1]), float(value[2]))


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """Scalar product of two 3-vectors."""
    return sum(x * y for x, y in zip(a, b, strict=True))


def unit(v: Sequence[float]) -> Vector:
    """``v`` scaled to length 1 (unchanged when it has none)."""
    norm = math.sqrt(dot(v, v)) or 1.0
    return (v[0] / norm, v[1] / norm, v[2] / norm)


@dataclass(frozen=True)
class Box3D:
    """An oriented box as ``compute_bbox`` reports it: 8 camera-frame corners and their image points."""

    corners_3d: list[Vector]
    corners_2d: list[Point]

    @property
    def centre(self) -> Vector:
        """Mean of the 8 corners (camera frame, metres)."""
        x, y, z = (sum(c[k] for c in self.corners_3d) / 8 for k in range(3))
        return (x, y, z)

    @property
    def up(self) -> Vector:
        """The box's up direction: corner ``i + 4`` is above corner ``i`` (BOP order)."""
        bottom, top = self.corners_3d[:4], self.corners_3d[4:]
        return unit([sum(t[k] - b[k] for t, b in zip(top, bottom, strict=True)) for k in range(3)])

    @property
    def footprint(self) -> tuple[float, float]:
        """The two sides of the bottom face (metres), shorter first."""
        c = self.corners_3d
        sides = sorted((math.dist(c[0], c[1]), math.dist(c[1], c[2])))
        return (sides[0], sides[1])


def read_box(outcome: ToolOutcome) -> Box3D | None:
    """The box of a ``bounding_box.compute_bbox`` result (None for an error or a malformed value)."""
    corners_3d, corners_2d = outcome.get("corners_3d"), outcome.get("corners_2d")
    if not (isinstance(corners_3d, list) and isinstance(corners_2d, list)):
        return None
    if len(corners_3d) != 8 or len(corners_2d) != 8:
        return None
    if not all(len(c) == 3 and _finite(c) for c in corners_3d) or not all(
        len(c) == 2 and _finite(c) for c in corners_2d
    ):
        return None
    return Box3D(
        [(float(x), float(y), float(z)) for x, y, z in corners_3d],
        [(float(u), float(v)) for u, v in corners_2d],
    )


def read_grasp(outcome: ToolOutcome) -> list[Point] | None:
    """The five projected gripper points of a ``compute_grasp`` result, if it succeeded."""
    points = outcome.get("points_2d")
    if (
        not isinstance(points, list)
        or len(points) != 5
        or not all(len(p) == 2 and _finite(p) for p in points)
    ):
        return None
    return [(float(u), float(v)) for u, v in points]


def read_crop_box(outcome: ToolOutcome, width: int, height: int) -> tuple[float, float, float, float] | None:
    """The normalized box of a ``vision_ops.mask_crop`` result (its pixel corners over the image size)."""
    box = outcome.get("box")
    if not isinstance(box, list) or len(box) != 4 or not _finite(box):
        return None
    x0, y0, x1, y1 = (float(v) for v in box)
    return (x0 / width, y0 / height, x1 / width, y1 / height)


def locate(
    replay: ToolReplay, names: Sequence[str], extra: Sequence[Call] = (), *, reserve: int = 1
) -> tuple[list[Point | None], list[ToolOutcome]]:
    """Point at each name with roborefer (plus ``extra`` calls in the same turn).

    As long as ``reserve`` tool turns stay free for what follows, one more turn asks the second
    pointing model for every name roborefer failed on or found nothing for, and repeats the failed
    ``extra`` calls. (The second model rather than roborefer again: the Toolshed seeds a call's
    randomness from its name and arguments, so a simulated failure repeats with the same call.)
    """
    # Each part only when it has a subject: BLINK depth locates no names, only measures the depth.
    aims = [f"find {' and '.join(f'the {n}' for n in names)} in the image"] if names else []
    aims += ["measure the scene's depth"] if extra else []
    thought = f"I need to {' and '.join(aims)}."
    results = replay.call(thought, *(detect(n) for n in names), *extra)
    points = [first_point(r) for r in results[: len(names)]]
    extras = results[len(names) :]
    missed = [k for k, p in enumerate(points) if p is None]
    failed = [k for k, r in enumerate(extras) if r.is_error]
    if (missed or failed) and replay.turns_left > reserve:
        again = replay.call(
            "Some calls failed or found nothing; I will ask again (the second pointing model for misses).",
            *(detect(names[k], "vlm") for k in missed),
            *(extra[k] for k in failed),
        )
        for k, outcome in zip(missed, again[: len(missed)], strict=True):
            points[k] = first_point(outcome)
        for k, outcome in zip(failed, again[len(missed) :], strict=True):
            extras[k] = outcome
    return points, extras


def segment(replay: ToolReplay, name: str, point: Point, *, reserve: int = 1) -> ToolOutcome:
    """Segment the object at ``point``; a failed call is repeated once while ``reserve`` turns stay free."""
    call = segment_call(point)
    segmented = replay.call(f"The {name} is at {format_point(point)}; I will segment it.", call)[0]
    if segmented.is_error and replay.turns_left > reserve:
        segmented = replay.call("Segmentation failed; I ask again.", call)[0]
    return segmented


def object_box(replay: ToolReplay, name: str, point: Point, *, reserve: int = 1) -> Box3D | None:
    """Segment the object at ``point`` and fit its 3D box (needs ``$point_cloud`` already stored)."""
    if replay.turns_left < 2 or segment(replay, name, point, reserve=reserve + 1).is_error:
        return None
    return read_box(replay.call(f"Now I fit the {name}'s oriented 3D box to its masked points.", FIT_BOX)[0])


PATCH_RADIUS = 0.012
"""Half-width of the patch read around a detected point (normalized; about 8 pixels of a 640-wide image):
inside most objects, wide enough that one pixel looking into an opening does not decide."""


def depth_patch(point: Point, radius: float = PATCH_RADIUS) -> list[Point]:
    """A 3x3 grid of points around ``point`` (``radius`` from it along each axis), within the image."""
    x, y = point
    return [
        (min(max(x + i * radius, 0.0), 1.0), min(max(y + j * radius, 0.0), 1.0))
        for j in (-1, 0, 1)
        for i in (-1, 0, 1)
    ]


def lift_points(points: Sequence[Point], depth: str) -> Call:
    """``vision_ops.project_2d_points_to_3d`` of normalized points on a stored depth map or point cloud."""
    return (
        "vision_ops.project_2d_points_to_3d",
        {"points_2d": format_points(points, 4), "depth": depth, "focal_length_px": "$focal_length_px"},
    )


def points_3d(outcome: ToolOutcome) -> list[Vector]:
    """The finite 3D points of a ``project_2d_points_to_3d`` result (empty for an error)."""
    points = outcome.get("points") or []
    return [
        (float(p[0]), float(p[1]), float(p[2]))
        for p in points
        if isinstance(p, list) and len(p) == 3 and _finite(p)
    ]


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median of the readings that came back, or None when none did."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
