"""What every model backend shares: settings, device and dtype, batching, image preprocessing.

A model is loaded once per tool instance in `setup()` (`ModelSettings.load`, through
`spacetools.kit.loading`: a local folder, no downloads), put on the configured device in half precision
where the device supports it, and fed batches that are moved to the device once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from spacetools.kit.loading import load_pretrained, torch_device

if TYPE_CHECKING:
    import torch

_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")
_T = TypeVar("_T")


class ModelSettings(BaseModel):
    """The settings of a model backend, validated when a tool-set config is read and again in `setup()`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model_path: Path = Field(description="Folder of the saved model and its processor (no downloads).")
    device: str = Field("cpu", description="cpu, cuda, cuda:N or mps.")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto", description="auto: float16 on an accelerator, float32 on the CPU."
    )
    batch_size: int = Field(1, ge=1, le=1024, description="Images per forward pass.")

    @field_validator("model_path")
    @classmethod
    def _folder_exists(cls, value: Path) -> Path:
        if not value.is_dir():
            raise ValueError(f"model folder {str(value)!r} does not exist")
        if not (value / "config.json").is_file():
            raise ValueError(f"model folder {str(value)!r} has no config.json (is it a saved model?)")
        return value

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        if not _DEVICE.fullmatch(value):
            raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {value!r}")
        return value

    def load(self, model_cls: Any, **options: Any) -> tuple[Any, torch.device, torch.dtype]:
        """`model_cls` from the model folder on the configured device and dtype, in eval mode, with them."""
        device = torch_device(self.device)
        dtype = torch_dtype(self.dtype, device)
        return (
            load_pretrained(model_cls, self.model_path, device=device, dtype=dtype, **options),
            device,
            dtype,
        )


def torch_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The weights' dtype: ``auto`` is float16 on an accelerator and float32 on the CPU."""
    import torch

    if dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.float16
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def batches(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ImagePrep(BaseModel):
    """Resize to a fixed size, rescale and normalise: the preprocessing of Depth Pro and SAM 2.

    Read from the model folder's ``preprocessor_config.json`` (the keys transformers writes), because
    the transformers processors of these two models need torchvision, which this project does not use.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    size: dict[str, int]
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    rescale_factor: float = 1 / 255

    @classmethod
    def from_folder(cls, folder: Path, defaults: dict[str, Any]) -> ImagePrep:
        """The folder's preprocessing, or ``defaults`` (the model family's) for what it does not set."""
        path = folder / "preprocessor_config.json"
        saved = json.loads(path.read_text()) if path.is_file() else {}
        return cls.model_validate({**defaults, **{k: v for k, v in saved.items() if v is not None}})

    @property
    def height(self) -> int:
        return self.size["height"]

    @property
    def width(self) -> int:
        return self.size["width"]

    def __call__(
        self, images: Sequence[np.ndarray], device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        """A ``(B, 3, height, width)`` batch on ``device`` (one transfer for the whole batch)."""
        import torch
        from PIL import Image

        resized = np.stack(
            [
                np.asarray(
                    Image.fromarray(image).resize((self.width, self.height), Image.Resampling.BILINEAR)
                )
                for image in images
            ]
        ).astype(np.float32)
        pixels = (resized * self.rescale_factor - np.asarray(self.image_mean, np.float32)) / np.asarray(
            self.image_std, np.float32
        )
        return torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy()).to(device=device, dtype=dtype)
