"""The ``hf`` policy: a local transformers model (a VLM such as Qwen2.5-VL, or a text-only causal LM such as
SmolLM2, whose images go to the tools only) with batched generation, for evaluation and for training.

Many episodes call :meth:`HFPolicy.act` at once; a background task gathers their prompts into one
left-padded ``generate`` call that runs in a worker thread, so the event loop (and the Toolshed calls of
the other episodes) keeps running meanwhile. Each turn samples from its own seed (the policy's ``seed``,
the episode id, the turn; see :mod:`~spacetools.agent.policies.generation`), so an episode's tokens do
not depend on which episodes share its batch or on the order they reach the model.

With ``record=True`` (what GRPO samples with) every episode grows its own token-exact
:class:`~spacetools.agent.tokens.ChatTrace`: the context as the chat template renders it, the sampled ids
as they are, with the log-probabilities they were sampled with, so the trainer reads the exact ids the
model produced instead of re-tokenising the text. Episodes are keyed by task id: run the n samples of a
GRPO group as tasks with distinct ids. torch and transformers are imported only when a model is loaded,
so the rest of the package imports without them.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from spacetools.agent.chat import TOOL_RESPONSE_OPEN, to_chat_messages
from spacetools.agent.policies.generation import (
    Row,
    Sampled,
    end_token_ids,
    generate_rows,
    generation_config,
    vision_token_ids,
)
from spacetools.agent.tokens import ChatTrace, ProcessorTokenizer, TokenTrace
from spacetools.agent.types import Policy
from spacetools.kit import imagecodec
from spacetools.kit.loading import DTYPES, load_processor, load_vlm
from spacetools.kit.textonly import TEXT_ONLY_NOTE, has_vision, image_note

if TYPE_CHECKING:
    from spacetools.agent.types import EpisodeState


def template_renders_tool_role(chat_template: str) -> bool:
    """Whether a chat template wraps ``tool`` messages itself (Qwen2.5's text template does, the VL one not)."""
    return TOOL_RESPONSE_OPEN in chat_template


@dataclass(frozen=True)
class ChatFormat:
    """How a model's processor wants an episode's chat: ``tool`` messages kept for a template that renders
    them (else gathered into ``user`` turns of ``<tool_response>`` blocks), images as pictures or, for a
    text-only model, as ``[image N]`` notes."""

    native_tool_role: bool
    vision: bool = True

    @classmethod
    def of(cls, processor: Any) -> ChatFormat:
        chat_template = processor.chat_template or processor.tokenizer.chat_template
        if not chat_template:
            raise ValueError("the model has no chat template")
        return cls(template_renders_tool_role(str(chat_template)), has_vision(processor))

    def convert(
        self, messages: list[dict[str, Any]], images: list[np.ndarray]
    ) -> tuple[list[dict[str, Any]], list[Image.Image]]:
        """An episode's chat as a processor conversation and its images in prompt order.

        Image parts become ``{"type": "image"}`` placeholders and their pictures are listed in the order
        the placeholders appear, so placeholders and pixels line up (see
        :func:`spacetools.agent.chat.to_chat_messages` for the tool messages). Without ``vision`` an image
        part becomes the note ``[image N]``, no picture is listed, and the system message says that only
        the tools see the images.
        """
        ordered_images: list[Image.Image] = []

        def image_part(index: int) -> dict[str, Any]:
            if not self.vision:
                return {"type": "text", "text": image_note(index)}
            try:
                ordered_images.append(Image.fromarray(imagecodec.check_rgb(images[index])))
            except ValueError as error:
                raise ValueError(f"image {index}: {error}") from None
            return {"type": "image"}

        conversation = to_chat_messages(
            messages, len(images), image_part, native_tool_role=self.native_tool_role
        )
        return (conversation if self.vision else with_text_only_note(conversation)), ordered_images


def with_text_only_note(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with `TEXT_ONLY_NOTE` closing its system message (or as one, when it has none)."""
    note = {"type": "text", "text": TEXT_ONLY_NOTE}
    if conversation and conversation[0]["role"] == "system":
        first = conversation[0]
        return [
            {**first, "content": [*first["content"], {"type": "text", "text": "\n\n"}, note]},
            *conversation[1:],
        ]
    return [{"role": "system", "content": [note]}, *conversation]


@dataclass
class RecordedEpisode:
    """One episode as the model saw and wrote it: its token trace and its images' pixel inputs, in order."""

    chat: ChatTrace
    tokenizer: ProcessorTokenizer
    images_seen: int  # conversation images already handed to the tokenizer
    messages_seen: int  # chat messages already in the trace

    @property
    def trace(self) -> TokenTrace:
        return self.chat.trace

    @property
    def vision(self) -> list[dict[str, Any]]:
        return self.tokenizer.vision_inputs


@dataclass
class _Request:
    row: Row
    future: asyncio.Future[Sampled]


@dataclass
class _Batcher:
    """The request queue and the background task of one event loop."""

    loop: asyncio.AbstractEventLoop
    pending: deque[_Request] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None


@dataclass
class _Stats:
    requests: int = 0
    batches: int = 0
    max_batch: int = 0
    new_tokens: int = 0
    generate_s: float = 0.0  # the model busy generating (the rest of a rollout it waits on tools)
    entropy_sum: float = 0.0  # summed entropy of the distributions the sampled tokens came from


class HFPolicy(Policy):
    """A loaded Hugging Face VLM or causal LM as a :class:`~spacetools.agent.types.Policy`.

    Args:
        model: the model, on the device it runs on.
        processor: its processor (a text-only model's tokenizer as a ``TextProcessor``), with a chat template.
        name: the policy's name in trajectories and reports.
        max_new_tokens: the longest assistant turn, in tokens, unless the rollout gives a turn its own
            limit (``EpisodeState.max_new_tokens``).
        temperature: 0 decodes greedily; above 0 samples from softmax(logits / temperature).
        batch_size: the most prompts one ``generate`` call takes.
        batch_wait_ms: how long the first queued prompt waits for others to join its batch.
        seed: with the episode id and the turn, the seed of each turn's sampling.
        record: keep each episode's token trace (:meth:`recorded`), sampled from the logits alone: the
            checkpoint's logit processors (Qwen2.5 Instruct's repetition penalty) are switched off, so a
            trainer scoring logits / temperature scores what was sampled.
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        name: str = "hf",
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        batch_size: int = 8,
        batch_wait_ms: float = 20,
        seed: int = 0,
        record: bool = False,
    ) -> None:
        _check_settings(max_new_tokens, temperature, batch_size, batch_wait_ms)
        if record and temperature == 0:
            raise ValueError(
                "hf policy: recording needs a temperature above 0 (greedy tokens have no logprobs)"
            )
        self.name = name
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.format = ChatFormat.of(processor)
        self.vision = self.format.vision
        self.temperature = temperature
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.seed = seed
        self.record = record
        self.generation_config = generation_config(model, self.tokenizer, max_new_tokens, neutral=record)
        self.ends = end_token_ids(self.generation_config, self.tokenizer)
        self.blocked = vision_token_ids(self.tokenizer)  # never sampled: the processor writes pixels
        self._episodes: dict[str, RecordedEpisode] = {}
        self._batcher: _Batcher | None = None
        self._stats = _Stats()

    async def act(self, state: EpisodeState) -> str:
        """Queue this episode's prompt for the next batch and return the generated assistant turn (its
        tokens are added to ``state.model_tokens``)."""
        conversation, images = self.format.convert(state.messages, state.images)
        seed = zlib.crc32(f"{self.seed}/{state.task.id}/{state.turn}".encode())
        limit = state.max_new_tokens or self.generation_config.max_new_tokens
        if not self.record:
            tokenizer = ProcessorTokenizer(self.processor, images)
            prompt = self.processor.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=False
            )
            sampled = await self._queue(Row(tokenizer.encode(prompt), tokenizer.vision_inputs, seed, limit))
            state.model_tokens += len(sampled.ids)
            return str(self.tokenizer.decode(sampled.ids, skip_special_tokens=True))
        episode = self._episodes.get(state.task.id)
        if episode is None:
            tokenizer = ProcessorTokenizer(self.processor, images)
            episode = RecordedEpisode(
                ChatTrace(tokenizer, conversation), tokenizer, len(images), len(conversation)
            )
            self._episodes[state.task.id] = episode
        else:
            episode.tokenizer.add_images(images[episode.images_seen :])
            episode.chat.add_messages(conversation[episode.messages_seen :])
            episode.images_seen = len(images)
        sampled = await self._queue(Row(list(episode.trace.ids), list(episode.vision), seed, limit))
        assert sampled.logprobs is not None  # recording samples (temperature > 0)
        state.model_tokens += len(sampled.ids)
        text = episode.chat.add_generation(sampled.ids, sampled.logprobs)
        episode.messages_seen = len(conversation) + 1  # the conversation so far and the turn just sampled
        return text

    def recorded(self, episode_id: str) -> RecordedEpisode:
        """The recorded episode (``record=True``): ids, mask, sampling log-probabilities and pixels."""
        return self._episodes[episode_id]

    def forget(self) -> None:
        """Drop the recorded episodes (after a training step has used them)."""
        self._episodes.clear()

    def stats(self) -> dict[str, float]:
        """Requests served, ``generate`` calls (batches) and their sizes, new tokens, generation time and the
        mean entropy per sampled token (temperature applied), since :meth:`reset_stats`."""
        stats = self._stats
        return {
            "requests": stats.requests,
            "batches": stats.batches,
            "max_batch": stats.max_batch,
            "mean_batch": stats.requests / stats.batches if stats.batches else 0.0,
            "new_tokens": stats.new_tokens,
            "generate_s": stats.generate_s,
            "entropy": stats.entropy_sum / stats.new_tokens if stats.new_tokens else 0.0,
        }

    def reset_stats(self) -> None:
        self._stats = _Stats()

    async def aclose(self) -> None:
        """Stop the background batching task (queued requests are cancelled)."""
        batcher, self._batcher = self._batcher, None
        if batcher is None or batcher.worker is None:
            return
        batcher.worker.cancel()
        for request in batcher.pending:
            request.future.cancel()
        await asyncio.gather(batcher.worker, return_exceptions=True)

    async def _queue(self, row: Row) -> Sampled:
        batcher = self._current_batcher()
        request = _Request(row, batcher.loop.create_future())
        batcher.pending.append(request)
        batcher.arrived.set()
        return await request.future

    def _current_batcher(self) -> _Batcher:
        # A policy may outlive one event loop (each asyncio.run is a new loop); queues belong to a loop.
        loop = asyncio.get_running_loop()
        batcher = self._batcher
        if batcher is None or batcher.loop is not loop or batcher.worker is None or batcher.worker.done():
            batcher = _Batcher(loop)
            batcher.worker = loop.create_task(self._serve(batcher), name=f"{self.name} batcher")
            self._batcher = batcher
        return batcher

    async def _serve(self, batcher: _Batcher) -> None:
        while True:
            while not batcher.pending:
                batcher.arrived.clear()
                await batcher.arrived.wait()
            deadline = batcher.loop.time() + self.batch_wait_s
            while len(batcher.pending) < self.batch_size:
                remaining = deadline - batcher.loop.time()
                if remaining <= 0:
                    break
                batcher.arrived.clear()
                try:
                    await asyncio.wait_for(batcher.arrived.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            count = min(self.batch_size, len(batcher.pending))
            batch = [batcher.pending.popleft() for _ in range(count)]
            batch = [request for request in batch if not request.future.done()]
            if not batch:
                continue
            try:
                results = await asyncio.to_thread(self._generate, [request.row for request in batch])
            except asyncio.CancelledError:
                # Closing mid-generation must not leave these callers waiting forever.
                for request in batch:
                    request.future.cancel()
                raise
            except Exception as error:
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)
            else:
                for request, result in zip(batch, results, strict=True):
                    if not request.future.done():
                        request.future.set_result(result)

    def _generate(self, rows: list[Row]) -> list[Sampled]:
        """One batched ``generate`` (runs in a worker thread)."""
        started = time.perf_counter()
        sampled = generate_rows(
            self.model,
            rows,
            self.generation_config,
            temperature=self.temperature,
            blocked=self.blocked,
            ends=self.ends,
        )
        stats = self._stats
        stats.generate_s += time.perf_counter() - started
        stats.batches += 1
        stats.requests += len(rows)
        stats.max_batch = max(stats.max_batch, len(rows))
        stats.new_tokens += sum(len(result.ids) for result in sampled)
        stats.entropy_sum += sum(result.entropy for result in sampled)
        return sampled


def _check_settings(max_new_tokens: int, temperature: float, batch_size: int, batch_wait_ms: float) -> None:
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError("hf policy: max_new_tokens and batch_size must be at least 1")
    if temperature < 0 or batch_wait_ms < 0:
        raise ValueError("hf policy: temperature and batch_wait_ms must not be negative")


def load_hf_policy(
    model_path: str,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    max_new_tokens: int = 512,
    temperature: float = 0.0,
    batch_size: int = 8,
    batch_wait_ms: float = 20,
    seed: int = 0,
) -> HFPolicy:
    """The ``hf`` policy on a local model folder (the model, its processor or tokenizer files and a chat
    template); a LoRA adapter's folder loads as its base model with the adapter merged in.

    ``device``: the torch device to run on (``cpu``, ``cuda``, ``cuda:1``…); ``dtype``: ``auto`` (the
    checkpoint's own), ``float32``, ``float16`` or ``bfloat16``; the rest as :class:`HFPolicy` takes them.
    """
    path = Path(model_path)
    if not path.is_dir():
        raise FileNotFoundError(f"hf policy: model directory {model_path!r} does not exist")
    if dtype not in DTYPES:
        raise ValueError(f"hf policy: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    _check_settings(max_new_tokens, temperature, batch_size, batch_wait_ms)
    processor = load_processor(path)
    model = load_vlm(path, device=device, dtype=dtype)
    return HFPolicy(
        model,
        processor,
        name=f"hf:{path.name}",
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        batch_size=batch_size,
        batch_wait_ms=batch_wait_ms,
        seed=seed,
    )
