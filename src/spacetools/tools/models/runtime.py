"""What every model backend shares: settings, device and dtype, loading from a local folder, batching.

A model is loaded once per tool instance in `setup()` (`local_files_only=True`: no downloads), put on
the configured device in half precision where the device supports it, and fed batches that are moved
to the device once.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    import torch

_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")
_T = TypeVar("_T")
# transformers builds models under process-wide patches (meta-device init), so two models loading at
# once in one process (in-process instances start in threads) corrupt each other: load one at a time.
_LOADING = threading.Lock()


class ModelSettings(BaseModel):
    """The settings of a model backend, validated when a tool-set config is read and again in `setup()`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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


def torch_device(device: str) -> torch.device:
    """The torch device, with a clear error when it is not present on this machine."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} requested but CUDA is not available on this machine")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise RuntimeError(
                f"device {device!r} requested but only {torch.cuda.device_count()} GPU(s) exist"
            )
    if device == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("device 'mps' requested but it is not available on this machine")
    return torch.device(device)


def torch_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The weights' dtype: ``auto`` is float16 on an accelerator and float32 on the CPU."""
    import torch

    if dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.float16
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def load_pretrained(
    model_cls: Any, settings: ModelSettings, **options: Any
) -> tuple[Any, torch.device, torch.dtype]:
    """``model_cls.from_pretrained`` from the local folder, on the device and dtype, in eval mode."""
    device = torch_device(settings.device)
    dtype = torch_dtype(settings.dtype, device)
    with _LOADING:
        model = model_cls.from_pretrained(
            str(settings.model_path), local_files_only=True, dtype=dtype, **options
        )
        return model.to(device).eval(), device, dtype


def batches(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ImagePrep(BaseModel):
    """Resize to a fixed size, rescale and normalise: the preprocessing of Depth Pro and SAM 2.

    Read from the model folder's ``preprocessor_config.json`` (the keys transformers writes), because
    the transformers processors of these two models need torchvision, which this project does not use.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

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


def load_processor(path: Path | str) -> Any:
    """``AutoProcessor`` for ``path``; without torchvision, the same processor class minus its video part.

    transformers' video processors need torchvision, which CPU installs lack, and a processor such as
    Qwen2.5-VL's refuses to build without one. Images need none of it (the PIL image processor is used),
    so we build a subclass of the checkpoint's processor whose only sub-processors are image and text.
    """
    import transformers
    from transformers import AutoConfig, AutoProcessor
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    try:
        return AutoProcessor.from_pretrained(path, local_files_only=True)
    except (ImportError, OSError) as error:
        # A folder saved by the processor below has no video processor config to load either.
        if "torchvision" not in str(error).lower() and "video processor" not in str(error).lower():
            raise
        missing_torchvision = error
    model_type = AutoConfig.from_pretrained(path, local_files_only=True).model_type
    processor_name = PROCESSOR_MAPPING_NAMES.get(model_type)
    processor_cls = getattr(transformers, processor_name, None) if processor_name else None
    if processor_cls is None:
        raise ImportError(f"no processor for model type {model_type!r} loads without torchvision") from (
            missing_torchvision
        )
    return _without_video(processor_cls).from_pretrained(path, local_files_only=True)


def _without_video(processor_cls: Any) -> Any:
    """A subclass of ``processor_cls`` that takes only an image processor and a tokenizer."""

    def __init__(
        self: Any, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None
    ) -> None:
        # ProcessorMixin takes its sub-processors from this signature, so the video one is never loaded.
        processor_cls.__init__(
            self,
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=None,
            chat_template=chat_template,
        )

    # The parent's name: `save_pretrained` records it as `processor_class`, and AutoProcessor must find a
    # class of that name when the saved folder is loaded again (else it silently returns the tokenizer).
    return type(processor_cls.__name__, (processor_cls,), {"__init__": __init__})
