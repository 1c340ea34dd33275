"""One batched ``generate`` over token rows, each row's tokens chosen from its own seeded generator.

A row is a prompt as token ids (with the pixel inputs of its images), a seed and, optionally, its
episode's KV cache (:mod:`~spacetools.agent.policies.kvcache`, which builds the batch's ``past``). Rows are
left-padded into one ``generate`` call; :class:`RowSampler` then picks every next token itself: greedily
at temperature 0, else from softmax(logits / temperature) with the row's own ``torch.Generator``. So what a row samples
depends on its prompt and seed only, never on the other rows in the batch or the order they came in
(left padding changes a row's logits by float rounding at most), and the log-probability of each sampled
token under the distribution it was drawn from is recorded as it is sampled. Pixel tokens are never
written (the processor writes them; a written one is an image slot with no image behind it).

torch and transformers are imported inside the functions, so the package imports without them.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spacetools.agent.policies.kvcache import KVSlot, row_slot

# Logit processors a checkpoint's generation_config may switch on (Qwen2.5 Instruct ships
# `repetition_penalty: 1.05`) that `generate` applies before our sampler, set to the value that leaves the
# logits alone: the GRPO trainer scores tokens with the logits divided by the temperature and nothing else.
# None marks one whose only off-switch is unset, which a call cannot override: a checkpoint setting it is
# refused. Warpers (top_k, top_p, min_p…) never run: `RowSampler` samples and `generate` runs greedy.
NEUTRAL_PROCESSORS: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "guidance_scale": 1.0,
    "renormalize_logits": False,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "watermarking_config": None,
}
VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the tokens that stand for pixels, which a policy must never write."""
    vocab = tokenizer.get_vocab()
    return sorted(vocab[token] for token in VISION_TOKENS if token in vocab)


