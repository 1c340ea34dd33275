"""Pinhole projections between the camera frame, pixels and normalized image coordinates.

The V1 tools only know a focal length and an image size (as the original Toolshed did), so their
camera is a `spacetools.sim.camera.Camera` with square pixels and the principal point at the image
centre: ``fx = fy = focal_length_px``, ``cx = W / 2``, ``cy = H / 2`` (`focal_camera`). The maths
itself (projection, pixel rays, back-projection) is the simulator's camera, not a copy of it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from spacetools.kit.definition import ToolError
from spacetools.sim.camera import Camera


def focal_camera(focal_length_px: float, width: int, height: int) -> Camera:
    """The camera the V1 tools assume: at the origin, square pixels, principal point at the centre."""
    try:
        return Camera(width, height, focal_length_px, focal_length_px, width / 2.0, height / 2.0)
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def project_to_pixels(points_cam: np.ndarray, focal_length_px: float, width: int, height: int) -> np.ndarray:
    """Project camera-frame points ``(N, 3)`` to pixel coordinates ``(N, 2)`` (x right, y down)."""
    try:
        return focal_camera(focal_length_px, width, height).project(points_cam)
    except ValueError as exc:  # points at or behind the camera, or not (N, 3)
        raise ToolError(str(exc)) from None


def project_to_normalized(
    points_cam: np.ndarray, focal_length_px: float, width: int, height: int
) -> np.ndarray:
    """Project camera-frame points ``(N, 3)`` to normalized image coordinates ``(N, 2)``."""
    camera = focal_camera(focal_length_px, width, height)
    return camera.normalize(project_to_pixels(points_cam, focal_length_px, width, height))


def backproject_normalized(
    points_2d: np.ndarray, depth: np.ndarray, focal_length_px: float, width: int, height: int
) -> np.ndarray:
    """Lift normalized points ``(N, 2)`` with metric depths ``(N,)`` to camera-frame points ``(N, 3)``."""
    camera = focal_camera(focal_length_px, width, height)
    pixels = np.asarray(points_2d, dtype=np.float64).reshape(-1, 2) * np.array([width, height])
    rays = np.column_stack([pixels, np.ones(len(pixels))]) @ np.linalg.inv(camera.intrinsics()).T
    points: np.ndarray = rays * np.asarray(depth, dtype=np.float64).reshape(-1, 1)
    return points


def depth_to_point_cloud(depth: np.ndarray, focal_length_px: float) -> np.ndarray:
    """One camera-frame point per pixel centre, row-major ``(H*W, 3)`` float32, so a mask indexes it."""
    height, width = depth.shape
    return focal_camera(focal_length_px, width, height).backproject(depth).reshape(-1, 3)


def pixel_index(u: float, v: float, width: int, height: int) -> tuple[int, int]:
    """The ``(row, col)`` of the pixel containing the normalized point ``(u, v)``."""
    if not (0.0 <= u <= 1.0 and 0.0 <= v <= 1.0):
        raise ToolError(f"normalized coordinates ({u}, {v}) must lie in [0, 1]")
    return min(int(v * height), height - 1), min(int(u * width), width - 1)


def rows_all(flags: np.ndarray) -> np.ndarray:
    """Boolean ``(N,)``: the rows of an ``(N, 3)`` boolean array that are true in all three columns.

    Column by column: numpy reduces a narrow array along its rows several times slower, and a per-pixel
    cloud has 300,000 rows.
    """
    all_true: np.ndarray = flags[:, 0] & flags[:, 1] & flags[:, 2]
    return all_true


def finite_rows(points: np.ndarray) -> np.ndarray:
    """Boolean ``(N,)``: the rows of an ``(N, 3)`` array whose three coordinates are finite."""
    return rows_all(np.isfinite(points))


def valid_points(points: np.ndarray) -> np.ndarray:
    """Boolean ``(N,)``: the finite points in front of the camera (``z > 0``) of an ``(N, 3)`` cloud."""
    return finite_rows(points) & (points[:, 2] > 0)


def as_point_cloud(value: object) -> np.ndarray:
    """Validate a point cloud argument: a finite-shaped ``(N, 3)`` float array."""
    cloud = np.asarray(value, dtype=np.float64)
    if cloud.ndim != 2 or cloud.shape[1] != 3:
        raise ToolError(f"point_cloud must be an (N, 3) array, got shape {cloud.shape}")
    return cloud


def as_mask(value: object, image_sizes: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """Validate a mask argument: a 2D boolean (or 0/1 integer) array of an image's size.

    A float array (a depth map, say) is refused with its value range, so the model sees what it sent;
    with `image_sizes` the mask must be as large as one of the conversation's images.
    """
    mask = np.asarray(value)
    if mask.ndim != 2:
        raise ToolError(f"mask must be an (H, W) boolean array, got shape {mask.shape}")
    if mask.dtype != bool:
        binary = mask.dtype.kind in "iu" and mask.size and bool(np.all((mask == 0) | (mask == 1)))
        if not binary:
            described = f"{mask.dtype} values"
            if mask.size and mask.dtype.kind in "iuf":
                finite = mask[np.isfinite(mask)] if mask.dtype.kind == "f" else mask
                if finite.size:
                    described += f" from {float(finite.min()):.3g} to {float(finite.max()):.3g}"
            raise ToolError(
                f"mask must be a boolean (H, W) array such as $segmentation_mask, got {described} "
                "(a depth map or an image is not a mask)"
            )
    if image_sizes is not None and tuple(mask.shape) not in {tuple(size) for size in image_sizes}:
        sizes = ", ".join(f"{h}x{w}" for h, w in dict.fromkeys(tuple(size) for size in image_sizes))
        raise ToolError(
            f"mask is {mask.shape[0]}x{mask.shape[1]} but the conversation's images are {sizes or 'none'}"
        )
    return mask.astype(bool)


MIN_FOCAL_PX = 1.0
MAX_FOCAL_PX = 1e6
FOCAL_RANGE_PER_SIDE = (0.1, 100.0)
"""A plausible focal length, as a multiple of the image's longer side (fields of view ~0.6° to 157°)."""


