"""Loading the model a policy drives: a VLM, or a text-only causal LM whose eyes are the tools.

A causal LM without a vision tower (SmolLM2, Qwen2.5 text) runs everywhere a VLM does: its tokenizer is
wrapped in the shape of a VLM processor (`TextProcessor`), the conversation's images become `[image N]`
notes in the prompt (the pictures go to the tools only), and the system prompt says so. A folder holding
a LoRA adapter (`adapter_config.json`, written by peft) loads as its base model with the adapter on top.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEXT_ONLY_NOTE = (
    "You cannot see images: each image appears as [image N] and only the tools see it, so measure it "
    "with the tools (pass N as image_index)."
)
ADAPTER_CONFIG = "adapter_config.json"


def image_note(index: int) -> str:
    """What a text-only model reads where the conversation shows image `index`."""
    return f"[image {index}]"


class TextProcessor:
    """A causal LM's tokenizer with the interface of a VLM processor (no images).

    Chat contents given as lists of text parts are joined into strings first: text-only templates such as
    SmolLM2's concatenate `message['content']` as a string.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @property
    def chat_template(self) -> Any:
        return self.tokenizer.chat_template

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any:
        return self.tokenizer.apply_chat_template([_flat(message) for message in conversation], **kwargs)

    def __call__(self, text: Any = None, images: Any = None, **kwargs: Any) -> Any:
        if images:
            raise ValueError("a text-only model takes no images (the tools see them)")
        # As a VLM processor does: the chat template wrote every special token already.
        kwargs.setdefault("add_special_tokens", False)
        return self.tokenizer(text, **kwargs)

    def save_pretrained(self, path: str | Path) -> Any:
        return self.tokenizer.save_pretrained(path)


def _flat(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    if any(part.get("type") != "text" for part in content):
        raise ValueError("a text-only model's chat holds text parts only")
    return {**message, "content": "".join(part["text"] for part in content)}


def has_vision(processor: Any) -> bool:
    """Whether the model behind `processor` sees pixels (a VLM) or only text (a causal LM)."""
    return not isinstance(processor, TextProcessor)


def load_chat_processor(path: Path | str) -> Any:
    """The model folder's processor; a text-only model's tokenizer wrapped as a `TextProcessor`."""
    from transformers import PreTrainedTokenizerBase

    from spacetools.tools.models.runtime import load_processor

    folder = Path(path)
    if (folder / ADAPTER_CONFIG).is_file() and not _has_tokenizer(folder):
        folder = adapter_base(folder)
    processor = load_processor(folder)
    return TextProcessor(processor) if isinstance(processor, PreTrainedTokenizerBase) else processor


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer_config.json").is_file()


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


def load_language_model(path: Path | str, *, dtype: Any = "auto", train_adapter: bool = False) -> Any:
    """A VLM or causal LM from a local folder; an adapter folder as its base plus the adapter.

    `train_adapter`: keep an adapter trainable (resuming its training); otherwise it is merged into the
    base weights, and the merged model is named after the adapter folder, so an adapter trained on top
    of it records that folder as its base.
    """
    folder = Path(path).resolve()
    if (folder / ADAPTER_CONFIG).is_file():
        from peft import PeftModel

        base = load_language_model(adapter_base(folder), dtype=dtype)
        model: Any = PeftModel.from_pretrained(base, folder, is_trainable=train_adapter)
        if train_adapter:
            return model
        merged = model.merge_and_unload()
        merged.name_or_path = merged.config.name_or_path = str(folder)
        return merged
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    model_cls = AutoModelForImageTextToText if is_vision_model(folder) else AutoModelForCausalLM
    return model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)
