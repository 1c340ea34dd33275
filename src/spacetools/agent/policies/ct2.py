"""The ``ct2`` rollout engine: CTranslate2 generation for a text-only causal LM (Llama and Qwen2 families),
with the trained weights copied in after each update.

:class:`CT2Engine` serves the same :class:`~spacetools.agent.policies.generation.Row` ->
:class:`~spacetools.agent.policies.generation.Sampled` contract as the ``hf`` path, which stays the
reference:

- **Weights.** :meth:`CT2Engine.refresh` converts the loaded transformers model's current weights with
  CTranslate2's own converter (through a view of the model, since the converter deletes the modules it has
  read), saves them as float32 to a temporary folder in memory (``/dev/shm`` where there is one) and loads
  them with the engine's compute type. The converter's pass that looks for equal tensors to alias is
  skipped (it compares every pair of equal-shaped weights, ~10 s for SmolLM2-135M): a tied output
  projection is stored twice instead. So are its ``gc.collect()`` calls after each layer (a minute per
  refresh in a training process's heap), as the view frees nothing.
- **What is sampled.** At temperature T > 0 a token is drawn from softmax(logits / T) over the full
  vocabulary (no top-k or top-p truncation; ``sampling_topk=0``). CTranslate2 reports the log-probability
  of a token under softmax(logits) before its own temperature, so the temperature is folded into the
  output projection instead (its weights divided by T) and CTranslate2 samples at temperature 1: the
  reported log-probabilities are those of the distribution actually sampled. At T = 0 decoding is greedy
  and the log-probabilities are under softmax(logits).
- **Entropy.** CTranslate2 does not return the distributions, so ``Sampled.entropy`` is the summed
  surprisal of the written tokens (−log p): when sampling, its expectation is the summed entropy the
  ``hf`` path reports; when greedy, a lower bound of it (the min-entropy).
- **Ends and limits.** A row ends after an end token (kept, as on the ``hf`` path) or at its own
  ``max_new_tokens``; blocked ids are suppressed, so never written.
- **Shared prefix.** Rows of a batch that share a prefix of at least ``min_static_prompt`` tokens (the
  system prompt) encode it once, as CTranslate2's ``static_prompt``, and every row continues from its state.
- **Seeding.** CTranslate2 draws from one random stream per worker thread, seeded from its global seed
  when the thread first samples (``set_random_seed`` later does not reach a running worker). So the
  engine sets the seed (its ``seed``, plus the number of refreshes) before the first batch after each
  refresh, and the rows' own seeds are not used: the same batches in the same order after a refresh draw
  the same tokens, but a row's tokens depend on every batch since the refresh, on its batch mates and
  their order (the ``hf`` path draws each row from its own seed). The ``hf`` path stays the reference
  where a row's exact tokens must not depend on the batch.

ctranslate2 (the ``fast`` extra) and torch are imported only when an engine is built.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from spacetools.agent.policies.engine import GenerationInterrupted
from spacetools.agent.policies.generation import Row, Sampled

# Model configurations whose CTranslate2 conversion this engine was checked against (tests/agent/test_ct2.py).
SUPPORTED_CONFIGS = ("LlamaConfig", "Qwen2Config")
# Chosen by benchmarks/rollout_speed.py (RESULTS.md, 2026-12-03): int8 weights move the sampled
# log-probabilities by 0.17-0.22 nats on average (ratios exp(Δ) from 0.2 to 3.7 against transformers), far
# past GRPO's clip of 0.2, and change greedy answers, for ~1.6x float32's speed; float32 stays within 4e-5
# (mean 1e-5) and writes the hf path's greedy tokens.
DEFAULT_COMPUTE_TYPE = "float32"
COMPUTE_TYPES = ("float32", "int8_float32", "int8", "int16")


class _ModuleView:
    """A module tree seen through attribute access, where deleting an attribute hides it here only.

    CTranslate2's loaders ``delattr`` each layer's modules once read (to free memory on a one-off
    conversion); the engine converts a live model, which must keep them. ``isinstance`` sees the real class,
    so the loaders' branches on module types behave as on the model itself.
    """

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_hidden", set())

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._target)

    def __getattr__(self, name: str) -> Any:
        if name in self._hidden:
            raise AttributeError(name)
        return _view(getattr(self._target, name))

    def __delattr__(self, name: str) -> None:
        self._hidden.add(name)


def _view(value: Any) -> Any:
    import torch

    if isinstance(value, torch.nn.ModuleList):
        return [_ModuleView(module) for module in value]
    if isinstance(value, torch.nn.Module):
        return _ModuleView(value)
    return value


class _NoCollection:
    """Stands in for the ``gc`` module inside CTranslate2's converter while it reads a live model."""

    @staticmethod
    def collect(generation: int = 2) -> int:
        return 0


