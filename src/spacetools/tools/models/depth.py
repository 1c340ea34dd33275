"""`depth_estimator` on real images: Depth Pro and metric Depth Anything V2 through transformers.

Both give a metric depth map at the image's size; the focal length comes from the config when set,
else from Depth Pro's field-of-view head, else from an assumed horizontal field of view (`fov_deg`).
The point cloud is back-projected by the simulated tool's own code, so the texts and variables are
the same as on simulated scenes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from spacetools.kit.definition import ToolContext, ToolError
from spacetools.tools.depth import DepthEstimatorTool
from spacetools.tools.models.runtime import ImagePrep, ModelSettings, batches

# Depth Pro's published preprocessing (transformers' DepthProImageProcessor defaults).
_DEPTH_PRO_PREP = {"size": {"height": 1536, "width": 1536}, "image_mean": (0.5,) * 3, "image_std": (0.5,) * 3}


class DepthSettings(ModelSettings):
    focal_length_px: float | None = Field(None, gt=0, description="Known focal length; overrides estimates.")
    fov_deg: float = Field(60.0, gt=0, lt=180, description="Horizontal field of view assumed when unknown.")


def focal_from_fov(width: int, fov_deg: float) -> float:
    """The focal length in pixels of an image ``width`` pixels wide with a horizontal field of view."""
    return 0.5 * width / math.tan(math.radians(fov_deg) / 2.0)


class ModelDepthTool(DepthEstimatorTool):
    """Shared part of the model-backed depth tools: settings, batching and the `_estimate` hook."""

    settings_model: ClassVar[type[ModelSettings]] = DepthSettings
    # The model's settings only: the simulated parent's realism profile does not apply to a real model.
    config_keys: ClassVar[frozenset[str]] = frozenset(DepthSettings.model_fields)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.settings = DepthSettings.model_validate(config)

    def _estimate(self, ctx: ToolContext, image_index: int) -> tuple[np.ndarray, float]:
        return self.predict([ctx.image(image_index)])[0]

    def predict(self, images: Sequence[np.ndarray]) -> list[tuple[np.ndarray, float]]:
        """Metric depth ``(H, W)`` float32 and focal length (px) of each image, ``batch_size`` at a time."""
        results: list[tuple[np.ndarray, float]] = []
        # A batch is one tensor, so only images of one size share a batch.
        for _shape, group in itertools.groupby(images, key=lambda image: image.shape):
            for batch in batches(list(group), self.settings.batch_size):
                results.extend(self._predict_batch(batch))
        for depth, _focal in results:
            if not np.isfinite(depth).all():
                raise ToolError("the depth model returned non-finite depth values")
        return results

    def _focal(self, width: int, estimated_fov_deg: float | None = None) -> float:
        if self.settings.focal_length_px is not None:
            return self.settings.focal_length_px
        if estimated_fov_deg is None:
            return focal_from_fov(width, self.settings.fov_deg)
        if not (math.isfinite(estimated_fov_deg) and 0.0 < estimated_fov_deg < 180.0):
            raise ToolError(
                f"the depth model estimated an invalid field of view ({estimated_fov_deg:.1f} degrees); "
                "set focal_length_px in the tool config"
            )
        return focal_from_fov(width, estimated_fov_deg)

    def _predict_batch(self, images: Sequence[np.ndarray]) -> list[tuple[np.ndarray, float]]:
        raise NotImplementedError


class DepthProTool(ModelDepthTool):
    """Depth Pro (the paper's depth model): metric depth and, with its FOV head, the focal length."""

    def setup(self) -> None:
        from transformers import DepthProForDepthEstimation

        self.model, self.device, self.dtype = self.settings.load(DepthProForDepthEstimation)
        self.prep = ImagePrep.from_folder(self.settings.model_path, _DEPTH_PRO_PREP)

    def _predict_batch(self, images: Sequence[np.ndarray]) -> list[tuple[np.ndarray, float]]:
        import torch

        with torch.inference_mode():
            output = self.model(pixel_values=self.prep(images, self.device, self.dtype))
        fovs = output.field_of_view
        results = []
        for position, (image, inverse) in enumerate(zip(images, output.predicted_depth, strict=True)):
            height, width = image.shape[:2]
            fov = None if fovs is None else float(fovs[position])
            focal = self._focal(width, fov)
            # As transformers' post-processing: the canonical inverse depth is scaled by width / focal,
            # resized to the image, then inverted.
            scaled = inverse.float()[None, None] * (width / focal)
            resized = torch.nn.functional.interpolate(scaled, size=(height, width), mode="bilinear")[0, 0]
            depth = 1.0 / torch.clamp(resized, min=1e-4, max=1e4)
            results.append((depth.cpu().numpy().astype(np.float32), focal))
        return results


class DepthAnythingTool(ModelDepthTool):
    """Depth Anything V2 (metric): metric depth; the focal length from the config or `fov_deg`."""

    def setup(self) -> None:
        from transformers import AutoImageProcessor, AutoModelForDepthEstimation

        self.model, self.device, self.dtype = self.settings.load(AutoModelForDepthEstimation)
        if getattr(self.model.config, "depth_estimation_type", "metric") != "metric":
            raise ValueError(
                f"{self.settings.model_path} is a relative-depth model; the depth tool needs a metric one"
            )
        self.processor = AutoImageProcessor.from_pretrained(
            str(self.settings.model_path), local_files_only=True
        )

    def _predict_batch(self, images: Sequence[np.ndarray]) -> list[tuple[np.ndarray, float]]:
        import torch

        inputs = self.processor(images=list(images), return_tensors="pt")
        pixels = inputs["pixel_values"].to(device=self.device, dtype=self.dtype)
        with torch.inference_mode():
            output = self.model(pixel_values=pixels)
        output.predicted_depth = output.predicted_depth.float()
        sizes = [image.shape[:2] for image in images]
        processed = self.processor.post_process_depth_estimation(output, target_sizes=sizes)
        return [
            (entry["predicted_depth"].cpu().numpy().astype(np.float32), self._focal(image.shape[1]))
            for entry, image in zip(processed, images, strict=True)
        ]
