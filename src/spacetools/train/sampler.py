"""A policy that trains: it samples from the model being trained and records every episode token-exactly.

The rollout calls `act` as for any policy; behind it each episode grows its own `ChatTrace` (context
rendered by the chat template, sampled ids appended as they are, with their sampling log-probabilities),
so the trainer later reads the exact ids the model produced instead of re-tokenising the text. Episodes
are keyed by task id: run the n samples of a GRPO group as tasks with distinct ids.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from dataclasses import dataclass
from typing import Any

import torch

from spacetools.agent.policies.hf import convert_messages
from spacetools.agent.tokens import ChatTrace, ProcessorTokenizer
from spacetools.agent.types import EpisodeState
from spacetools.kit.textonly import has_vision
from spacetools.train.episodes import Example, join_vision, vision_token_ids
from spacetools.train.objectives import token_entropy


@dataclass
class _Episode:
    chat: ChatTrace
    tokenizer: ProcessorTokenizer
    images_seen: int  # conversation images already handed to the tokenizer
    messages_seen: int  # chat messages already in the trace
    turns: int = 0


class TracingPolicy:
    """Samples turns from `model` (temperature sampling, no top-k/top-p) and keeps each episode's trace."""

    name = "tracing"

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        temperature: float = 1.0,
        max_new_tokens: int = 256,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.processor = processor
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.device = device
        self.native_tool_role = "<tool_response>" in str(processor.chat_template or "")
        self.vision = has_vision(processor)
        self.generation = sampling_settings(model, temperature, max_new_tokens)
        self.blocked = vision_token_ids(processor.tokenizer)  # never sampled: see `vision_token_ids`
        self._episodes: dict[str, _Episode] = {}
        self._lock = asyncio.Lock()  # one model: turns are generated one at a time
        # Each turn samples from its own seed (this, the episode id, the turn), so the tokens do not depend on
        # the order in which concurrent episodes reach the model: a resumed run samples what an unbroken one did.
        self.seed = 0
        self.busy_s = 0.0  # seconds spent generating (the rest of a rollout the model waits on tools)
        self.entropy_sum = 0.0  # summed entropy of the distributions each sampled token came from
        self.sampled_tokens = 0

    async def act(self, state: EpisodeState) -> str:
        chat, ordered = convert_messages(
            state.messages, state.images, native_tool_role=self.native_tool_role, vision=self.vision
        )
        episode = self._episodes.get(state.task.id)
        if episode is None:
            tokenizer = ProcessorTokenizer(self.processor, ordered)
            episode = _Episode(ChatTrace(tokenizer, chat), tokenizer, len(ordered), len(chat))
            self._episodes[state.task.id] = episode
        else:
            episode.tokenizer.add_images(ordered[episode.images_seen :])
            episode.chat.add_messages(chat[episode.messages_seen :])
            episode.images_seen = len(ordered)
        async with self._lock:
            started = time.perf_counter()
            ids, logprobs = await asyncio.to_thread(self._sample, state.task.id, episode)
            self.busy_s += time.perf_counter() - started
        text = episode.chat.add_generation(ids, logprobs)
        episode.messages_seen = len(chat) + 1  # the conversation so far and the turn just sampled
        return text

    def example(self, episode_id: str) -> Example:
        """The recorded episode: ids, mask (1 on sampled tokens), pixels and sampling log-probabilities."""
        episode = self._episodes[episode_id]
        trace = episode.chat.trace
        return Example(
            ids=torch.tensor(trace.ids),
            mask=torch.tensor(trace.mask),
            vision=join_vision(episode.tokenizer.vision_inputs),
            logprobs=torch.tensor(trace.logprobs),
        )

    def forget(self) -> None:
        """Drop the recorded episodes (after a training step has used them)."""
        self._episodes.clear()

    @torch.no_grad()
    def _sample(self, episode_id: str, episode: _Episode) -> tuple[list[int], list[float]]:
        torch.manual_seed(zlib.crc32(f"{self.seed}/{episode_id}/{episode.turns}".encode()))
        episode.turns += 1
        ids = torch.tensor([episode.chat.trace.ids], device=self.device)  # (1, T)
        vision = {k: v.to(self.device) for k, v in join_vision(episode.tokenizer.vision_inputs).items()}
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            **vision,
            **self.generation,
            suppress_tokens=self.blocked or None,
            output_scores=True,
            return_dict_in_generate=True,
        )
        sampled = out.sequences[0, ids.shape[1] :]  # (N,)
        scores = torch.stack(out.scores, dim=1)[
            0
        ].float()  # (N, V): the temperature-scaled logits sampled from
        logprobs = torch.log_softmax(scores, dim=-1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
        eos = self.processor.tokenizer.eos_token_id
        keep = len(sampled)
        if eos is not None and (sampled == eos).any():  # generate pads after the end token
            keep = int((sampled == eos).nonzero()[0]) + 1
        self.entropy_sum += float(token_entropy(scores[:keep]).sum())
        self.sampled_tokens += keep
        return sampled[:keep].tolist(), logprobs[:keep].tolist()

    def reset_stats(self) -> None:
        """Start a new step's generation time and entropy."""
        self.busy_s = self.entropy_sum = 0.0
        self.sampled_tokens = 0

    @property
    def entropy(self) -> float:
        """Mean entropy per sampled token since `reset_stats` (temperature applied)."""
        return self.entropy_sum / self.sampled_tokens if self.sampled_tokens else 0.0


# Logit processors a checkpoint's generation_config may switch on (Qwen2.5 Instruct ships
# `repetition_penalty: 1.05`), set to the value that leaves the distribution alone: the trainer scores
# tokens with the logits divided by the temperature and nothing else, so sampling must do exactly that.
NEUTRAL_PROCESSORS: dict[str, Any] = {
    "top_k": 0,
    "top_p": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
}


def sampling_settings(model: Any, temperature: float, max_new_tokens: int) -> dict[str, Any]:
    """`generate` settings that sample from softmax(logits / temperature) alone.

    Processors with a neutral value are set to it (which overrides the checkpoint's default); one whose
    only off-switch is unset cannot be overridden per call, so a checkpoint that sets it is refused.
    """
    defaults = getattr(model, "generation_config", None)
    refused = [
        key
        for key, neutral in NEUTRAL_PROCESSORS.items()
        if neutral is None and defaults is not None and getattr(defaults, key, None) not in (None, [], {})
    ]
    if refused:
        raise ValueError(
            f"the model's generation_config sets {', '.join(refused)}, which the GRPO trainer cannot "
            "score; remove it from generation_config.json"
        )
    neutral = {key: value for key, value in NEUTRAL_PROCESSORS.items() if value is not None}
    return {**neutral, "do_sample": True, "temperature": temperature, "max_new_tokens": max_new_tokens}