def as_focal_length(value: object, size: tuple[int, int] | None = None) -> float:
    """Validate a focal length argument: a finite, plausible number of pixels (for an image `size` (H, W))."""
    try:
        focal = float(np.asarray(value, dtype=np.float64).reshape(()))
    except (TypeError, ValueError) as exc:
        raise ToolError(f"focal_length_px must be a number, got {value!r}") from exc
    if not np.isfinite(focal) or focal <= 0:
        raise ToolError(f"focal_length_px must be a positive finite number, got {focal}")
    low, high = MIN_FOCAL_PX, MAX_FOCAL_PX
    if size is not None:
        side = max(size)
        low, high = FOCAL_RANGE_PER_SIDE[0] * side, FOCAL_RANGE_PER_SIDE[1] * side
    if not low <= focal <= high:
        raise ToolError(
            f"focal_length_px {focal:g} is not plausible (expected {low:g} to {high:g} px); "
            "pass $focal_length_px from the depth estimator"
        )
    return focal


def mask_selection(point_cloud: np.ndarray, mask: np.ndarray, focal_length_px: float) -> np.ndarray:
    """Boolean ``(N,)``: which points of ``point_cloud`` fall inside ``mask`` (and have a valid depth).

    A per-pixel cloud (``H*W`` rows, row-major) is indexed directly; any other cloud (filtered or
    subsampled) is projected with the mask's size as the image size, as the original tools did.
    """
    height, width = mask.shape
    valid = valid_points(point_cloud)
    if len(point_cloud) == height * width:
        selected: np.ndarray = mask.reshape(-1) & valid
        return selected
    selected = np.zeros(len(point_cloud), dtype=bool)
    candidates = np.flatnonzero(valid)
    pixels = np.floor(project_to_pixels(point_cloud[candidates], focal_length_px, width, height)).astype(int)
    inside = (pixels[:, 0] >= 0) & (pixels[:, 0] < width) & (pixels[:, 1] >= 0) & (pixels[:, 1] < height)
    selected[candidates[inside]] = mask[pixels[inside, 1], pixels[inside, 0]]
    return selected


NUMBER_PATTERN = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def format_points(points: np.ndarray) -> str:
    """Points as the tools print them, ``[(0.381, 0.428), …]`` with 3 decimals (any dimension).

    The inverse of `as_normalized_points` / `as_points_3d` reading text.
    """
    rows = np.asarray(points, dtype=np.float64)
    rows = rows.reshape(len(rows), -1) if rows.size else rows.reshape(0, 0)
    return "[" + ", ".join("(" + ", ".join(f"{c:.3f}" for c in row) + ")" for row in rows) + "]"


def as_normalized_points(value: object) -> np.ndarray:
    """Validate normalized points ``(N, 2)`` given as an array or as text like ``"[(0.41, 0.62), …]"``."""
    if isinstance(value, str):
        numbers = [float(token) for token in NUMBER_PATTERN.findall(value)]
        if not numbers or len(numbers) % 2:
            raise ToolError(f"points must be (x, y) pairs like [(0.41, 0.62), (0.45, 0.60)], got {value!r}")
        points = np.asarray(numbers).reshape(-1, 2)
    else:
        points = np.asarray(value, dtype=np.float64)
        if points.ndim == 1 and points.shape[0] == 2:
            points = points[None, :]
        if points.ndim != 2 or points.shape[1] != 2 or len(points) == 0:
            raise ToolError(f"points must be an (N, 2) array of normalized (x, y), got shape {points.shape}")
    if not np.all(np.isfinite(points)):
        raise ToolError("points must be finite normalized image coordinates in [0, 1]")
    outside = np.flatnonzero(np.any((points < 0) | (points > 1), axis=1))
    if len(outside):
        x, y = points[outside[0]]
        raise ToolError(
            f"Point {outside[0]} ({x:g}, {y:g}) must be in range [0, 1] (normalized image coordinates)"
        )
    return points


def as_points_3d(value: object) -> np.ndarray:
    """Validate 3D points ``(N, 3)`` given as an array or as text like ``"[(0.1, 0.0, 0.8)]"``."""
    if isinstance(value, str):
        numbers = [float(token) for token in NUMBER_PATTERN.findall(value)]
        if not numbers or len(numbers) % 3:
            raise ToolError(f"points must be (x, y, z) triples like [(0.1, 0.0, 0.8)], got {value!r}")
        return np.asarray(numbers).reshape(-1, 3)
    points = np.asarray(value, dtype=np.float64)
    if points.ndim == 1 and points.shape[0] == 3:
        points = points[None, :]
    if points.ndim != 2 or points.shape[1] != 3 or len(points) == 0:
        raise ToolError(f"points must be an (N, 3) array, got shape {points.shape}")
    return points
