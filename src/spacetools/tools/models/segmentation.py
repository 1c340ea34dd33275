"""`sam2` on real images: SAM 2 and SAM through transformers, prompted by one or several points.

One point asks for SAM's three candidate masks (a point is ambiguous) and keeps the one with the best
predicted IoU; several points ask for one mask. The predicted IoU is the score in the result text,
which is the simulated tool's text: only `_segment` is replaced. An empty mask is an error result.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from spacetools.kit.definition import ToolContext, ToolError
from spacetools.tools.models.runtime import ImagePrep, ModelSettings
from spacetools.tools.segmentation import Sam2Tool

# SAM 2's published preprocessing (transformers' Sam2ImageProcessor defaults).
_SAM2_PREP = {
    "size": {"height": 1024, "width": 1024},
    "image_mean": (0.485, 0.456, 0.406),
    "image_std": (0.229, 0.224, 0.225),
}


class ModelSegmentationTool(Sam2Tool):
    """Shared part of the model-backed segmenters: settings, mask selection and the `_segment` hook."""

    settings_model: ClassVar[type[ModelSettings]] = ModelSettings
    # The model's settings only: the simulated parent's realism profile does not apply to a real model.
    config_keys: ClassVar[frozenset[str]] = frozenset(ModelSettings.model_fields)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.settings = ModelSettings.model_validate(config)

    def _segment(self, ctx: ToolContext, image_index: int, points: np.ndarray) -> tuple[np.ndarray, float]:
        image = ctx.image(image_index)
        mask, score = self.predict(image, points)
        if not mask.any():
            raise ToolError(
                f"the segmentation model found no object at the {len(points)} given point(s); "
                "try a point inside the object"
            )
        return mask, score

    def predict(self, image: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, float]:
        """The best mask ``(H, W)`` bool for positive normalized ``points`` ``(N, 2)`` and its predicted IoU."""
        import torch

        height, width = image.shape[:2]
        with torch.inference_mode():
            logits, scores = self._forward(image, np.asarray(points, dtype=np.float64).reshape(-1, 2))
        best = int(torch.argmax(scores))
        low_res = logits[best][None, None].float()
        mask = torch.nn.functional.interpolate(low_res, size=(height, width), mode="bilinear")[0, 0] > 0.0
        return mask.cpu().numpy(), float(scores[best])

    def _forward(self, image: np.ndarray, points: np.ndarray) -> tuple[Any, Any]:
        """Low-resolution mask logits ``(K, h, w)`` and predicted IoUs ``(K,)`` of the candidate masks."""
        raise NotImplementedError


class Sam2ModelTool(ModelSegmentationTool):
    """SAM 2 (the paper's segmenter)."""

    def setup(self) -> None:
        from transformers import Sam2Model

        self.model, self.device, self.dtype = self.settings.load(Sam2Model)
        self.prep = ImagePrep.from_folder(self.settings.model_path, _SAM2_PREP)

    def _forward(self, image: np.ndarray, points: np.ndarray) -> tuple[Any, Any]:
        import torch

        scale = np.array([self.prep.width, self.prep.height])
        output = self.model(
            pixel_values=self.prep([image], self.device, self.dtype),
            input_points=torch.as_tensor(points * scale, dtype=self.dtype, device=self.device)[None, None],
            input_labels=torch.ones((1, 1, len(points)), dtype=torch.int64, device=self.device),
            multimask_output=len(points) == 1,
        )
        return output.pred_masks[0, 0], output.iou_scores[0, 0]


class SamModelTool(ModelSegmentationTool):
    """SAM (the first Segment Anything), through its transformers processor."""

    def setup(self) -> None:
        from transformers import SamModel, SamProcessor

        self.model, self.device, self.dtype = self.settings.load(SamModel)
        self.processor = SamProcessor.from_pretrained(str(self.settings.model_path), local_files_only=True)

    def _forward(self, image: np.ndarray, points: np.ndarray) -> tuple[Any, Any]:
        height, width = image.shape[:2]
        pixels = (points * np.array([width, height])).tolist()
        inputs = self.processor(
            images=image, input_points=[[pixels]], input_labels=[[[1] * len(points)]], return_tensors="pt"
        )
        output = self.model(
            pixel_values=inputs["pixel_values"].to(device=self.device, dtype=self.dtype),
            input_points=inputs["input_points"].to(device=self.device, dtype=self.dtype),
            input_labels=inputs["input_labels"].to(self.device),
            multimask_output=len(points) == 1,
        )
        # SAM pads the image to a square before the encoder: cut the padding off the low-res logits.
        logits = output.pred_masks[0, 0]
        resized_h, resized_w = (int(v) for v in inputs["reshaped_input_sizes"][0])
        pad = self.processor.image_processor.pad_size
        pad_h, pad_w = pad["height"], pad["width"]
        low_h, low_w = logits.shape[-2:]
        logits = logits[:, : round(low_h * resized_h / pad_h), : round(low_w * resized_w / pad_w)]
        return logits, output.iou_scores[0, 0]
