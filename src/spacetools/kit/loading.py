"""Loading models from local folders: the one place the policies, the trainers and the model tools do it.

Every load reads a local folder only (`local_files_only`: no downloads) and takes a process-wide lock:
transformers builds models under process-wide patches (meta-device init), so two models loading at once
in one process (in-process tool instances start in threads) corrupt each other.

`load_vlm` loads the model a policy drives or a stage trains: a VLM (Qwen2.5-VL) or a text-only causal
LM (SmolLM2), whose processor `load_processor` wraps as a VLM's (`textonly.TextProcessor`). A folder
holding a LoRA adapter (`adapter_config.json`, written by peft) loads as its base model with the adapter
on top. `load_pretrained` loads a model of a given class (the perception models of the tools).
torch and transformers are imported on a call only, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spacetools.kit.textonly import TextProcessor

if TYPE_CHECKING:
    import torch

    from spacetools.kit.trainable import LoraShape

ADAPTER_CONFIG = "adapter_config.json"
DTYPES = ("auto", "float32", "float16", "bfloat16")
"""The dtypes `load_vlm` takes by name; `auto` is the checkpoint's own."""
_LOADING = threading.Lock()


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


def load_pretrained(
    model_cls: Any, path: Path | str, *, device: torch.device, dtype: torch.dtype, **options: Any
) -> Any:
    """``model_cls.from_pretrained`` from the local folder, on the device and dtype, in eval mode."""
    with _LOADING:
        model = model_cls.from_pretrained(str(path), local_files_only=True, dtype=dtype, **options)
        return model.to(device).eval()


def load_vlm(
    path: Path | str,
    *,
    device: str = "cpu",
    dtype: str | torch.dtype = "auto",
    trainable: str | None = None,
    lora: LoraShape | None = None,
    freeze_vision: bool = False,
    gradient_checkpointing: bool = False,
) -> Any:
    """The VLM or causal LM of a local folder on `device`; an adapter folder as its base plus the adapter.

    `dtype`: one of `DTYPES` or a torch dtype. Without `trainable` the model is for inference: an adapter
    is merged into its base weights (the merged model named after the adapter folder, so an adapter
    trained on top of it records that folder as its base), no weight requires gradients, eval mode.
    `trainable` (`full`, `last_layers:N`, `lora`; see `trainable.set_trainable`) loads for training:
    with `lora`, `lora` puts a fresh adapter on the (merged) model, and without it the folder's own
    adapter keeps training (a resumed stage). `freeze_vision` freezes the vision tower of a fully trained
    model; `gradient_checkpointing` trades compute for activation memory.
    """
    folder = Path(path).resolve()
    keep_adapter = trainable == "lora" and lora is None
    if trainable is not None:
        from spacetools.kit.trainable import check_trainable

        check_trainable(trainable)
    if keep_adapter and not (folder / ADAPTER_CONFIG).is_file():
        raise ValueError(f"{folder} holds no LoRA adapter to keep training; give the settings of a new one")
    model = _load_language_model(folder, _torch_dtype(dtype), keep_adapter=keep_adapter)
    if trainable is None:
        model.requires_grad_(False)
    else:
        from spacetools.kit.trainable import set_trainable

        model = set_trainable(model, trainable, lora, freeze_vision=freeze_vision)
    model.to(torch_device(device))
    if gradient_checkpointing:
        model.activation_checkpointing_enable()
    return model.eval() if trainable is None else model


def _torch_dtype(dtype: str | torch.dtype) -> str | torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    resolved: torch.dtype = getattr(torch, dtype)
    return resolved


def _load_language_model(folder: Path, dtype: str | torch.dtype, *, keep_adapter: bool) -> Any:
    if (folder / ADAPTER_CONFIG).is_file():
        from peft import PeftModel

        base = _load_language_model(adapter_base(folder), dtype, keep_adapter=False)
        model: Any = PeftModel.from_pretrained(base, folder, is_trainable=keep_adapter)
        if keep_adapter:
            return model
        merged = model.merge_and_unload()
        merged.name_or_path = merged.config.name_or_path = str(folder)
        return merged
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    model_cls = AutoModelForImageTextToText if is_vision_model(folder) else AutoModelForCausalLM
    with _LOADING:
        return model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)


def adapter_base(folder: Path) -> Path:
    """The model folder a LoRA adapter was trained on (as peft recorded it)."""
    config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{folder}: the adapter does not name its base model")
    return Path(base)


def is_vision_model(path: Path | str) -> bool:
    """Whether the folder's config is an image-text-to-text model (else a causal LM)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def load_processor(path: Path | str, *, trust_remote_code: bool = False) -> Any:
    """The model folder's processor; a text-only model's tokenizer wrapped as a `TextProcessor`.

    An adapter folder without tokenizer files has its base model's. `trust_remote_code`: the folder's
    own processor code may run (a pointing model such as Molmo).
    """
    from transformers import PreTrainedTokenizerBase

    folder = Path(path)
    if (folder / ADAPTER_CONFIG).is_file() and not (folder / "tokenizer_config.json").is_file():
        folder = adapter_base(folder)
    processor = _auto_processor(folder, trust_remote_code)
    return TextProcessor(processor) if isinstance(processor, PreTrainedTokenizerBase) else processor


def _auto_processor(path: Path, trust_remote_code: bool) -> Any:
    """``AutoProcessor`` for ``path``; without torchvision, the same processor class minus its video part.

    transformers' video processors need torchvision, which CPU installs lack, and a processor such as
    Qwen2.5-VL's refuses to build without one. Images need none of it (the PIL image processor is used),
    so we build a subclass of the checkpoint's processor whose only sub-processors are image and text.
    """
    import transformers
    from transformers import AutoConfig, AutoProcessor
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    try:
        return AutoProcessor.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
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