def join_vision(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Processor pixel inputs of several chunks (images in order) as one set of inputs."""
    import torch

    return {key: torch.cat([chunk[key] for chunk in chunks]) for key in (chunks[0] if chunks else {})}


@dataclass
class Row:
    """A prompt to continue: its ids, the pixel inputs of its images in order, its sampling seed and the
    most tokens it may get. ``cache``: its episode's KV cache, which an engine that keeps one reads and
    updates in place (None: encode the whole prompt; an engine may ignore it)."""

    ids: list[int]
    vision: list[dict[str, Any]]
    seed: int
    max_new_tokens: int
    cache: KVSlot | None = None


@dataclass
class Sampled:
    """A row's new tokens up to and including the end token, with what they were sampled from.

    `logprobs`: each token's log-probability under softmax(logits / temperature), under softmax(logits)
    when greedy (None: the engine gives none);
    `entropy`: those distributions' entropies, summed over the tokens; `cached`: how many of the prompt's
    tokens came from a KV cache instead of being encoded (0 for an engine without one).
    """

    ids: list[int]
    logprobs: list[float] | None
    entropy: float
    cached: int = 0


def generation_config(model: Any, tokenizer: Any, max_new_tokens: int, *, neutral: bool) -> Any:
    """`generate` settings: greedy search (the sampler picks the tokens), our length and a pad token.

    `neutral`: switch off every logit processor of the checkpoint's generation_config, so tokens are
    sampled from the logits alone (refusing a checkpoint that sets one no call can switch off); otherwise
    they apply as the checkpoint asks (Qwen2.5 Instruct's repetition penalty in an evaluation).
    """
    defaults = model.generation_config
    config = copy.deepcopy(defaults)
    if neutral:
        refused = [
            key
            for key, value in NEUTRAL_PROCESSORS.items()
            if value is None and getattr(defaults, key, None) not in (None, [], {})
        ]
        if refused:
            raise ValueError(
                f"the model's generation_config sets {', '.join(refused)}, which the GRPO trainer cannot "
                "score; remove it from generation_config.json"
            )
        config.update(**{key: value for key, value in NEUTRAL_PROCESSORS.items() if value is not None})
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_token_id is None:
        raise ValueError("hf policy: the tokenizer has neither a pad nor an end-of-sequence token")
    # Warpers do not run in greedy search; clearing them keeps transformers from warning on every call.
    config.update(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        pad_token_id=pad_token_id,
    )
    return config


def left_padded(rows: list[Row], pad_token_id: int) -> tuple[Any, Any]:
    """The rows' ids left-padded to the longest, ``(B, W)``, and the attention mask of their real tokens."""
    import torch

    width = max(len(row.ids) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row.ids) :] = torch.tensor(row.ids)
        mask[i, width - len(row.ids) :] = 1
    return ids, mask


def applies_processors(config: Any) -> bool:
    """Whether `generate` with these settings would change the logits before our sampler (a checkpoint's
    repetition penalty in an evaluation, say); our own decode loop applies none."""
    return any(
        getattr(config, key, None) not in (neutral, None, [], {})
        for key, neutral in NEUTRAL_PROCESSORS.items()
    )


def end_token_ids(config: Any, tokenizer: Any) -> set[int]:
    """The tokens that end a turn: the generation config's end tokens and the tokenizer's."""
    ends = config.eos_token_id
    ids = set(ends if isinstance(ends, list) else [] if ends is None else [ends])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


class RowSampler:
    """A logits processor that chooses each row's next token: the argmax at temperature 0, else a draw from
    softmax(logits / temperature) with the row's own generator, recording its log-probability and the
    distribution's entropy (at temperature 0, under softmax(logits)). It returns logits that leave greedy
    search only the chosen token."""

    def __init__(self, seeds: list[int], temperature: float, blocked: list[int]) -> None:
        self.seeds = seeds
        self.temperature = temperature
        self.blocked = blocked
        self.generators: list[Any] = []
        self.logprobs: list[Any] = []  # per step, (B,)
        self.entropies: list[Any] = []  # per step, (B,)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """`generate`'s logits processor: choose every row's token, record it, and leave greedy search
        only the chosen token."""
        import torch

        chosen, logp, entropy = self.choose(scores, list(range(len(self.seeds))))
        self.logprobs.append(logp)
        self.entropies.append(entropy)
        only = torch.full_like(scores, float("-inf"))
        return only.scatter(-1, chosen.unsqueeze(-1), 0.0)

    def choose(self, scores: Any, rows: list[int]) -> tuple[Any, Any, Any]:
        """The next token of each of ``rows`` (indices into the seeds; ``scores`` has one line per row),
        with its log-probability and its distribution's entropy, each ``(len(rows),)``."""
        import torch

        if self.blocked:
            blocked = torch.tensor(self.blocked, device=scores.device)
            scores = scores.index_fill(-1, blocked, float("-inf"))
        if self.temperature == 0:
            logp = torch.log_softmax(scores.float(), dim=-1)  # (B, V)
            best = logp.max(-1)
            return best.indices, best.values, torch.special.entr(logp.exp()).sum(-1)
        if not self.generators:
            self.generators = [torch.Generator(scores.device).manual_seed(seed) for seed in self.seeds]
        logp = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # (B, V)
        probs = logp.exp()
        # Inverse-CDF sampling, one uniform per row from the row's own generator (torch.multinomial costs
        # ~15 ms a row on a CPU); `right=True` never lands on a token of probability 0.
        cdf = probs.double().cumsum(-1)  # (B, V)
        uniform = torch.cat(
            [
                torch.rand(1, generator=self.generators[row], dtype=torch.float64, device=scores.device)
                for row in rows
            ]
        )  # (B,)
        chosen = torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
        chosen = chosen.clamp(max=scores.shape[-1] - 1)  # (B,)
        logprob = logp.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
        return chosen, logprob, torch.special.entr(probs).sum(-1)  # a suppressed token adds 0, not NaN


def generate_rows(
    model: Any,
    rows: list[Row],
    config: Any,
    *,
    temperature: float,
    blocked: list[int],
    ends: set[int],
    past: Any = None,
    interrupt: threading.Event | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[list[Sampled], list[KVSlot | None]]:
    """Continue every row in one left-padded `generate` call, as long as its longest row may grow; each
    row's new tokens end at an end token or at its own limit. Returns them with, for the rows that keep a
    cache (``Row.cache``), the keys and values of their prompt and new tokens (all but the last).

    `past`: the cache of the batch's first positions (see :func:`~spacetools.agent.policies.kvcache.batch_cache`);
    `interrupt`: once set, generation stops after the current step (the caller discards the batch);
    `on_step`: called after each step with the number of rows still writing (live progress).
    """
    import torch
    from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

    end_ids = torch.tensor(sorted(ends), dtype=torch.long)

    class Interrupted(StoppingCriteria):
        """Stops every row once `interrupt` is set; reports the rows still writing to `on_step`."""

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            if on_step is not None:
                new = input_ids[:, width:].cpu()  # (B, t)
                ended = torch.isin(new, end_ids).any(-1)  # (B,)
                on_step(int((~ended).sum()))
            stop = interrupt is not None and interrupt.is_set()
            return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    ids, mask = left_padded(rows, config.pad_token_id)
    width = ids.shape[1]
    vision = join_vision([chunk for row in rows for chunk in row.vision])
    sampler = RowSampler([row.seed for row in rows], temperature, blocked)
    config = copy.copy(
        config
    )  # as long as the longest row may grow (one object: generate's kwargs are deprecated)
    config.max_new_tokens = max(row.max_new_tokens for row in rows)
    config.return_dict_in_generate = True  # for the batch's KV cache
    device = model.device
    with torch.inference_mode():
        output = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            **{key: value.to(device) for key, value in vision.items()},
            generation_config=config,
            logits_processor=LogitsProcessorList([sampler]),
            stopping_criteria=StoppingCriteriaList([Interrupted()]),
            cache=past,
        )
    new = output.sequences[:, width:].tolist()  # (B, N): after a row's end token, padding
    # One step more than N may have run (transformers checks for the end a step late on a GPU).
    logprobs = torch.stack(sampler.logprobs, 1).tolist() if sampler.logprobs else None  # (B, >= N)
    entropies = torch.stack(sampler.entropies, 1) if sampler.entropies else None  # (B, >= N)
    sampled = []
    slots: list[KVSlot | None] = []
    for i, (row, tokens) in enumerate(zip(rows, new, strict=True)):
        tokens = tokens[: row.max_new_tokens]
        keep = next((at + 1 for at, token in enumerate(tokens) if token in ends), len(tokens))
        sampled.append(
            Sampled(
                ids=tokens[:keep],
                logprobs=logprobs[i][:keep] if logprobs is not None else None,
                entropy=float(entropies[i, :keep].sum()) if entropies is not None else 0.0,
            )
        )
        start = width - len(row.ids)
        slots.append(
            row_slot(output.cache, i, row.ids + tokens[:keep], start) if row.cache is not None else None
        )
    return sampled, slots
