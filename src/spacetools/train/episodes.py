"""An episode as training sees it: token ids, the mask of the model's tokens, and the pixels that go with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from spacetools.agent.policies.generation import join_vision
from spacetools.agent.policies.hf import ChatFormat
from spacetools.agent.tokens import ChatTrace, ProcessorTokenizer
from spacetools.agent.types import Trajectory

LOGPROB_CHUNK = 1024  # positions whose (chunk, V) logits exist at once while scoring an episode


@dataclass
class Example:
    """One encoded episode: `ids (T,)`, `mask (T,)` 1 on assistant tokens, and the processor's pixel inputs."""

    ids: torch.Tensor
    mask: torch.Tensor
    vision: dict[str, torch.Tensor] = field(default_factory=dict)
    logprobs: torch.Tensor | None = None  # (T,) what the tokens were sampled with, for GRPO's ratio


def encode_episode(processor: Any, messages: list[dict[str, Any]], images: list[np.ndarray]) -> Example:
    """Token ids of an episode as its model's chat template renders it, with the assistant mask."""
    chat, ordered = ChatFormat.of(processor).convert(messages, images)
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


def sampled_example(trajectory: Trajectory) -> Example:
    """An episode as the rollout returned it: its ids, mask, pixels and sampling log-probabilities."""
    tokens = trajectory.tokens
    if tokens is None or tokens.logprobs is None:
        missing = "tokens" if tokens is None else "sampling log-probabilities"
        reason = (
            f"{trajectory.finish_reason}: {trajectory.error}"
            if trajectory.error
            else trajectory.finish_reason
        )
        raise ValueError(f"episode {trajectory.task_id!r} came back without {missing} ({reason})")
    return Example(
        ids=torch.tensor(tokens.ids),
        mask=torch.tensor(tokens.mask),
        vision=join_vision(tokens.vision),
        logprobs=torch.tensor(tokens.logprobs),
    )


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def forward_logprobs(
    model: Any,
    example: Example,
    device: str,
    blocked: list[int] | None = None,
    *,
    temperature: float = 1.0,
    chunk: int = LOGPROB_CHUNK,
) -> torch.Tensor:
    """`(1, T)` log-probabilities of the episode's model tokens (mask 1) under `model`; 0 elsewhere.

    Scored as they were sampled: logits divided by the sampling `temperature` (as TRL does), `blocked`
    token ids given no probability (they were suppressed while sampling). Only the model's own tokens
    are scored, `chunk` positions at a time, each chunk's logits recomputed in the backward pass: the
    memory is `(chunk, V)`, not the `(T, V)` float32 log-softmax of the whole episode.
    """
    ids = example.ids.unsqueeze(0).to(device)  # (1, T)
    vision = {key: value.to(device) for key, value in example.vision.items()}
    # The last hidden state, without the (T, V) logits (only the last position's are computed).
    out = model(input_ids=ids, **vision, output_hidden_states=True, logits_to_keep=1)
    hidden = out.hidden_states[-1][0]  # (T, H)
    return logprobs_from_hidden(
        hidden,
        model.get_output_embeddings(),
        ids[0],
        example.mask,
        blocked,
        temperature=temperature,
        chunk=chunk,
    )


def logprobs_from_hidden(
    hidden: torch.Tensor,
    head: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    blocked: list[int] | None = None,
    *,
    temperature: float = 1.0,
    chunk: int = LOGPROB_CHUNK,
) -> torch.Tensor:
    """`(1, T)` log-probabilities of the model tokens (`mask (T,)` 1) of `ids (T,)` from the last hidden
    states `hidden (T, H)` through the output `head`, as `forward_logprobs` scores them."""
    targets = mask.to(hidden.device).nonzero().squeeze(-1)  # (N,) positions the model wrote
    targets = targets[targets > 0]  # no logit predicts position 0
    blocked_ids = torch.tensor(blocked or [], dtype=torch.long, device=hidden.device)

    def score(states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:  # (C, H), (C,) -> (C,)
        logits = head(states).float() / temperature  # (C, V)
        if len(blocked_ids):
            logits = logits.index_fill(-1, blocked_ids, float("-inf"))
        return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

    picked = []
    for positions in targets.split(chunk):
        states, tokens = hidden[positions - 1], ids[positions].to(hidden.device)
        if torch.is_grad_enabled():
            picked.append(checkpoint(score, states, tokens, use_reentrant=False))
        else:
            picked.append(score(states, tokens))
    logp = torch.zeros(ids.shape[0], device=hidden.device, dtype=torch.float32)
    if picked:
        logp = logp.index_put((targets,), torch.cat(picked))
    return logp.unsqueeze(0)
