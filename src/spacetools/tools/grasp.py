"""`grasp_generator.compute_grasp`: parallel-jaw grasps sampled on the masked point cloud.

Candidates are sampled around the object (mostly from above, some from the side), each sized to the
object's width between the fingers, then filtered like the original GraspGen pipeline: top-down
filtering against gravity, then collision checks of the fingers and palm against the whole scene
cloud. The best-scoring survivor is returned as a 4x4 camera-frame pose (z: approach, x: closing,
origin: palm centre between the finger bases; see `spacetools.sim.gripper`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from spacetools.kit.definition import Tool, ToolContext, ToolError, ToolResult, Variable, tool_method
from spacetools.sim.gripper import FINGER_LENGTH, GRIPPER_MAX_WIDTH, gripper_points
from spacetools.tools.overlays import draw_gripper
from spacetools.tools.pointcloud import (
    SupportPlane,
    camera_up_fallback,
    estimate_support_plane,
    main_cluster,
    subsample,
)
from spacetools.tools.projection import (
    as_focal_length,
    as_mask,
    as_point_cloud,
    format_points,
    mask_selection,
    project_to_normalized,
    rows_all,
    valid_points,
)

NUM_CANDIDATES = 100
"""Grasps sampled per call (the original kept the top 100 of GraspGen's samples)."""
TOPDOWN_THRESHOLD = 0.5
"""Minimum cosine between a grasp's approach axis and gravity to survive top-down filtering."""
MAX_SCENE_POINTS = 8192
"""Scene points used for collision checks (the original downsampled to the same number)."""

FINGER_THICKNESS = 0.012
"""Finger size along the closing axis, metres."""
FINGER_DEPTH = 0.02
"""Finger size across the closing axis, metres."""
PALM_HEIGHT = 0.04
"""Palm size along the approach axis behind the finger bases, metres."""
CONTACT_CLEARANCE = 0.008
"""Opening added on each side of the object before closing, metres."""
COLLISION_MARGIN = 0.004
"""Points closer than this to a gripper part count as a collision, metres."""


@dataclass(frozen=True)
class Grasp:
    """A grasp: 4x4 pose in the camera frame, opening width (m) and confidence in [0, 1]."""

    pose: np.ndarray
    width: float
    confidence: float


@dataclass(frozen=True)
class GraspSearch:
    """The outcome of sampling and filtering: the best grasp and the counts the tool reports."""

    best: Grasp
    sampled: int
    collision_free: int


def _frame(approach: np.ndarray, closing: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """A 4x4 pose with z = approach, x = closing (made orthogonal, pointing image-right), y = z × x.

    The closing axis is flipped towards +x of the camera so the left finger (at -x) appears on the
    left of the image, the convention of the ground truth.
    """
    z = approach / np.linalg.norm(approach)
    x = closing - (closing @ z) * z
    x /= np.linalg.norm(x)
    if x[0] < 0:
        x = -x
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = x, np.cross(z, x), z, origin
    return pose


def _in_box(local: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Which local-frame points lie in the axis-aligned box [low, high] grown by the collision margin."""
    return rows_all((local >= low - COLLISION_MARGIN) & (local <= high + COLLISION_MARGIN))


def gripper_collides(pose: np.ndarray, width: float, points: np.ndarray) -> bool:
    """Whether any point is inside a finger (at ±(width/2) along x) or the palm (behind the bases)."""
    local = (points - pose[:3, 3]) @ pose[:3, :3]
    half = width / 2.0
    y_half = FINGER_DEPTH / 2.0
    finger_low = np.array([half, -y_half, 0.0])
    finger_high = np.array([half + FINGER_THICKNESS, y_half, FINGER_LENGTH])
    right = _in_box(local, finger_low, finger_high)
    left = _in_box(local * np.array([-1.0, 1.0, 1.0]), finger_low, finger_high)
    palm = _in_box(
        local,
        np.array([-half - FINGER_THICKNESS, -y_half, -PALM_HEIGHT]),
        np.array([half + FINGER_THICKNESS, y_half, -COLLISION_MARGIN]),
    )
    return bool(np.any(right | left | palm))


def within_reach(points: np.ndarray, grasps: list[Grasp], max_width: float) -> np.ndarray:
    """The points a gripper at any of the grasps could touch: those in the box around the grasps' origins
    grown by the farthest reach of a finger or the palm (so the collision checks read far fewer points)."""
    reach = float(
        np.linalg.norm(
            [max_width / 2.0 + FINGER_THICKNESS, FINGER_DEPTH / 2.0, max(FINGER_LENGTH, PALM_HEIGHT)]
        )
        + np.sqrt(3.0) * COLLISION_MARGIN
    )
    origins = np.array([g.pose[:3, 3] for g in grasps])
    low, high = origins.min(axis=0) - reach, origins.max(axis=0) + reach
    reachable: np.ndarray = points[rows_all((points >= low) & (points <= high))]
    return reachable


def _sample_approach(up: np.ndarray, toward_camera: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An approach direction: mostly from above (tilted up to 35°), sometimes from the camera's side."""
    down = -up
    side = toward_camera - (toward_camera @ up) * up
    side = side / np.linalg.norm(side) if np.linalg.norm(side) > 1e-6 else np.cross(up, [1.0, 0.0, 0.0])
    top_down = rng.random() < 0.75
    tilt = np.radians(rng.uniform(0.0, 35.0) if top_down else rng.uniform(55.0, 85.0))
    azimuth = rng.uniform(0.0, 2.0 * np.pi)
    lateral = np.cos(azimuth) * side + np.sin(azimuth) * np.cross(up, side)
    # Side approaches come from the visible side: push the lateral part away from the camera.
    if tilt > np.radians(45.0):
        lateral = -side
    approach: np.ndarray = np.cos(tilt) * down + np.sin(tilt) * lateral
    return approach


def _candidate(
    object_points: np.ndarray,
    approach: np.ndarray,
    closing_hint: np.ndarray,
    anchor: np.ndarray,
    max_width: float,
) -> Grasp | None:
    """Size and place one grasp; ``None`` when the object there is wider than the gripper or absent."""
    pose = _frame(approach, closing_hint, anchor)
    local = (object_points - anchor) @ pose[:3, :3]
    # The slab the fingers sweep: thin across the closing axis, generous along it so that an object
    # wider than the gripper shows up as too wide rather than being cut off.
    column = local[(np.abs(local[:, 1]) < FINGER_DEPTH / 2.0) & (np.abs(local[:, 0]) < max_width)]
    if len(column) < 10:
        return None
    # The finger tips reach past the first surface by most of a finger, but at most half way through.
    surface, far_side = (float(z) for z in np.percentile(column[:, 2], [2.0, 98.0]))
    reach = min(0.7 * FINGER_LENGTH, 0.5 * (far_side - surface))
    palm_z = surface + reach - FINGER_LENGTH
    between = column[(column[:, 2] > palm_z) & (column[:, 2] < palm_z + FINGER_LENGTH)]
    if len(between) < 10:
        return None
    x_low, x_high = np.percentile(between[:, 0], [1.0, 99.0])
    width = float(x_high - x_low) + 2.0 * CONTACT_CLEARANCE
    if width > max_width:
        return None
    centre_x = float(x_low + x_high) / 2.0
    origin = anchor + pose[:3, :3] @ np.array([centre_x, 0.0, palm_z])
    pose[:3, 3] = origin
    return Grasp(pose=pose, width=width, confidence=0.0)


def _confidence(grasp: Grasp, up: np.ndarray, centroid: np.ndarray, size: float, max_width: float) -> float:
    """A score in [0, 1]: vertical approach, snug opening, centred on the object."""
    verticality = float(np.clip(grasp.pose[:3, 2] @ -up, 0.0, 1.0))
    snug = 1.0 - grasp.width / max_width
    grip_centre = grasp.pose[:3, 3] + grasp.pose[:3, 2] * FINGER_LENGTH * 0.5
    offset = grip_centre - centroid
    offset -= (offset @ up) * up
    centred = float(np.exp(-np.linalg.norm(offset) / max(size, 1e-3)))
    return float(np.clip(0.45 * verticality + 0.25 * snug + 0.30 * centred, 0.0, 1.0))


def search_grasps(
    object_points: np.ndarray,
    scene_points: np.ndarray,
    rng: np.random.Generator,
    plane: SupportPlane | None = None,
    num_candidates: int = NUM_CANDIDATES,
    max_width: float = GRIPPER_MAX_WIDTH,
) -> GraspSearch:
    """Sample grasps on the object, filter them and return the best.

    Failures raise ``RuntimeError`` with the original GraspGen tool's messages, so the model reads
    ``Error: RuntimeError: No collision-free grasps found. …`` as in the reference traces.

    ``scene_points`` is everything except the object (table included); the object's own points also
    count for palm and finger collisions.
    """
    up = plane.normal if plane is not None else camera_up_fallback()
    centroid = object_points.mean(axis=0)
    horizontal = object_points - np.outer(object_points @ up, up)
    spread = horizontal - horizontal.mean(axis=0)
    _, _, vt = np.linalg.svd(spread, full_matrices=False)
    major = vt[0]
    size = float(np.linalg.norm(np.percentile(spread, 95, axis=0) - np.percentile(spread, 5, axis=0)))
    toward_camera = -centroid / np.linalg.norm(centroid)

    candidates: list[Grasp] = []
    for _ in range(num_candidates * 4):
        if len(candidates) == num_candidates:
            break
        approach = _sample_approach(up, toward_camera, rng)
        # Close across the object's major horizontal axis most of the time (the narrow way).
        base = np.cross(up, major) if rng.random() < 0.7 else major
        angle = rng.normal(0.0, 0.25)
        closing = np.cos(angle) * base + np.sin(angle) * np.cross(up, base)
        anchor = object_points[rng.integers(len(object_points))] * 0.3 + centroid * 0.7
        grasp = _candidate(object_points, approach, closing, anchor, max_width)
        if grasp is not None:
            candidates.append(grasp)
    if not candidates:
        raise RuntimeError(
            f"Grasp generation produced zero grasps: the object is wider than the gripper's maximum "
            f"opening ({max_width:.3f} m) everywhere."
        )
    upright = [g for g in candidates if g.pose[:3, 2] @ -up >= TOPDOWN_THRESHOLD]
    if not upright:
        raise RuntimeError(
            "Top-down filtering removed all grasps. No grasps have z-axis aligned with gravity vector "
            f"(threshold={TOPDOWN_THRESHOLD})."
        )
    obstacles = within_reach(np.concatenate([scene_points, object_points]), upright, max_width)
    free = [g for g in upright if not gripper_collides(g.pose, g.width, obstacles)]
    if not free:
        raise RuntimeError("No collision-free grasps found. All grasps collide with other objects.")
    scored = [Grasp(g.pose, g.width, _confidence(g, up, centroid, size, max_width)) for g in free]
    best = max(scored, key=lambda g: g.confidence)
    return GraspSearch(best=best, sampled=len(candidates), collision_free=len(free))


class GraspGeneratorTool(Tool):
    """Parallel-jaw grasp generation on a masked point cloud, collision-checked against the scene."""

    name: ClassVar[str] = "grasp_generator"

    def _search(
        self,
        object_points: np.ndarray,
        scene_points: np.ndarray,
        rng: np.random.Generator,
        plane: SupportPlane | None,
    ) -> GraspSearch:
        """The best grasp on the object; the hook a grasp server backend replaces."""
        return search_grasps(object_points, scene_points, rng, plane)

    @tool_method(geometry={"points_2d": "grasp"})
    def compute_grasp(
        self,
        point_cloud: np.ndarray,
        mask: np.ndarray,
        focal_length_px: Variable[float],
        image_index: int,
        *,
        ctx: ToolContext,
    ) -> ToolResult:
        """Generate a collision-free parallel-jaw grasp for the masked object.

        Text output: confidence, the number of masked points used and the five projected gripper
        points in normalized image coordinates (center, left finger base, right finger base, left
        finger tip, right finger tip). Stored variables: $grasp_pose (4x4, OpenCV camera frame).

        Args:
            point_cloud: Scene point cloud, (N, 3) array in the camera frame, e.g. "$point_cloud".
            mask: Boolean (H, W) mask of the object to grasp, e.g. "$segmentation_mask".
            focal_length_px: Camera focal length in pixels (square pixels), e.g. "$focal_length_px".
            image_index: Index of the image the point cloud was computed from.
        """
        cloud = as_point_cloud(point_cloud)
        mask_array = as_mask(mask)
        height, width = mask_array.shape
        focal = as_focal_length(focal_length_px, (height, width))
        image = ctx.image(image_index)
        if image.shape[:2] != (height, width):
            raise ToolError(
                f"mask shape {mask_array.shape} does not match image {image_index} "
                f"({image.shape[0]}x{image.shape[1]})"
            )
        selected = mask_selection(cloud, mask_array, focal)
        if not selected.any():
            raise RuntimeError("Mask removed all points; cannot generate grasp.")
        object_points = main_cluster(cloud[selected])
        rest = cloud[valid_points(cloud) & ~selected]
        plane = estimate_support_plane(object_points, rest)
        scene = (
            rest[ctx.rng.choice(len(rest), MAX_SCENE_POINTS, replace=False)]
            if len(rest) > MAX_SCENE_POINTS
            else rest
        )
        search = self._search(subsample(object_points, 4000), scene, ctx.rng, plane)
        best = search.best
        points_3d = gripper_points(best.pose, min(best.width, GRIPPER_MAX_WIDTH))
        points_2d = project_to_normalized(points_3d, focal, width, height)
        text = (
            f"Generated collision-free grasp with confidence {best.confidence:.3f} from "
            f"{int(selected.sum())}/{len(cloud)} masked points. "
            f"Filtered {search.sampled} → {search.collision_free} collision-free grasps. "
            f"Projected 2D gripper points: {format_points(points_2d)}"
        )
        if not (np.all(np.isfinite(best.pose)) and np.all(np.isfinite(points_2d))):
            raise ToolError("the grasp search gave a non-finite pose; check the point cloud and mask")
        value = {
            "confidence": float(best.confidence),
            "points_2d": points_2d.astype(float).tolist(),
            "labels": ["center", "left finger base", "right finger base", "left tip", "right tip"],
            "masked_points": int(selected.sum()),
            "total_points": len(cloud),
            "sampled": int(search.sampled),
            "collision_free": int(search.collision_free),
            "pose": best.pose.astype(float).tolist(),
        }
        return ToolResult(
            text=text,
            value=value,
            images=[draw_gripper(image, points_2d)],
            variables={"grasp_pose": best.pose},
        )
