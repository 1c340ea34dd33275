"""The ``hf`` policy: a local transformers model (a VLM such as Qwen2.5-VL, or a text-only causal LM such as
SmolLM2, whose images go to the tools only) with batched generation.

Many episodes call :meth:`HFPolicy.act` at once; a background task gathers their prompts into one
left-padded ``generate`` call that runs in a worker thread, so the event loop (and the Toolshed calls
of the other episodes) keeps running meanwhile. torch and transformers are imported only when a
policy is built, so the rest of the package imports without them.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from spacetools.agent.chat import TOOL_RESPONSE_OPEN, to_chat_messages
from spacetools.kit import imagecodec
from spacetools.kit.loading import load_processor, load_vlm
from spacetools.kit.textonly import TEXT_ONLY_NOTE, has_vision, image_note

if TYPE_CHECKING:
    from spacetools.agent.types import EpisodeState

_DTYPES = ("auto", "float32", "float16", "bfloat16")


def template_renders_tool_role(chat_template: str) -> bool:
    """Whether a chat template wraps ``tool`` messages itself (Qwen2.5's text template does, the VL one not)."""
    return TOOL_RESPONSE_OPEN in chat_template


def convert_messages(
    messages: list[dict[str, Any]], images: list[np.ndarray], *, native_tool_role: bool, vision: bool = True
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """An episode's chat as a processor conversation and its images in prompt order.

    Image parts become ``{"type": "image"}`` placeholders and their pictures are listed in the order
    the placeholders appear, so placeholders and pixels line up (see
    :func:`spacetools.agent.chat.to_chat_messages` for the tool messages). Without ``vision`` (a
    text-only model) an image part becomes the note ``[image N]``, no picture is listed, and the system
    message says that only the tools see the images.
    """
    ordered_images: list[Image.Image] = []

    def image_part(index: int) -> dict[str, Any]:
        if not vision:
            return {"type": "text", "text": image_note(index)}
        try:
            ordered_images.append(Image.fromarray(imagecodec.check_rgb(images[index])))
        except ValueError as error:
            raise ValueError(f"image {index}: {error}") from None
        return {"type": "image"}

    conversation = to_chat_messages(messages, len(images), image_part, native_tool_role=native_tool_role)
    return (conversation if vision else with_text_only_note(conversation)), ordered_images


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
class _Request:
    prompt: str
    images: list[Image.Image]
    future: asyncio.Future[str]


@dataclass
class _Batcher:
    """The request queue and the background task of one event loop."""

    loop: asyncio.AbstractEventLoop
    pending: deque[_Request] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None


class HFPolicy:
    """A local Hugging Face VLM or causal LM as a :class:`~spacetools.agent.types.Policy`.

    Args:
        model_path: a local directory holding the model, its processor (or tokenizer) files and a chat
            template; a LoRA adapter's folder loads as its base model with the adapter merged in.
        device: torch device to run on (``cpu``, ``cuda``, ``cuda:1``…).
        dtype: ``auto`` (the checkpoint's own), ``float32``, ``float16`` or ``bfloat16``.
        max_new_tokens: the longest assistant turn, in tokens.
        temperature: 0 decodes greedily; above 0 samples.
        batch_size: the most prompts one ``generate`` call takes.
        batch_wait_ms: how long the first queued prompt waits for others to join its batch.
    """

    def __init__(
        self,
        model_path: str,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        batch_size: int = 8,
        batch_wait_ms: float = 20,
    ) -> None:
        path = Path(model_path)
        if not path.is_dir():
            raise FileNotFoundError(f"hf policy: model directory {model_path!r} does not exist")
        if dtype not in _DTYPES:
            raise ValueError(f"hf policy: dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        if max_new_tokens < 1 or batch_size < 1:
            raise ValueError("hf policy: max_new_tokens and batch_size must be at least 1")
        if temperature < 0 or batch_wait_ms < 0:
            raise ValueError("hf policy: temperature and batch_wait_ms must not be negative")

        self.name = f"hf:{path.name}"
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.processor = load_processor(path)
        self.vision = has_vision(self.processor)
        self.tokenizer = self.processor.tokenizer
        # Decoder-only batches must be padded on the left so every prompt ends where generation starts.
        self.tokenizer.padding_side = "left"
        chat_template = self.processor.chat_template or self.tokenizer.chat_template
        if not chat_template:
            raise ValueError(f"hf policy: {model_path!r} has no chat template")
        self.native_tool_role = template_renders_tool_role(chat_template)

        self.model: Any = load_vlm(path, device=device, dtype=dtype)
        self.generation_config = _generation_config(self.model, self.tokenizer, max_new_tokens, temperature)

        self._batcher: _Batcher | None = None
        self._stats = {"requests": 0, "batches": 0, "max_batch": 0, "new_tokens": 0, "generate_s": 0.0}

    async def act(self, state: EpisodeState) -> str:
        """Queue this episode's prompt for the next batch and return the generated assistant turn."""
        conversation, images = convert_messages(
            state.messages, state.images, native_tool_role=self.native_tool_role, vision=self.vision
        )
        prompt = self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        batcher = self._current_batcher()
        request = _Request(prompt, images, batcher.loop.create_future())
        batcher.pending.append(request)
        batcher.arrived.set()
        return await request.future

    def stats(self) -> dict[str, float]:
        """Requests served, ``generate`` calls (batches), batch sizes, new tokens and generation time."""
        batches = self._stats["batches"]
        return {**self._stats, "mean_batch": self._stats["requests"] / batches if batches else 0.0}

    async def aclose(self) -> None:
        """Stop the background batching task (queued requests are cancelled)."""
        batcher, self._batcher = self._batcher, None
        if batcher is None or batcher.worker is None:
            return
        batcher.worker.cancel()
        for request in batcher.pending:
            request.future.cancel()
        await asyncio.gather(batcher.worker, return_exceptions=True)

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
                texts = await asyncio.to_thread(self._generate, batch)
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
                for request, text in zip(batch, texts, strict=True):
                    if not request.future.done():
                        request.future.set_result(text)

    def _generate(self, batch: list[_Request]) -> list[str]:
        """One left-padded ``generate`` over the batch (runs in a worker thread); only new tokens are decoded."""
        import torch

        images = [image for request in batch for image in request.images]
        inputs = self.processor(
            text=[request.prompt for request in batch],
            images=images or None,
            padding=True,
            return_tensors="pt",
        ).to(self.model.device)
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(**inputs, generation_config=self.generation_config)
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        self._stats["generate_s"] += time.perf_counter() - started
        self._stats["batches"] += 1
        self._stats["requests"] += len(batch)
        self._stats["max_batch"] = max(self._stats["max_batch"], len(batch))
        self._stats["new_tokens"] += int((new_tokens != self.generation_config.pad_token_id).sum())
        return self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def _generation_config(model: Any, tokenizer: Any, max_new_tokens: int, temperature: float) -> Any:
    """The checkpoint's generation settings with our length, decoding mode and a pad token."""
    config = copy.deepcopy(model.generation_config)
    config.max_new_tokens = max_new_tokens
    config.do_sample = temperature > 0
    if config.do_sample:
        config.temperature = temperature
    else:
        # Greedy decoding ignores these; clearing them keeps transformers from warning on every call.
        config.temperature = config.top_p = config.top_k = None
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_token_id is None:
        raise ValueError("hf policy: the tokenizer has neither a pad nor an end-of-sequence token")
    config.pad_token_id = pad_token_id
    return config