@contextlib.contextmanager
def _without_collections() -> Iterator[None]:
    """The converter calls ``gc.collect()`` after each layer to free the modules it deleted, which the
    engine's view never frees; in a training process's heap that is ~2 s a call, a minute a refresh."""
    from ctranslate2.converters import transformers as converter

    real = converter.gc
    converter.gc = _NoCollection
    try:
        yield
    finally:
        converter.gc = real


def converted_spec(model: Any, tokenizer: Any, temperature: float) -> tuple[Any, list[str]]:
    """The CTranslate2 model spec of `model`'s current weights (float32) and its vocabulary, with the output
    projection divided by `temperature` when that is above 0."""
    import torch
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    if hasattr(model, "peft_config"):
        raise ValueError("ct2 engine: merge the LoRA adapter into the model before converting it")
    config_name = type(model.config).__name__
    if config_name not in SUPPORTED_CONFIGS:
        raise ValueError(
            f"ct2 engine: {config_name} is not supported (text-only {', '.join(SUPPORTED_CONFIGS)} only)"
        )
    loader = _MODEL_LOADERS[config_name]
    with torch.no_grad(), _without_collections():
        spec = loader(_ModuleView(model), tokenizer)
        if temperature > 0:
            projection = spec.decoder.projection
            projection.weight = model.lm_head.weight.detach().float() / temperature
            if getattr(model.lm_head, "bias", None) is not None:
                projection.bias = model.lm_head.bias.detach().float() / temperature
        vocabulary = loader.get_vocabulary(model, tokenizer)
    if (
        spec.config.bos_token is None
    ):  # never used (rows carry their own ids) but required, as Qwen2's loader does
        spec.config.bos_token = tokenizer.pad_token or tokenizer.eos_token
    if len(set(vocabulary)) != len(vocabulary):
        raise ValueError(
            "ct2 engine: the vocabulary repeats a token string (CTranslate2 maps tokens by string)"
        )
    spec.validate()
    spec._quantize("float32")  # the public optimize() would also run the slow aliasing pass
    return spec, vocabulary


def shared_prefix(rows: Iterable[list[int]]) -> int:
    """The length of the prefix all rows share, leaving every row at least one token of its own."""
    rows = list(rows)
    limit = min(len(row) for row in rows) - 1
    first = rows[0]
    length = 0
    while length < limit and all(row[length] == first[length] for row in rows):
        length += 1
    return length


