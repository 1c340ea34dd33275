"""`depth_estimator`: metric depth, a per-pixel point cloud and the focal length, from the simulator.

Stands in for a monocular depth model (Depth Pro in the paper): the rendered depth and the camera's
focal length, perturbed by the realism profile. The point cloud has one point per pixel (``H*W``
rows, row-major, camera frame) so a segmentation mask indexes it directly.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from spacetools.kit.definition import ToolContext, ToolError, ToolResult, tool_method
from spacetools.sim.realism import maybe_fail, perturb_depth, perturb_focal_length
from spacetools.tools.overlays import colorize_depth
from spacetools.tools.projection import depth_to_point_cloud
from spacetools.tools.simworld import SimulatedTool, render_size, resample_nearest


def depth_map_text(
    depth: np.ndarray, focal_length_px: float, source: Literal["Estimated", "Captured"] = "Estimated"
) -> str:
    """The model's text for a depth map (the original tools' words; the robot's camera "Captured" it)."""
    height, width = depth.shape
    return (
        f"{source} depth map for {width}x{height} image. Focal length: {focal_length_px:.1f}px. "
        f"Depth range: {depth.min():.2f}m to {depth.max():.2f}m (mean: {depth.mean():.2f}m). "
        f"Use $depth_map (numpy array, {height}x{width}) to reference the depth data and "
        f"$focal_length_px (float) to reference the focal length."
    )


def point_cloud_text(depth: np.ndarray, cloud: np.ndarray) -> str:
    """The model's text for a depth map and its per-pixel point cloud (the original tools' words)."""
    height, width = depth.shape
    z = cloud[:, 2]
    return (
        f"Generated {width}x{height} depth map and {len(cloud):,} 3D points. "
        f"Depth range in point cloud: {z.min():.2f}m to {z.max():.2f}m (mean: {z.mean():.2f}m). "
        f"Use $depth_map (numpy array, {height}x{width}), $point_cloud (numpy array, {len(cloud)}x3) "
        f"and $focal_length_px (float) to reference the results."
    )


class DepthEstimatorTool(SimulatedTool):
    """Monocular metric depth estimation (simulated)."""

    name: ClassVar[str] = "depth_estimator"
    reads_truth: ClassVar[bool] = False

    def _estimate(self, ctx: ToolContext, image_index: int) -> tuple[np.ndarray, float]:
        """The (perturbed) depth map and focal length of an image, at the image's size.

        The depth is estimated on the render and mapped to the image's pixels; the focal length is the
        camera's at the image's size, so that pixels, normalized points and the cloud agree.
        """
        observation = self.observe(ctx, image_index)
        profile = self.profile
        maybe_fail(profile, ctx.rng, "depth model")
        height, width = ctx.image_size(image_index)
        depth = resample_nearest(perturb_depth(observation.view.depth, profile, ctx.rng), height, width)
        image_camera = observation.view.camera.resized(width, height)
        focal = perturb_focal_length(float(image_camera.fx), profile, ctx.rng)
        if not (np.all(np.isfinite(depth)) and np.isfinite(focal)):
            raise ToolError("the depth estimate is not finite; retry the call")
        return depth, focal

    def _picture(self, depth: np.ndarray) -> np.ndarray:
        """The colourised depth for people to look at, drawn at most `max_render_pixels` large."""
        height, width = depth.shape
        picture_width, picture_height = render_size(width, height, self.simulation.max_render_pixels)
        return colorize_depth(resample_nearest(depth, picture_height, picture_width))

    @staticmethod
    def _summary(depth: np.ndarray, focal: float) -> dict[str, float | int]:
        height, width = depth.shape
        return {
            "width": width,
            "height": height,
            "focal_length_px": float(focal),
            "depth_min": float(depth.min()),
            "depth_max": float(depth.max()),
            "depth_mean": float(depth.mean()),
        }

    @tool_method
    def estimate_depth(self, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Estimate a metric depth map of an image.

        Text output: image size, focal length and depth statistics. Stored variables: $depth_map
        (HxW array, metres) and $focal_length_px (float).

        Args:
            image_index: Index of the image to analyse (0 for the first image).
        """
        depth, focal = self._estimate(ctx, image_index)
        return ToolResult(
            text=depth_map_text(depth, focal),
            value=self._summary(depth, focal),
            images=[self._picture(depth)],
            variables={"depth_map": depth, "focal_length_px": focal},
        )

    @tool_method
    def estimate_depth_with_pointcloud(self, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Estimate a metric depth map and a 3D point cloud (camera frame) of an image.

        Text output: image size, number of points and their depth range. Stored variables: $depth_map
        (HxW array, metres), $point_cloud (Nx3 array, one point per pixel in row-major order, OpenCV
        camera frame) and $focal_length_px (float).

        Args:
            image_index: Index of the image to analyse (0 for the first image).
        """
        depth, focal = self._estimate(ctx, image_index)
        cloud = depth_to_point_cloud(depth, focal)
        z = cloud[:, 2]
        value = {
            **self._summary(depth, focal),
            "points": len(cloud),
            "cloud_depth_min": float(z.min()),
            "cloud_depth_max": float(z.max()),
            "cloud_depth_mean": float(z.mean()),
        }
        return ToolResult(
            text=point_cloud_text(depth, cloud),
            value=value,
            images=[self._picture(depth)],
            variables={"depth_map": depth, "point_cloud": cloud, "focal_length_px": focal},
        )
