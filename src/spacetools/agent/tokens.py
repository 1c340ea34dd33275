"""Token-exact trajectories: what a policy fed its model and what the model sampled, token by token.

Training must use the ids the model actually sampled, never a re-tokenisation of their text: the same text
can tokenise differently (merges across turn boundaries, whitespace), which silently corrupts the policy
gradient. A `TokenTrace` is therefore built as the episode runs: the chat template renders each context
delta (system and user turns, tool responses, the generation prompt) as text, which is tokenised and marked
0; the sampled ids are appended as they are, marked 1, with their sampling log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class ChatTokenizer(Protocol):
    """The part of a transformers tokenizer (or processor) a trace needs."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass
class TokenTrace:
    """`ids`, `mask` (1 on sampled tokens) and `logprobs` (sampling log-probability, 0 on context), aligned."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def add_context(self, ids: list[int]) -> None:
        self.ids.extend(ids)
        self.mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def add_generated(self, ids: list[int], logprobs: list[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} log-probabilities")
        self.ids.extend(ids)
        self.mask.extend([1] * len(ids))
        self.logprobs.extend(logprobs)

    def to_dict(self) -> dict[str, list[Any]]:
        return {"ids": self.ids, "mask": self.mask, "logprobs": self.logprobs}

    @classmethod
    def from_dict(cls, data: dict[str, list[Any]]) -> TokenTrace:
        trace = cls(list(data["ids"]), list(data["mask"]), list(data["logprobs"]))
        if not len(trace.ids) == len(trace.mask) == len(trace.logprobs):
            raise ValueError("a token trace's ids, mask and logprobs must have the same length")
        return trace


class ChatTrace:
    """Grows a `TokenTrace` turn by turn from an OpenAI-style chat, rendered by the model's chat template."""

    def __init__(self, tokenizer: ChatTokenizer, messages: list[dict[str, Any]]) -> None:
        self.tokenizer = tokenizer
        self.messages = list(messages)
        self.trace = TokenTrace()
        self._closing = ""  # template text owed after the last sampled turn, added with the next context
        self.trace.add_context(self._encode(self._render(self.messages, generation_prompt=True)))

    def add_generation(self, ids: list[int], logprobs: list[float]) -> str:
        """Record one sampled turn; returns its text (special tokens removed), also kept as the assistant turn."""
        self.trace.add_generated(ids, logprobs)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        sampled = self.tokenizer.decode(ids, skip_special_tokens=False)
        before = self._render(self.messages, generation_prompt=True)
        self.messages.append({"role": "assistant", "content": text})
        turn = self._render(self.messages, generation_prompt=False)[len(before) :]  # e.g. text<|im_end|>\n
        # What the template writes after the sampled tokens to close the turn: the newline after the end
        # token, or the end token itself when generation stopped at the length limit.
        self._closing = turn[len(sampled) :] if turn.startswith(sampled) else turn[len(text) :]
        return text

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        """Add the context that follows a sampled turn (tool responses, a user turn) and the next prompt."""
        before = self._render(self.messages, generation_prompt=False)
        self.messages.extend(messages)
        after = self._render(self.messages, generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("the chat template does not render the conversation as a growing prefix")
        self.trace.add_context(self._encode(self._closing + after[len(before) :]))
        self._closing = ""

    def _render(self, messages: list[dict[str, Any]], *, generation_prompt: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        return str(text)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []


class ProcessorTokenizer:
    """A `ChatTokenizer` over a VLM processor: each encoded chunk takes the next images of the conversation.

    A chunk's image placeholders are expanded by the processor into the image's vision tokens, and its pixel
    tensors are kept in order (`pixel_values`, `image_grid_thw` for Qwen2.5-VL), so a trace's ids and the
    pixels line up exactly as one call to the processor on the whole conversation would give.
    """

    def __init__(self, processor: Any, images: list[Any], image_token: str = "<|image_pad|>") -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_token = image_token
        self._images = list(images)
        self.vision_inputs: list[dict[str, Any]] = []

    def add_images(self, images: list[Any]) -> None:
        """Images that appeared in the conversation since (tool pictures shown to the model)."""
        self._images.extend(images)

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        return self.processor.apply_chat_template(conversation, **kwargs)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        count = text.count(self.image_token)
        if count > len(self._images):
            raise ValueError(f"the chat shows {count} more images than the conversation has")
        images, self._images = self._images[:count], self._images[count:]
        if not images:
            return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))
        inputs = self.processor(text=[text], images=images, return_tensors="pt", add_special_tokens=False)
        self.vision_inputs.append({key: value for key, value in inputs.items() if key not in _TEXT_KEYS})
        return [int(token) for token in inputs["input_ids"][0]]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))


_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
