"""The seam between a policy and what runs its model: an :class:`Engine` turns rows into sampled tokens.

:class:`HFEngine`, transformers' ``generate`` with our row sampler, is the default and the reference:
another engine (CTranslate2, in ``ct2.py``) must sample what it samples. The HF engine keeps each
episode's KV cache across its turns and shares the system prefix between new episodes
(:mod:`~spacetools.agent.policies.kvcache`); `refresh` after a weight update drops what the old weights
computed. Generation stops at the next token once `interrupt` is set (Ctrl-C), raising
:class:`GenerationInterrupted` instead of returning cut turns.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Protocol

from spacetools.agent.policies.decoding import decode_rows
from spacetools.agent.policies.generation import Row, Sampled, applies_processors, generate_rows
from spacetools.agent.policies.kvcache import (
    MIN_SHARED_PREFIX,
    KVSlot,
    batch_cache,
    common_prefix,
    encode_prefix,
    usable_length,
)


class Engine(Protocol):
    """Generates the next turn of a batch of rows; each row's tokens depend on its own prompt and seed.

    `interrupt`, set from another thread, stops a running `generate` at its next token with
    :class:`GenerationInterrupted`; `in_flight` counts the tokens the running call has written so far.
    """

    interrupt: threading.Event

    @property
    def in_flight(self) -> int: ...

    def generate(self, rows: list[Row]) -> list[Sampled]: ...

    def refresh(self, model: Any) -> None:
        """Use ``model``'s current weights (after a training update)."""
        ...


class GenerationInterrupted(RuntimeError):
    """Generation stopped before its turns were complete (the run is being interrupted)."""


class HFEngine:
    """Batched decoding with transformers models, reusing each row's cache (``Row.cache``) and a shared
    prompt prefix: a text-only model's batches in our own loop, which drops each row as it ends
    (:func:`~spacetools.agent.policies.decoding.decode_rows`), a VLM's batches in ``generate``
    (:func:`~spacetools.agent.policies.generation.generate_rows`)."""

    def __init__(
        self, model: Any, config: Any, *, temperature: float, blocked: list[int], ends: set[int]
    ) -> None:
        self.model = model
        self.config = config
        self.temperature = temperature
        self.blocked = blocked
        self.ends = ends
        self.prefix: KVSlot | None = None  # the last new episode's prompt, whose start the next ones share
        self.interrupt = threading.Event()  # set from the event loop's thread: stop at the next token
        self.in_flight = 0  # tokens written so far by the running call (live progress)
        # False: every batch through `generate`, kept whole to its longest row (a benchmark's baseline).
        self.drop_finished_rows = True

    def refresh(self, model: Any) -> None:
        self.model = model
        self.prefix = None  # keys and values of the old weights

    def generate(self, rows: list[Row]) -> list[Sampled]:
        import torch

        self.in_flight = 0
        with torch.inference_mode():
            unshared = self._start_new(rows)
            width = max(len(row.ids) for row in rows)
            fed = max(len(row.ids) - usable_length(row.cache, row.ids) for row in rows)
            past = None
            if fed < width:
                past = batch_cache(self.model, [(row.ids, row.cache) for row in rows], width, fed)
            # A VLM's rotary positions come from its image grid, which our loop does not build: a VLM's
            # batches stay in `generate` even when they carry no image.
            vlm = getattr(self.model.config, "vision_config", None) is not None
            whole = not self.drop_finished_rows or applies_processors(self.config) or vlm
            decode = (
                functools.partial(generate_rows, config=self.config)
                if whole or any(row.vision for row in rows)
                else functools.partial(decode_rows, pad_token_id=self.config.pad_token_id)
            )
            sampled, slots = decode(
                self.model,
                rows,
                temperature=self.temperature,
                blocked=self.blocked,
                ends=self.ends,
                past=past,
                interrupt=self.interrupt,
                on_step=self._count,
            )
            self.in_flight = 0
            if self.interrupt.is_set():
                raise GenerationInterrupted("generation interrupted")
            for row, result, slot in zip(rows, sampled, slots, strict=True):
                result.cached = max(len(row.ids) - fed, 0)
                if row.cache is not None and slot is not None:
                    row.cache.ids, row.cache.layers = slot.ids, slot.layers
            if unshared is not None and unshared.cache is not None:
                self.prefix = unshared.cache.cropped(len(unshared.ids))
        return sampled

    def _count(self, writing: int) -> None:
        self.in_flight += writing

    def _start_new(self, rows: list[Row]) -> Row | None:
        """Start new episodes' caches from the shared prefix (encoding it once when several new episodes
        share a start the stored one does not cover); returns a new row that shared nothing, if any."""
        new = [row for row in rows if row.cache is not None and not row.cache.layers]
        if not new:
            return None

        def shared(row: Row) -> int:
            return common_prefix(self.prefix.ids, row.ids) if self.prefix else 0

        if len(new) > 1 and any(shared(row) < MIN_SHARED_PREFIX for row in new):
            start = min(min(common_prefix(new[0].ids, row.ids) for row in new), len(new[0].ids) - 1)
            if start >= MIN_SHARED_PREFIX and start > shared(new[0]):
                self.prefix = encode_prefix(self.model, new[0].ids[:start])
        unshared = None
        for row in new:
            assert row.cache is not None
            length = min(shared(row), len(row.ids) - 1)
            if length >= MIN_SHARED_PREFIX:
                assert self.prefix is not None
                start_slot = self.prefix.cropped(length)
                row.cache.ids, row.cache.layers = start_slot.ids, start_slot.layers
            elif unshared is None:
                unshared = row
        return unshared
