"""A text-only causal LM in the place of a VLM: its eyes are the tools.

A causal LM without a vision tower (SmolLM2, Qwen2.5 text) runs everywhere a VLM does: its tokenizer is
wrapped in the shape of a VLM processor (`TextProcessor`, what `loading.load_processor` returns for
it), the conversation's images become `[image N]` notes in the prompt (the pictures go to the tools
only), and the system prompt says so (`TEXT_ONLY_NOTE`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TEXT_ONLY_NOTE = (
    "You cannot see images: each image appears as [image N] and only the tools see it, so measure it "
    "with the tools (pass N as image_index)."
)


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
