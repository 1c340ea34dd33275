"""`roborefer` and `vlm` on real images: a pointing model asked in words, its points parsed.

Two ways to reach the model:
- ``transformers``: a local vision-language model (Qwen2.5-VL, or Molmo with ``trust_remote_code``)
  loaded from a folder and run with greedy decoding;
- ``endpoint``: any OpenAI-compatible chat endpoint serving a pointing model (how RoboRefer is served,
  e.g. by vLLM), sent the image as a data URL.
The answer is read by `points.parse_points`; the result text and variables are the simulated tool's,
because only its `_points` step is replaced.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from spacetools.kit.definition import ToolContext, ToolError
from spacetools.kit.imagecodec import to_data_url
from spacetools.kit.loading import load_processor
from spacetools.tools.models.points import PointFormat, parse_points, prompt_for
from spacetools.tools.models.runtime import ModelSettings
from spacetools.tools.pointing import PointingTool, RoboReferTool, VLMPointingTool


class PointingSettings(BaseModel):
    """How to ask for points and read them (shared by both ways to reach a model)."""

    point_format: PointFormat = Field("auto", description="The model's point syntax (see points.py).")
    prompt: str | None = Field(None, description="Question template with {obj_name}; default per format.")
    max_new_tokens: int = Field(256, ge=1, le=8192)


class TransformersPointingSettings(ModelSettings, PointingSettings):
    trust_remote_code: bool = Field(False, description="Needed for Molmo, whose code is not in transformers.")


class EndpointPointingSettings(PointingSettings):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: str = Field(description="The endpoint's OpenAI-compatible base URL, e.g. http://host:8000/v1.")
    model: str = Field(description="The served model's name.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key, if any.")
    timeout_s: float = Field(60.0, gt=0)


class TransformersPointing(PointingTool):
    """A pointing model run locally through transformers."""

    settings_model: ClassVar[type[BaseModel]] = TransformersPointingSettings
    # The model's settings only: the simulated parent's realism profile does not apply to a real model.
    config_keys: ClassVar[frozenset[str]] = frozenset(TransformersPointingSettings.model_fields)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.settings = TransformersPointingSettings.model_validate(config)

    def setup(self) -> None:
        from transformers import AutoModelForImageTextToText

        remote = self.settings.trust_remote_code
        self.processor = load_processor(self.settings.model_path, trust_remote_code=remote)
        self.network, self.device, self.dtype = self.settings.load(
            AutoModelForImageTextToText, trust_remote_code=remote
        )

    def _points(self, ctx: ToolContext, obj_name: str, image_index: int, all_instances: bool) -> np.ndarray:
        image = ctx.image(image_index)
        answer, (width, height) = self.generate(
            image, prompt_for(obj_name, self.settings.point_format, self.settings.prompt)
        )
        points = parse_points(answer, self.settings.point_format, width, height)
        return points if all_instances else points[:1]

    def generate(self, image: np.ndarray, question: str) -> tuple[str, tuple[int, int]]:
        """The model's answer and the size (width, height) of the image as the model saw it."""
        import torch

        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = self.processor(text=[text], images=[image], return_tensors="pt").to(self.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        with torch.inference_mode():
            generated = self.network.generate(
                **inputs, max_new_tokens=self.settings.max_new_tokens, do_sample=False
            )
        answer = self.processor.batch_decode(
            generated[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True
        )[0]
        return answer, self._seen_size(inputs, image)

    def _seen_size(self, inputs: Any, image: np.ndarray) -> tuple[int, int]:
        """Qwen2.5-VL answers in pixels of its resized input (patch grid x patch size); others, the image."""
        grid = inputs.get("image_grid_thw")
        patch = getattr(getattr(self.processor, "image_processor", None), "patch_size", None)
        if grid is None or patch is None:
            return image.shape[1], image.shape[0]
        _, rows, cols = (int(v) for v in grid[0])
        return cols * int(patch), rows * int(patch)


class EndpointPointing(PointingTool):
    """A pointing model behind an OpenAI-compatible chat endpoint."""

    settings_model: ClassVar[type[BaseModel]] = EndpointPointingSettings
    # The model's settings only: the simulated parent's realism profile does not apply to a real model.
    config_keys: ClassVar[frozenset[str]] = frozenset(EndpointPointingSettings.model_fields)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.settings = EndpointPointingSettings.model_validate(config)

    def setup(self) -> None:
        import openai

        key_env = self.settings.api_key_env
        if key_env and not os.environ.get(key_env):
            raise RuntimeError(f"environment variable {key_env} (the endpoint's API key) is not set")
        self.client = openai.OpenAI(
            base_url=self.settings.base_url,
            api_key=os.environ[key_env] if key_env else "none",
            timeout=self.settings.timeout_s,
            max_retries=1,
        )

    def _points(self, ctx: ToolContext, obj_name: str, image_index: int, all_instances: bool) -> np.ndarray:
        import openai

        image = ctx.image(image_index)
        question = prompt_for(obj_name, self.settings.point_format, self.settings.prompt)
        try:
            response = self.client.chat.completions.create(
                model=self.settings.model,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": to_data_url(image)}},
                            {"type": "text", "text": question},
                        ],
                    }
                ],
                max_tokens=self.settings.max_new_tokens,
                temperature=0.0,
            )
        except openai.OpenAIError as error:
            raise ToolError(f"the pointing endpoint failed: {type(error).__name__}: {error}") from None
        answer = response.choices[0].message.content or ""
        points = parse_points(answer, self.settings.point_format, image.shape[1], image.shape[0])
        return points if all_instances else points[:1]


class RoboReferTransformersTool(TransformersPointing, RoboReferTool):
    """`roborefer` answered by a local model."""


class RoboReferEndpointTool(EndpointPointing, RoboReferTool):
    """`roborefer` answered by an OpenAI-compatible endpoint (RoboRefer served by vLLM, say)."""


class VLMTransformersTool(TransformersPointing, VLMPointingTool):
    """`vlm` answered by a local model (Molmo, Qwen2.5-VL)."""


class VLMEndpointTool(EndpointPointing, VLMPointingTool):
    """`vlm` answered by an OpenAI-compatible endpoint."""
