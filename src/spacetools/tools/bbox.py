"""`bounding_box.compute_bbox`: a robust, gravity-aligned oriented 3D box from masked points.

The fit keeps the object's main cluster, finds the table plane around it (RANSAC) and fits the
minimum-area rectangle of the object's footprint on that plane, from the table up to the object's
top; when the camera-facing outline of that footprint is a circular arc (a ball, a cylinder), the
hidden far half is completed to the whole circle. Without a plane it falls back to PCA. Corners follow the BOP-ASK order: bottom face then top
face, each counter-clockwise seen from above, corner ``i + 4`` above corner ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import shapely
from scipy.spatial import ConvexHull, QhullError

from spacetools.kit.definition import Tool, ToolContext, ToolError, ToolResult, Variable, tool_method
from spacetools.tools.pointcloud import (
    SupportPlane,
    camera_up_fallback,
    estimate_support_plane,
    main_cluster,
)
from spacetools.tools.projection import (
    as_focal_length,
    as_mask,
    as_point_cloud,
    finite_rows,
    mask_selection,
    project_to_normalized,
)

BOX_EDGES: list[tuple[int, int]] = [
    (0, 1), (1, 2), (2, 3), (3, 0),
    (4, 5), (5, 6), (6, 7), (7, 4),
    (0, 4), (1, 5), (2, 6), (3, 7),
]  # fmt: skip
"""The 12 edges as corner index pairs: bottom face, top face, verticals."""

# An object whose lowest visible point is this close to the table is taken to rest on it: its
# hidden bottom is the table itself.
_RESTING_GAP_M = 0.03
# Points this close to the table are mask bleed onto the table, not the object.
_TABLE_BLEED_M = 0.004
# Trimmed extremes make the box robust to the last few noisy points.
_TRIM_PERCENT = 0.5
# A footprint outline whose camera-facing side stays this close (relative RMS) to a circle is round.
_ROUND_RESIDUAL = 0.02
# The fitted circle must also span the visible width across the view: radius / half-width in this band.
_ROUND_RADIUS_BAND = (0.8, 1.25)
# Outline samples along the footprint hull for the circle test.
_OUTLINE_SAMPLES = 240


@dataclass(frozen=True)
class OrientedBox:
    """An oriented box: 8 corners (BOP order), its axes (columns: length, width, height), extent."""

    corners: np.ndarray
    axes: np.ndarray
    extent: np.ndarray
    gravity_aligned: bool

    @property
    def center(self) -> np.ndarray:
        """The box centre."""
        centre: np.ndarray = self.corners.mean(axis=0)
        return centre

    @property
    def volume(self) -> float:
        """The box volume, cubic metres."""
        return float(np.prod(self.extent))


def box_corners(origin: np.ndarray, axes: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The 8 corners of the box ``origin + axes @ [low, high]`` in BOP order.

    ``axes`` columns are a right-handed frame whose third axis is "up", so the corner sequence
    (-,-), (+,-), (+,+), (-,+) runs counter-clockwise seen from above.
    """
    footprint = [(low[0], low[1]), (high[0], low[1]), (high[0], high[1]), (low[0], high[1])]
    local = [(a, b, low[2]) for a, b in footprint] + [(a, b, high[2]) for a, b in footprint]
    corners: np.ndarray = origin + np.asarray(local) @ axes.T
    return corners


def min_area_rectangle(points_2d: np.ndarray) -> tuple[float, np.ndarray]:
    """The angle of the minimum-area enclosing rectangle of 2D points, and its two unit axes (2x2 columns)."""
    rectangle = shapely.MultiPoint(points_2d).minimum_rotated_rectangle
    if not isinstance(rectangle, shapely.Polygon):
        # Degenerate (collinear) footprint: align with its principal direction.
        direction = np.linalg.svd(points_2d - points_2d.mean(axis=0), full_matrices=False)[2][0]
        angle = float(np.arctan2(direction[1], direction[0]))
        return angle, _rotation_2d(angle)
    corners = np.asarray(rectangle.exterior.coords)
    edge = corners[1] - corners[0]
    angle = float(np.mod(np.arctan2(edge[1], edge[0]), np.pi / 2))
    return angle, _rotation_2d(angle)