class CT2Engine:
    """CTranslate2 generation of token rows for a text-only causal LM (see the module's notes).

    Args:
        model: the transformers model (``LlamaForCausalLM``, ``Qwen2ForCausalLM``) whose weights to serve.
        tokenizer: its tokenizer (for the vocabulary and the special tokens).
        temperature: 0 decodes greedily; above 0 samples from softmax(logits / temperature).
        ends: the token ids that end a turn (kept in the output).
        blocked: token ids never written.
        compute_type: CTranslate2's compute type on the CPU (``float32``, ``int8_float32``, ``int8``…).
        threads: CPU threads of the engine (0: CTranslate2's default).
        min_static_prompt: the shortest shared prefix encoded once for the whole batch.
        seed: the seed of the draws after each refresh (see the module's notes).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float,
        ends: Iterable[int],
        blocked: Iterable[int] = (),
        compute_type: str = DEFAULT_COMPUTE_TYPE,
        threads: int = 0,
        min_static_prompt: int = 16,
        seed: int = 0,
    ) -> None:
        if temperature < 0:
            raise ValueError("ct2 engine: temperature must not be negative")
        if compute_type not in COMPUTE_TYPES:
            raise ValueError(f"ct2 engine: compute_type must be one of {', '.join(COMPUTE_TYPES)}")
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.ends = sorted(set(ends))
        self.blocked = sorted(set(blocked))
        self.compute_type = compute_type
        self.threads = threads
        self.min_static_prompt = min_static_prompt
        self.seed = seed
        self.refreshes = 0
        self._seeded = False
        self.interrupt = threading.Event()  # set from the event loop's thread: stop at the next token
        self._written = [0]  # tokens written so far by the running call (live progress)
        self._vocabulary: list[str] = []
        self._generator: Any = None
        self.refresh(model)

    @property
    def in_flight(self) -> int:
        return self._written[0]

    def refresh(self, model: Any) -> None:
        """Serve `model`'s current weights (call after each training update)."""
        import ctranslate2

        spec, vocabulary = converted_spec(model, self.tokenizer, self.temperature)
        shm = "/dev/shm"
        with tempfile.TemporaryDirectory(
            prefix="spacetools-ct2-", dir=shm if os.path.isdir(shm) else None
        ) as folder:
            spec.save(folder)
            # The generator reads the whole model into memory: the folder may go once it is built.
            generator = ctranslate2.Generator(
                folder, device="cpu", compute_type=self.compute_type, intra_threads=self.threads
            )
        self._generator, self._vocabulary = generator, vocabulary
        self.refreshes += 1
        self._seeded = False  # the new generator's worker seeds its stream when it first samples

    def generate(self, rows: list[Row]) -> list[Sampled]:
        """Continue every row in one CTranslate2 batch; each row ends at an end token or its own limit."""
        import ctranslate2

        if any(row.vision for row in rows):
            raise ValueError("ct2 engine: text-only models only (a row carries image inputs)")
        if any(not row.ids for row in rows):
            raise ValueError("ct2 engine: a row has no prompt tokens")
        sampling = self.temperature > 0
        prefix = shared_prefix(row.ids for row in rows) if len(rows) > 1 else 0
        if prefix < self.min_static_prompt:
            prefix = 0
        ids: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        # The callback holds no reference to the engine: CTranslate2 releases it on a worker thread, and
        # if that dropped the engine's last reference the generator would join its own thread (abort).
        written, ends, interrupt = self._written, set(self.ends), self.interrupt
        written[0] = 0

        def on_step(step: Any) -> bool:
            # Called once per generated token of a row; True stops that row (every row, once interrupted).
            row = step.batch_id
            ids[row].append(step.token_id)
            logprobs[row].append(step.log_prob)
            written[0] += 1
            done = step.token_id in ends or len(ids[row]) >= rows[row].max_new_tokens
            return done or interrupt.is_set()

        if sampling and not self._seeded:
            ctranslate2.set_random_seed((self.seed + self.refreshes) % 2**32)
            self._seeded = True
        self._generator.generate_batch(
            [self._tokens(row.ids[prefix:]) for row in rows],
            static_prompt=self._tokens(rows[0].ids[:prefix]) if prefix else None,
            cache_static_prompt=False,  # a new prefix per batch would grow the cache without end
            max_length=max(row.max_new_tokens for row in rows),
            sampling_topk=0 if sampling else 1,
            sampling_temperature=1.0,  # folded into the weights (see the module's notes)
            end_token=self.ends,
            return_end_token=True,
            suppress_sequences=[[self._vocabulary[token]] for token in self.blocked] or None,
            include_prompt_in_result=False,
            return_scores=True,  # the step results' log-probabilities
            callback=on_step,
        )
        written[0] = 0
        if self.interrupt.is_set():
            raise GenerationInterrupted("generation interrupted")
        sampled = []
        for row, tokens, scores in zip(rows, ids, logprobs, strict=True):
            keep = next((at + 1 for at, token in enumerate(tokens) if token in self.ends), len(tokens))
            keep = min(keep, row.max_new_tokens)
            sampled.append(
                Sampled(
                    ids=tokens[:keep],
                    logprobs=scores[:keep],
                    entropy=-sum(scores[:keep]),
                )
            )
        return sampled

    def _tokens(self, ids: list[int]) -> list[str]:
        try:
            return [self._vocabulary[token] for token in ids]
        except IndexError:
            raise ValueError(
                f"ct2 engine: a token id is outside the vocabulary of {len(self._vocabulary)}"
            ) from None
