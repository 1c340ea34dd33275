"""Loading models from local folders: the one place the policies, the trainers and the model tools do it.

Every load reads a local folder only (`local_files_only`: no downloads) and takes a process-wide lock:
transformers builds models under process-wide patches (meta-device init), so two models loading at once
in one process (in-process tool instances start in threads) corrupt each other.

`load_vlm` loads the model a policy drives or a stage trains: a VLM (Qwen2.5-VL) or a text-only causal
LM (SmolLM2), whose processor `load_processor` wraps as a VLM's (`textonly.TextProcessor`). A folder
holding a LoRA adapter (`adapter_config.json`, written by peft) loads as its base model with the adapter
on top, once it is checked against its base (every LoRA weight on a layer of the base, with its size).
`load_pretrained` loads a model of a given class (the perception models of the tools).
torch and transformers are imported on a call only, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import logging
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spacetools.kit.textonly import TextProcessor

if TYPE_CHECKING:
    import torch

    from spacetools.kit.trainable import LoraShape

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
DTYPES = ("auto", "float32", "float16", "bfloat16")
"""The dtypes `load_vlm` takes by name; `auto` is the checkpoint's own."""
_LOADING = threading.Lock()
logger = logging.getLogger(__name__)


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
    check_model_folder(folder)
    try:
        torch_device(device)  # before any weights load
    except RuntimeError as error:
        raise ValueError(" ".join(str(error).split())) from None
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


def _load_language_model(
    folder: Path, dtype: str | torch.dtype, *, keep_adapter: bool, chain: tuple[Path, ...] = ()
) -> Any:
    if (folder / ADAPTER_CONFIG).is_file():
        from peft import PeftModel

        chain = (*chain, folder)
        base_folder = adapter_base(folder)
        if base_folder in chain:
            cycle = " -> ".join(str(link) for link in (*chain, base_folder))
            raise ValueError(f"{folder}: the adapter's base is itself or an adapter on it ({cycle})")
        check_model_folder(base_folder)
        base = _load_language_model(base_folder, dtype, keep_adapter=False, chain=chain)
        check_adapter_fits(folder, base_folder, base)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model: Any = PeftModel.from_pretrained(base, folder, is_trainable=keep_adapter)
        for warning in caught:  # peft's word on the adapter goes to the run's log, not only the console
            logger.warning("%s: %s", folder, " ".join(str(warning.message).split()))
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
    """The model folder a LoRA adapter was trained on (as peft recorded it); a relative path is taken from
    the adapter's folder, so an adapter moved together with its base still finds it."""
    config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not base or not isinstance(base, str):
        raise ValueError(f"{folder}: the adapter does not name its base model")
    return (folder / Path(base).expanduser()).resolve()


def check_model_folder(folder: Path) -> None:
    """A local model or adapter folder: its ``config.json`` (or ``adapter_config.json``) is a JSON object;
    an empty or cut-short one would fail deep inside transformers."""
    name = ADAPTER_CONFIG if (folder / ADAPTER_CONFIG).is_file() else "config.json"
    config = folder / name
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{folder} holds no model (no config.json or {ADAPTER_CONFIG})") from None
    except (OSError, ValueError) as error:  # JSONDecodeError, UnicodeDecodeError, a folder named so
        raise ValueError(f"{config} is not a model config ({' '.join(str(error).split())})") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{config} is not a model config (not a JSON object)")


def check_adapter_fits(folder: Path, base_folder: Path, base: Any) -> None:
    """Every LoRA weight of the adapter lands on a linear layer of ``base`` with its number of features;
    else one line (an adapter of another architecture, or of a base of another size). peft itself would
    only warn and leave the base model's weights to be scored under the adapter's name."""
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        return  # an adapter saved as a pickle (.bin) is left to peft
    from safetensors import safe_open

    layers = dict(base.named_modules())
    with safe_open(str(weights), "pt") as tensors:
        for key in tensors.keys():  # noqa: SIM118  # a safetensors file, not a dict
            module_name, dot_lora, part = key.partition(".lora_")
            if not dot_lora or part not in ("A.weight", "B.weight"):
                continue
            name = module_name.removeprefix("base_model.model.")
            layer = layers.get(name)
            if layer is None or not hasattr(layer, "in_features"):
                raise ValueError(
                    f"{folder}: the adapter does not fit its base {base_folder}: the base has no linear "
                    f"layer {name} (an adapter of another architecture?)"
                )
            shape = tensors.get_slice(key).get_shape()
            found, expected = (
                (shape[1], layer.in_features) if part[0] == "A" else (shape[0], layer.out_features)
            )
            if found != expected:
                raise ValueError(
                    f"{folder}: the adapter does not fit its base {base_folder}: {name} has {expected} "
                    f"features where the adapter has {found} (an adapter of a base of another size?)"
                )


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
    check_model_folder(folder)
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
    # An adapter folder with processor files has no model config of its own: its base's says the type.
    config_folder = adapter_base(path) if (path / ADAPTER_CONFIG).is_file() else path
    model_type = AutoConfig.from_pretrained(config_folder, local_files_only=True).model_type
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