def _rotation_2d(angle: float) -> np.ndarray:
    """Columns are the unit axes at ``angle`` and ``angle + 90°``."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])


@dataclass(frozen=True)
class Circle:
    """A circle in the plane: centre (2,) and radius."""

    centre: np.ndarray
    radius: float


def fit_circle(points_2d: np.ndarray) -> tuple[Circle, float]:
    """The least-squares (Kåsa) circle through 2D points and its relative RMS radial residual."""
    design = np.column_stack([2 * points_2d, np.ones(len(points_2d))])
    target = (points_2d**2).sum(axis=1)
    (cx, cy, c), *_ = np.linalg.lstsq(design, target, rcond=None)
    centre = np.array([cx, cy])
    radius = float(np.sqrt(max(c + cx**2 + cy**2, 0.0)))
    if radius == 0.0:
        return Circle(centre, radius), np.inf
    residual = np.linalg.norm(points_2d - centre, axis=1) - radius
    return Circle(centre, radius), float(np.sqrt(np.mean(residual**2)) / radius)


def round_footprint(planar: np.ndarray, camera_foot: np.ndarray) -> Circle | None:
    """The full circular footprint of a round object seen from one side, or ``None`` if it is not round.

    Only the camera-facing half of the footprint outline is seen whole; for a round object (ball,
    cylinder, mug body) it is an arc of the full circle, for a box it is one or two straight edges.
    """
    try:
        hull = planar[ConvexHull(planar).vertices]
    except (QhullError, ValueError):
        return None
    closed = np.vstack([hull, hull[:1]])
    lengths = np.linalg.norm(np.diff(closed, axis=0), axis=1)
    along = np.concatenate([[0.0], np.cumsum(lengths)])
    stations = np.linspace(0.0, along[-1], _OUTLINE_SAMPLES, endpoint=False)
    outline = np.column_stack([np.interp(stations, along, closed[:, k]) for k in range(2)])
    centroid = planar.mean(axis=0)
    towards_camera = camera_foot - centroid
    distance = float(np.linalg.norm(towards_camera))
    if distance < 1e-6:
        return None  # Seen straight from above: the whole footprint is visible, nothing to complete.
    towards_camera /= distance
    near = outline[(outline - centroid) @ towards_camera > 0]
    if len(near) < 8:
        return None
    circle, residual = fit_circle(near)
    across = np.array([-towards_camera[1], towards_camera[0]])
    half_width = float(np.ptp(planar @ across)) / 2
    ratio = circle.radius / max(half_width, 1e-9)
    if residual > _ROUND_RESIDUAL or not _ROUND_RADIUS_BAND[0] <= ratio <= _ROUND_RADIUS_BAND[1]:
        return None
    return circle


def _trimmed_range(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column robust minimum and maximum."""
    return np.percentile(values, _TRIM_PERCENT, axis=0), np.percentile(values, 100 - _TRIM_PERCENT, axis=0)


