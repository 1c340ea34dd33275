"""An episode as training sees it: token ids, the mask of the model's tokens, and the pixels that go with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from spacetools.agent.chat import to_chat_messages
from spacetools.agent.tokens import ChatTrace, ProcessorTokenizer
from spacetools.train.objectives import token_logprobs


@dataclass
class Example:
    """One encoded episode: `ids (T,)`, `mask (T,)` 1 on assistant tokens, and the processor's pixel inputs."""

    ids: torch.Tensor
    mask: torch.Tensor
    vision: dict[str, torch.Tensor] = field(default_factory=dict)
    logprobs: torch.Tensor | None = None  # (T,) what the tokens were sampled with, for GRPO's ratio


def encode_episode(processor: Any, messages: list[dict[str, Any]], images: list[np.ndarray]) -> Example:
    """Token ids of an episode as its model's chat template renders it, with the assistant mask."""
    ordered: list[np.ndarray] = []

    def image_part(index: int) -> dict[str, Any]:
        ordered.append(images[index])
        return {"type": "image"}

    native = "<tool_response>" in str(processor.chat_template or "")
    chat = to_chat_messages(messages, len(images), image_part, native_tool_role=native)
    tokenizer = ProcessorTokenizer(processor, ordered)
    eos = processor.tokenizer.convert_tokens_to_ids(processor.tokenizer.eos_token)
    first = next((i for i, message in enumerate(chat) if message["role"] == "assistant"), len(chat))
    trace = ChatTrace(tokenizer, chat[:first])
    context: list[dict[str, Any]] = []
    for message in chat[first:]:
        if message["role"] != "assistant":
            context.append(message)
            continue
        if context:
            trace.add_messages(context)
            context = []
        text = _text_of(message["content"])
        ids = [*tokenizer.encode(text), eos]
        trace.add_generation(ids, [0.0] * len(ids))
    vision = join_vision(tokenizer.vision_inputs)
    return Example(torch.tensor(trace.trace.ids), torch.tensor(trace.trace.mask), vision)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the tokens that stand for pixels: a policy must never write them (the processor does), or
    the next forward pass finds an image slot with no image behind it."""
    vocab = tokenizer.get_vocab()
    return sorted(vocab[token] for token in VISION_TOKENS if token in vocab)


def forward_logprobs(
    model: Any, example: Example, device: str, blocked: list[int] | None = None
) -> torch.Tensor:
    """`(1, T)` log-probabilities of the episode's tokens under `model` (0 at position 0).

    `blocked` token ids get no probability, as when they were suppressed while sampling, so the
    distribution here is the one the tokens were sampled from.
    """
    ids = example.ids.unsqueeze(0).to(device)  # (1, T)
    vision = {key: value.to(device) for key, value in example.vision.items()}
    logits = model(input_ids=ids, **vision).logits  # (1, T, V)
    if not blocked:
        return token_logprobs(logits, ids)
    logits = logits.float().index_fill(-1, torch.tensor(blocked, device=logits.device), float("-inf"))
    logp = token_logprobs(logits, ids)
    # The prompt's own image tokens now score -inf; they are context (mask 0), so give them 0.
    return logp.masked_fill(torch.isinf(logp), 0.0)


def join_vision(chunks: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """The processor outputs of a conversation's chunks as one set of pixel inputs, in image order."""
    return {key: torch.cat([chunk[key] for chunk in chunks]) for key in (chunks[0] if chunks else {})}
