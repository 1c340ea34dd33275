"""`vision_ops`: small array and image operations on stored variables (no model behind them).

`index_at` reads a variable at a normalized pixel, the crops cut an image to a mask or to points,
and the projections move points between normalized image coordinates and the camera frame with
the V1 intrinsics (principal point at the image centre, ``fx = fy = focal_length_px``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from spacetools.kit.definition import Tool, ToolContext, ToolError, ToolResult, Variable, tool_method
from spacetools.tools.projection import (
    as_focal_length,
    as_mask,
    as_normalized_points,
    as_points_3d,
    backproject_normalized,
    format_points,
    pixel_index,
    project_to_normalized,
)

WHITE = 255


def _image_size_of_cloud(ctx: ToolContext, rows: int) -> tuple[int, int]:
    """``(width, height)`` of the conversation image a per-pixel cloud of ``rows`` points came from."""
    for height, width in ctx.image_sizes:
        if height * width == rows:
            return width, height
    raise ToolError(
        f"cannot tell the image size of a {rows}x3 point cloud: it must have one point per pixel of an image "
        "in the conversation"
    )


def _element_value(value: np.ndarray) -> Any:
    """The element as plain Python: a float keeps its full repr (a float32 depth prints as the original did)."""
    item = value.tolist()
    if isinstance(item, float) or (isinstance(item, list) and any(isinstance(v, float) for v in item)):
        values = item if isinstance(item, list) else [item]
        if not all(math.isfinite(v) for v in values):
            raise ToolError(f"the value there is not a finite number ({item}); try another point")
    return item


def _check_in_front(points: np.ndarray) -> None:
    """Only finite points in front of the camera (z > 0) have an image point; name the first other one."""
    bad = np.flatnonzero(~np.all(np.isfinite(points), axis=1) | ~(points[:, 2] > 0))
    if len(bad):
        x, y, z = points[bad[0]]
        why = "is not finite" if not np.all(np.isfinite(points[bad[0]])) else "is not in front of the camera"
        raise ToolError(
            f"point {bad[0]} ({x:g}, {y:g}, {z:g}) {why}: only points with a finite z > 0 (metres, "
            "OpenCV camera frame) can be projected"
        )


def _check_projected(points: np.ndarray, projected: np.ndarray) -> None:
    """A point so close to the camera plane that its image point overflows (z = 1e-320) has none."""
    bad = np.flatnonzero(~np.all(np.isfinite(projected), axis=1))
    if len(bad):
        x, y, z = points[bad[0]]
        raise ToolError(
            f"point {bad[0]} ({x:g}, {y:g}, {z:g}) is too close to the camera plane: its image point is not "
            "finite; only points with a finite z > 0 (metres, OpenCV camera frame) far enough in front can be "
            "projected"
        )


class VisionOpsTool(Tool):
    """Indexing, cropping and projection operations on images and stored arrays."""

    name: ClassVar[str] = "vision_ops"

    @tool_method
    def index_at(self, data: np.ndarray, u: float, v: float, *, ctx: ToolContext) -> ToolResult:
        """Read the value of an array variable at a normalized pixel (u, v).

        Works on depth maps (a depth in metres), masks (true/false), images (RGB) and per-pixel point
        clouds (the 3D point seen at that pixel). Note the arguments are called `data`, `u`, `v`.

        Args:
            data: The array to read, e.g. "$depth_map", "$segmentation_mask" or "$point_cloud".
            u: Normalized x coordinate in [0, 1] (0 = left edge).
            v: Normalized y coordinate in [0, 1] (0 = top edge).
        """
        array = np.asarray(data)
        if array.ndim == 2 and array.shape[1] == 3 and array.shape[0] > 3:
            width, height = _image_size_of_cloud(ctx, array.shape[0])
            row, col = pixel_index(u, v, width, height)
            value = array[row * width + col]
        elif array.ndim in (2, 3):
            height, width = array.shape[:2]
            row, col = pixel_index(u, v, width, height)
            value = array[row, col]
        else:
            raise ToolError(
                f"data must be an (H, W), (H, W, C) or per-pixel (H*W, 3) array, got shape {array.shape}"
            )
        item = _element_value(np.asarray(value))
        return ToolResult(text=f"Pixel value at ({u:.3f}, {v:.3f}) is {item}", value=item)

    @tool_method
    def mask_crop(self, image_index: int, mask: np.ndarray, *, ctx: ToolContext) -> ToolResult:
        """Crop an image to a mask's bounding box, painting everything outside the mask white.

        Stored variables: $masked_crop (the cropped RGB image).

        Args:
            image_index: Index of the image to crop (0 for the first image).
            mask: Boolean (H, W) mask of the same size as the image, e.g. "$segmentation_mask".
        """
        image = ctx.image(image_index)
        mask_array = as_mask(mask)
        if mask_array.shape != image.shape[:2]:
            raise ToolError(f"mask shape {mask_array.shape} doesn't match image dimensions {image.shape[:2]}")
        rows, cols = np.nonzero(mask_array)
        if rows.size == 0:
            raise ToolError("Mask is empty - no pixels are masked")
        y0, y1, x0, x1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
        crop_mask = mask_array[y0:y1, x0:x1]
        crop = np.where(crop_mask[..., None], image[y0:y1, x0:x1], WHITE).astype(np.uint8)
        coverage = 100.0 * crop_mask.mean()
        text = (
            f"Cropped masked region from ({x0}, {y0}) to ({x1}, {y1}) [size: {x1 - x0}x{y1 - y0}], "
            f"mask coverage: {coverage:.1f}%. Use $masked_crop (RGB image, {x1 - x0}x{y1 - y0}) to reference it."
        )
        value = {"box": [int(x0), int(y0), int(x1), int(y1)], "coverage": float(coverage)}
        return ToolResult(text=text, value=value, images=[crop], variables={"masked_crop": crop})

    @tool_method
    def point_crop(self, image_index: int, points: str | np.ndarray, *, ctx: ToolContext) -> ToolResult:
        """Crop an image to the smallest rectangle containing the given normalized points.

        Stored variables: $cropped_image (the cropped RGB image).

        Args:
            image_index: Index of the image to crop (0 for the first image).
            points: Normalized (x, y) points, e.g. "[(0.2, 0.3), (0.8, 0.7)]" or "$box_detections".
        """
        image = ctx.image(image_index)
        height, width = image.shape[:2]
        pixels = as_normalized_points(points) * np.array([width, height])
        x0, y0 = np.floor(pixels.min(axis=0)).astype(int)
        x1, y1 = np.minimum(np.ceil(pixels.max(axis=0)).astype(int), [width, height])
        if x1 - x0 < 1 or y1 - y0 < 1:
            raise ToolError("Crop has zero size: the points span no area")
        crop = image[y0:y1, x0:x1].copy()
        text = (
            f"Cropped image from ({x0}, {y0}) to ({x1}, {y1}) [size: {x1 - x0}x{y1 - y0}] to encompass "
            f"{len(pixels)} points. Use $cropped_image (RGB image, {x1 - x0}x{y1 - y0}) to reference it."
        )
        value = {"box": [int(x0), int(y0), int(x1), int(y1)]}
        return ToolResult(text=text, value=value, images=[crop], variables={"cropped_image": crop})

    @tool_method
    def project_2d_points_to_3d(
        self,
        points_2d: str | np.ndarray,
        depth: np.ndarray,
        focal_length_px: Variable[float],
        *,
        ctx: ToolContext,
    ) -> ToolResult:
        """Lift normalized image points to 3D points in the camera frame (metres).

        Stored variables: $projected_3d_points (Nx3, OpenCV camera frame).

        Args:
            points_2d: Normalized (x, y) points, e.g. "[(0.41, 0.62)]" or "$mug_detection".
            depth: A depth map "$depth_map" (HxW), a per-pixel point cloud "$point_cloud", or one
                depth per point.
            focal_length_px: Camera focal length in pixels, e.g. "$focal_length_px".
        """
        points = as_normalized_points(points_2d)
        values = np.asarray(depth, dtype=np.float64)
        if values.ndim == 2 and values.shape[1] == 3 and values.shape[0] > 3:
            width, height = _image_size_of_cloud(ctx, values.shape[0])
            as_focal_length(focal_length_px, (height, width))
            indices = [
                row * width + col for row, col in (pixel_index(u, v, width, height) for u, v in points)
            ]
            points_3d = values[indices]
        elif values.ndim == 2:
            height, width = values.shape
            focal = as_focal_length(focal_length_px, (height, width))
            pixels = [pixel_index(u, v, width, height) for u, v in points]
            z = np.array([values[row, col] for row, col in pixels])
            points_3d = backproject_normalized(points, z, focal, width, height)
        elif values.ndim == 1 and len(values) == len(points):
            if not ctx.image_count:
                raise ToolError("per-point depths need an image in the conversation to know its size")
            height, width = ctx.image_size(0)
            focal = as_focal_length(focal_length_px, (height, width))
            points_3d = backproject_normalized(points, values, focal, width, height)
        else:
            raise ToolError(
                f"depth must be an (H, W) depth map, an (H*W, 3) point cloud or {len(points)} depths, "
                f"got shape {values.shape}"
            )
        if not np.all(np.isfinite(points_3d)) or np.any(points_3d[:, 2] <= 0):
            raise ToolError("depth must be positive and finite at every point")
        text = f"Projected {len(points)} 2D points to 3D camera coordinates (m): {format_points(points_3d)}"
        value = {"points": points_3d.astype(float).tolist()}
        return ToolResult(text=text, value=value, variables={"projected_3d_points": points_3d})

    @tool_method
    def project_3d_points_to_2d(
        self, points_3d: str | np.ndarray, focal_length_px: Variable[float], width: int, height: int
    ) -> ToolResult:
        """Project 3D camera-frame points (metres) to normalized image coordinates.

        Stored variables: $projected_2d_points (Nx2, normalized).

        Args:
            points_3d: Points (x, y, z) in the OpenCV camera frame, e.g. "$obb_corners_3d".
            focal_length_px: Camera focal length in pixels, e.g. "$focal_length_px".
            width: Image width in pixels.
            height: Image height in pixels.
        """
        points = as_points_3d(points_3d)
        if width <= 0 or height <= 0:
            raise ToolError(f"image size must be positive, got {width}x{height}")
        focal = as_focal_length(focal_length_px, (height, width))
        _check_in_front(points)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            projected = project_to_normalized(points, focal, width, height)
        _check_projected(points, projected)
        text = (
            f"Projected {len(points)} 3D points to normalized image coordinates: {format_points(projected)}"
        )
        value = {"points": projected.astype(float).tolist()}
        return ToolResult(text=text, value=value, variables={"projected_2d_points": projected})