def fit_box_on_plane(points: np.ndarray, plane: SupportPlane) -> OrientedBox:
    """A gravity-aligned box: min-area footprint on ``plane``, from the table (or lowest point) to the top."""
    up = plane.normal
    seed = np.array([1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = np.cross(up, seed)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    heights = plane.height(points)
    above = points[heights > _TABLE_BLEED_M]
    if len(above) >= 10:
        points, heights = above, heights[heights > _TABLE_BLEED_M]
    planar = np.stack([points @ e1, points @ e2], axis=1)
    _, rect_axes = min_area_rectangle(planar)
    a1 = rect_axes[0, 0] * e1 + rect_axes[1, 0] * e2
    a2 = np.cross(up, a1)
    axes = np.stack([a1, a2, up], axis=1)
    # The foot of the camera origin on the plane: a point of height 0 to measure the box from.
    origin = -plane.offset * up
    low_xy, high_xy = _trimmed_range((points - origin) @ axes[:, :2])
    # Amodal completion: a camera sees only the near side of a round object, so its footprint's far
    # half is missing and the box comes out too shallow. When the near outline is a circular arc,
    # the footprint is taken to be that whole circle (boxes fail the test and keep the visible fit).
    # In ``planar`` coordinates the camera (the origin of the frame) sits at (0, 0).
    circle = round_footprint(planar, camera_foot=np.zeros(2))
    if circle is not None:
        centre_3d = circle.centre[0] * e1 + circle.centre[1] * e2
        centre_xy = centre_3d @ axes[:, :2]
        low_xy = np.minimum(low_xy, centre_xy - circle.radius)
        high_xy = np.maximum(high_xy, centre_xy + circle.radius)
    top = float(np.percentile(heights, 100 - _TRIM_PERCENT))
    lowest = float(np.percentile(heights, _TRIM_PERCENT))
    bottom = 0.0 if lowest < _RESTING_GAP_M else lowest
    low = np.array([low_xy[0], low_xy[1], bottom])
    high = np.array([high_xy[0], high_xy[1], max(top, bottom + 1e-3)])
    corners = box_corners(origin, axes, low, high)
    return OrientedBox(corners=corners, axes=axes, extent=high - low, gravity_aligned=True)


def fit_box_pca(points: np.ndarray) -> OrientedBox:
    """A PCA box; the principal axis closest to the camera's image-up is taken as "up"."""
    centroid = points.mean(axis=0)
    _, _, vt = np.linalg.svd(points - centroid, full_matrices=False)
    candidates = vt.copy()
    up_index = int(np.argmax(np.abs(candidates @ camera_up_fallback())))
    up = candidates[up_index] * np.sign(candidates[up_index] @ camera_up_fallback())
    a1 = candidates[next(i for i in range(3) if i != up_index)]
    a2 = np.cross(up, a1)
    axes = np.stack([a1, a2, up], axis=1)
    low, high = _trimmed_range((points - centroid) @ axes)
    corners = box_corners(centroid, axes, low, high)
    return OrientedBox(corners=corners, axes=axes, extent=high - low, gravity_aligned=False)


def fit_oriented_box(object_points: np.ndarray, scene_points: np.ndarray | None = None) -> OrientedBox:
    """Fit a box to an object's (noisy) points, gravity-aligned when the table plane can be found.

    ``scene_points`` are the rest of the scene (used to find the table); without them, PCA.
    """
    if len(object_points) < 4:
        raise ToolError(f"too few object points to fit a box ({len(object_points)}); check the mask")
    cleaned = main_cluster(object_points)
    plane = None if scene_points is None else estimate_support_plane(cleaned, scene_points)
    if plane is None:
        return fit_box_pca(cleaned)
    return fit_box_on_plane(cleaned, plane)


def _format_nested(points: np.ndarray) -> str:
    """``[[x, y, z], …]`` rounded to 3 decimals, as the original tool printed them."""
    return str(np.round(points, 3).tolist())


class BoundingBoxTool(Tool):
    """Oriented 3D bounding boxes from a point cloud and an object mask."""

    name: ClassVar[str] = "bounding_box"

    @tool_method(geometry={"corners_2d": "corners"})
    def compute_bbox(
        self, point_cloud: np.ndarray, mask: np.ndarray, focal_length_px: Variable[float], *, ctx: ToolContext
    ) -> ToolResult:
        """Compute an oriented 3D bounding box for the masked part of a point cloud.

        Text output: the 8 corners in 3D (metres, OpenCV camera frame) and in normalized image
        coordinates (bottom face then top face, counter-clockwise), the 12 edges, extent and volume.
        Stored variables: $obb_corners_3d (8x3), $obb_corners_2d (8x2 normalized), $extent (3,),
        $edges (12 index pairs).

        Args:
            point_cloud: Scene point cloud, (N, 3) array in the camera frame, e.g. "$point_cloud".
            mask: Boolean (H, W) mask of the target object, e.g. "$segmentation_mask"; its size is
                the image size used for projection.
            focal_length_px: Camera focal length in pixels (square pixels), e.g. "$focal_length_px".
        """
        cloud = as_point_cloud(point_cloud)
        mask_array = as_mask(mask, ctx.image_sizes)
        height, width = mask_array.shape
        focal = as_focal_length(focal_length_px, (height, width))
        selected = mask_selection(cloud, mask_array, focal)
        if not selected.any():
            raise ToolError(
                f"Mask removed all points (total {len(cloud)}, kept 0). Check intrinsics and mask alignment."
            )
        scene = cloud[finite_rows(cloud) & ~selected]
        box = fit_oriented_box(cloud[selected], scene)
        if not (np.all(np.isfinite(box.corners)) and np.isfinite(box.volume)):
            raise ToolError("the box fit gave non-finite corners; check the point cloud and mask")
        if np.any(box.corners[:, 2] <= 0):
            raise ToolError("the fitted box reaches behind the camera; check the point cloud and mask")
        corners_2d = project_to_normalized(box.corners, focal, width, height)
        # The original prints the first two lines with no separator between them.
        text = (
            f"Oriented bounding box computed from {int(selected.sum())}/{len(cloud)} points."
            f"Corners in 3D: {_format_nested(box.corners)}\n"
            f"Corners in normalized image coordinates: {_format_nested(corners_2d)}\n"
            f"Edges: {BOX_EDGES}\n"
            f"Extent: {np.round(box.extent, 3).tolist()}\n"
            f"Volume: {box.volume:.3f}"
        )
        value = {
            "corners_3d": box.corners.astype(float).tolist(),
            "corners_2d": corners_2d.astype(float).tolist(),
            "edges": [list(edge) for edge in BOX_EDGES],
            "extent": box.extent.astype(float).tolist(),
            "volume": float(box.volume),
            "points_used": int(selected.sum()),
            "points_total": len(cloud),
        }
        return ToolResult(
            text=text,
            value=value,
            variables={
                "obb_corners_3d": box.corners,
                "obb_corners_2d": corners_2d,
                "extent": box.extent,
                "edges": np.asarray(BOX_EDGES),
            },
        )
