"""The ``hf`` policy: a local transformers model (a VLM such as Qwen2.5-VL, or a text-only causal LM such as
SmolLM2, whose images go to the tools only) with batched generation, for evaluation and for training.

Many episodes call :meth:`HFPolicy.act` at once; a background task gathers their prompts into one
batched call of the policy's engine (:mod:`~spacetools.agent.policies.engine`) that runs in a worker
thread, so the event loop (and the Toolshed calls of the other episodes) keeps running meanwhile. Each turn
samples from its own seed (the rollout's ``sampling_seed``, the episode id, the turn; see
:mod:`~spacetools.agent.policies.generation`), so an episode's tokens do not depend on which episodes share
its batch or on the order they reach the model.

One path serves evaluation and training: every episode grows its own token-exact
:class:`~spacetools.agent.tokens.ChatTrace` (the context as the chat template renders it, the sampled ids
as they are, with the log-probabilities they were sampled with) and hands it to the rollout as
``EpisodeState.tokens``, so a trainer reads the exact ids the model produced instead of re-tokenising the
text, and the next turn feeds the model the same ids plus only the new context (its KV cache kept). torch
and transformers are imported only when a model is loaded, so the rest of the package imports without them.
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
from spacetools.agent.policies.engine import Engine, HFEngine
from spacetools.agent.policies.generation import (
    Row,
    Sampled,
    end_token_ids,
    generation_config,
    vision_token_ids,
)
from spacetools.agent.policies.kvcache import KVSlot
from spacetools.agent.tokens import ChatTrace, ProcessorTokenizer
from spacetools.agent.types import EpisodeTokens, Policy
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
class _Episode:
    """One episode as the model saw and wrote it (kept in ``EpisodeState.policy_data``): its token trace,
    the tokenizer holding its images' pixel inputs, and its KV cache."""

    chat: ChatTrace
    tokenizer: ProcessorTokenizer
    images_seen: int  # conversation images already handed to the tokenizer
    messages_seen: int  # chat messages already in the trace
    prompt_length: int
    cache: KVSlot | None
    scored: bool = True  # every turn came with its log-probabilities

    def tokens(self, blocked: list[int]) -> EpisodeTokens:
        trace = self.chat.trace
        logprobs = trace.logprobs if self.scored else None
        return EpisodeTokens(
            trace.ids, trace.mask, logprobs, self.prompt_length, self.tokenizer.vision_inputs, blocked
        )


