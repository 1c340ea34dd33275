"""`sam2`: promptable instance segmentation backed by the simulator's instance masks.

A point on an object gives that object's visible mask; a point on the table or the floor gives the
connected stretch of that surface, as a promptable segmenter would. The realism profile erodes,
dilates or bleeds the mask, and the reported IoU score follows the mask's true quality.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy import ndimage

from spacetools.kit.definition import ToolContext, ToolResult, tool_method
from spacetools.sim.observation import Observation
from spacetools.sim.realism import maybe_fail, perturb_mask, predicted_iou
from spacetools.tools.overlays import draw_mask
from spacetools.tools.projection import as_normalized_points, pixel_index
from spacetools.tools.simworld import SimulatedTool, resample_nearest

SURFACE_SCORE_FACTOR = 0.7
"""Segmenting a bare surface is less certain than an object: its score is scaled down."""


def surface_mask(observation: Observation, row: int, col: int) -> np.ndarray:
    """The connected region of bare table (or of the rest of the background) containing a pixel.

    Bare table is `Observation.table_pixels`, the same table top the question generator uses.
    """
    table = observation.table_pixels
    same_kind = table if table[row, col] else (observation.view.segmentation < 0) & ~table
    labels, _ = ndimage.label(same_kind)
    region: np.ndarray = labels == labels[row, col]
    return region


def segment_at(observation: Observation, points: np.ndarray) -> tuple[np.ndarray, bool]:
    """The true mask prompted by normalized points, and whether it is an object (not a surface).

    Points on objects give the union of those objects; when no point hits an object, the surface
    under the first point.
    """
    width, height = observation.size
    segmentation = observation.view.segmentation
    pixels = [pixel_index(float(u), float(v), width, height) for u, v in points]
    hit = {int(segmentation[row, col]) for row, col in pixels} - {-1}
    if hit:
        return np.isin(segmentation, sorted(hit)), True
    return surface_mask(observation, *pixels[0]), False


class Sam2Tool(SimulatedTool):
    """Promptable segmentation (SAM 2 in the paper), simulated."""

    name: ClassVar[str] = "sam2"
    reads_truth: ClassVar[bool] = False

    def _segment(self, ctx: ToolContext, image_index: int, points: np.ndarray) -> tuple[np.ndarray, float]:
        """The mask at the image's size (segmented on the render) and its predicted IoU."""
        observation = self.observe(ctx, image_index)
        profile = self.profile
        maybe_fail(profile, ctx.rng, "SAM2")
        truth, is_object = segment_at(observation, points)
        mask = perturb_mask(truth, observation.view.segmentation, profile, ctx.rng)
        score = predicted_iou(mask, truth, profile, ctx.rng) * (1.0 if is_object else SURFACE_SCORE_FACTOR)
        return resample_nearest(mask, *ctx.image_size(image_index)), score

    def _result(
        self,
        ctx: ToolContext,
        image_index: int,
        mask: np.ndarray,
        points: np.ndarray,
        score: float,
        text: str,
    ) -> ToolResult:
        height, width = mask.shape
        return ToolResult(
            text=f"{text} Use $segmentation_mask (boolean array, {height}x{width}) to reference it.",
            value={
                "iou": float(score),
                "point": [float(points[0][0]), float(points[0][1])],
                "points": [[float(x), float(y)] for x, y in points],
                "shape": [height, width],
                "area": int(mask.sum()),
            },
            images=[draw_mask(ctx.image(image_index), mask, points)],
            variables={"segmentation_mask": mask},
        )

    @tool_method
    def segment_from_point(self, x: float, y: float, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Segment the object at a normalized image point.

        Text output: the IoU confidence score of the mask. Stored variables: $segmentation_mask
        (boolean HxW array, True on the segmented object).

        Args:
            x: X coordinate in normalized image coordinates [0, 1] (0 = left edge).
            y: Y coordinate in normalized image coordinates [0, 1] (0 = top edge).
            image_index: Index of the image to segment (0 for the first image).
        """
        points = as_normalized_points([x, y])
        mask, score = self._segment(ctx, image_index, points)
        text = f"Segmented object at normalized coords ({x:.3f}, {y:.3f}) with IoU score: {score:.3f}."
        return self._result(ctx, image_index, mask, points, score, text)

    @tool_method
    def segment_from_points(
        self, points: str | np.ndarray, image_index: int, *, ctx: ToolContext
    ) -> ToolResult:
        """Segment an object from several normalized points on it.

        Text output: the best IoU confidence score. Stored variables: $segmentation_mask (boolean HxW
        array, True on the segmented object).

        Args:
            points: Normalized (x, y) points on the object, e.g. "[(0.41, 0.62), (0.45, 0.60)]", or a
                detection variable such as "$red_mug_detections".
            image_index: Index of the image to segment (0 for the first image).
        """
        prompts = as_normalized_points(points)
        mask, score = self._segment(ctx, image_index, prompts)
        text = f"Segmented object using {len(prompts)} normalized points with best IoU score: {score:.3f}."
        return self._result(ctx, image_index, mask, prompts, score, text)