@dataclass
class _Request:
    row: Row
    future: asyncio.Future[tuple[Sampled, float]]  # the row's tokens and its share of the batch's time


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
        record: sample for training: the checkpoint's logit processors (Qwen2.5 Instruct's repetition
            penalty) are switched off, so a trainer scoring logits / temperature scores what was sampled.
        kv_cache: keep each episode's KV cache across its turns and share the system prefix between
            episodes (text-only models; a VLM's turns are encoded whole).
        engine: what runs the model (default: :class:`~spacetools.agent.policies.engine.HFEngine`).

    Every episode's tokens go onto its state (``EpisodeState.tokens``, so ``Trajectory.tokens``): the
    sampling seed of a turn is the rollout's ``sampling_seed`` with the task id and the turn.
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
        record: bool = False,
        kv_cache: bool = True,
        engine: Engine | None = None,
    ) -> None:
        _check_settings(max_new_tokens, temperature, batch_size, batch_wait_ms)
        if record and temperature == 0:
            raise ValueError("hf policy: training samples need a temperature above 0")
        self.name = name
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.format = ChatFormat.of(processor)
        self.vision = self.format.vision
        self.temperature = temperature
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.record = record
        self.kv_cache = kv_cache and not self.vision
        self.generation_config = generation_config(model, self.tokenizer, max_new_tokens, neutral=record)
        self.blocked = vision_token_ids(self.tokenizer)  # never sampled: the processor writes pixels
        self.engine: Engine = engine or HFEngine(
            model,
            self.generation_config,
            temperature=temperature,
            blocked=self.blocked,
            ends=end_token_ids(self.generation_config, self.tokenizer),
        )
        self._batcher: _Batcher | None = None
        self._stats = _Stats()

    async def act(self, state: EpisodeState) -> str:
        """Queue this episode's prompt for the next batch and return the generated assistant turn; its
        tokens grow the episode's trace (``state.tokens``) and count in ``state.model_tokens``."""
        conversation, images = self.format.convert(state.messages, state.images)
        episode = state.policy_data
        if not isinstance(episode, _Episode):
            tokenizer = ProcessorTokenizer(self.processor, images)
            chat = ChatTrace(tokenizer, conversation)
            cache = KVSlot() if self.kv_cache else None
            episode = _Episode(chat, tokenizer, len(images), len(conversation), len(chat.trace.ids), cache)
            state.policy_data = episode
        else:
            episode.tokenizer.add_images(images[episode.images_seen :])
            episode.chat.add_messages(conversation[episode.messages_seen :])
            episode.images_seen = len(images)
        seed = zlib.crc32(f"{state.sampling_seed}/{state.task.id}/{state.turn}".encode())
        limit = state.max_new_tokens or self.generation_config.max_new_tokens
        row = Row(
            list(episode.chat.trace.ids), list(episode.tokenizer.vision_inputs), seed, limit, episode.cache
        )
        sampled, generate_s = await self._queue(row)
        state.model_tokens += len(sampled.ids)
        episode.scored = episode.scored and sampled.logprobs is not None
        text = episode.chat.add_generation(sampled.ids, sampled.logprobs or [0.0] * len(sampled.ids))
        episode.messages_seen = len(conversation) + 1  # the conversation so far and the turn just sampled
        state.tokens = episode.tokens(self.blocked)
        stats = state.policy_stats
        stats["generate_s"] = stats.get("generate_s", 0.0) + generate_s
        stats["sampled_entropy"] = stats.get("sampled_entropy", 0.0) + sampled.entropy
        stats["cached_tokens"] = stats.get("cached_tokens", 0.0) + sampled.cached
        stats["prompt_tokens"] = stats.get("prompt_tokens", 0.0) + len(row.ids)
        return text

    def refresh(self) -> None:
        """Tell the engine the model's weights changed (after a training update)."""
        self.engine.refresh(self.model)

    def stats(self) -> dict[str, float]:
        """Requests served, ``generate`` calls (batches) and their sizes, new tokens, generation time and the
        mean entropy per sampled token (temperature applied), since :meth:`reset_stats`; and the tokens the
        running call has written so far (live progress)."""
        stats = self._stats
        return {
            "requests": stats.requests,
            "batches": stats.batches,
            "max_batch": stats.max_batch,
            "mean_batch": stats.requests / stats.batches if stats.batches else 0.0,
            "new_tokens": stats.new_tokens,
            "generate_s": stats.generate_s,
            "entropy": stats.entropy_sum / stats.new_tokens if stats.new_tokens else 0.0,
            "tokens_in_flight": self.engine.in_flight,
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

    async def _queue(self, row: Row) -> tuple[Sampled, float]:
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
                # Closing mid-generation (Ctrl-C) stops the worker thread at its next token, and must not
                # leave these callers waiting forever.
                self.engine.interrupt.set()
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

    def _generate(self, rows: list[Row]) -> list[tuple[Sampled, float]]:
        """One batched call of the engine (runs in a worker thread); each row with its share of the time."""
        self.engine.interrupt.clear()  # a new run (a policy outlives an interrupted one)
        started = time.perf_counter()
        sampled = self.engine.generate(rows)
        elapsed = time.perf_counter() - started
        stats = self._stats
        stats.generate_s += elapsed
        stats.batches += 1
        stats.requests += len(rows)
        stats.max_batch = max(stats.max_batch, len(rows))
        stats.new_tokens += sum(len(result.ids) for result in sampled)
        stats.entropy_sum += sum(result.entropy for result in sampled)
        return [(result, elapsed / len(rows)) for result in sampled]


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
    kv_cache: bool = True,
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
        kv_cache=kv_cache,
    )
