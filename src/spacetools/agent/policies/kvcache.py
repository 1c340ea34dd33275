"""KV caches kept across an episode's turns, and a shared prompt prefix encoded once for every episode.

An episode's token trace only grows (see :mod:`spacetools.agent.tokens`), so the keys and values of its
last turn cover a prefix of its next prompt: the next turn encodes only the tool response and the new
generation prompt. Every episode of a run opens with the same system prompt, so a new episode starts from
the cached prefix it shares with the others (encoded once) instead of encoding it again.

Rows of one batch have different cached lengths. The batch stays one left-padded ``generate`` call: each
row's sequence is left-padded to the batch width ``W``; the last ``N`` positions (``N`` = the longest
uncached part of any row) are fed to the model, and the first ``W - N`` come from a batch cache built from
each row's own cache (keys and values of padding are zeros, masked out by the attention mask). A row
whose cache covers more than ``W - N`` positions recomputes its last few cached tokens; one that covers
less is padded. After the call each row's keys and values are cut back out of the batch cache.

Shapes: a cache layer holds ``keys, values (B, H, L, D)``: batch, key/value heads, positions, head size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The shortest common prefix worth sharing between new episodes (shorter ones are just encoded).
MIN_SHARED_PREFIX = 16


@dataclass
class KVSlot:
    """One episode's cached keys and values: ``ids`` the tokens they cover, ``layers`` one
    ``(keys, values)`` pair per layer, each ``(1, H, len(ids), D)``. Empty until its first turn."""

    ids: list[int] = field(default_factory=list)
    layers: list[tuple[Any, Any]] = field(default_factory=list)

    def cropped(self, length: int) -> KVSlot:
        """The first ``length`` positions (views, not copies)."""
        return KVSlot(self.ids[:length], [(k[:, :, :length], v[:, :, :length]) for k, v in self.layers])


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two id lists."""
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def usable_length(slot: KVSlot | None, ids: list[int]) -> int:
    """How many of a row's positions its cache can supply: the cached prefix, leaving at least the last
    token to feed (its logits choose the first new token)."""
    if slot is None or not slot.layers:
        return 0
    return min(common_prefix(slot.ids, ids), len(ids) - 1)


def encode_prefix(model: Any, ids: list[int]) -> KVSlot:
    """Keys and values of ``ids`` (one forward pass, batch 1)."""
    import torch
    from transformers import DynamicCache

    cache: Any = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids], device=model.device), cache=cache, use_cache=True)
    return KVSlot(list(ids), [(layer.keys, layer.values) for layer in cache.layers])


def batch_cache(model: Any, rows: list[tuple[list[int], KVSlot | None]], width: int, fed: int) -> Any:
    """The ``DynamicCache`` of the first ``width - fed`` positions of a left-padded batch, or None when
    nothing is cached (``fed == width``). Each row's cache must cover its ids up to ``len(ids) - fed``."""
    from transformers import DynamicCache

    cached = width - fed
    if cached == 0:
        return None
    template = next(slot for _, slot in rows if slot is not None and slot.layers)
    pairs = []
    for layer, (keys, values) in enumerate(template.layers):
        batch_keys = keys.new_zeros((len(rows), keys.shape[1], cached, keys.shape[3]))  # (B, H, W - N, D)
        batch_values = values.new_zeros((len(rows), values.shape[1], cached, values.shape[3]))
        for i, (ids, slot) in enumerate(rows):
            real = len(ids) - fed  # this row's tokens among the cached positions
            if real > 0:
                assert slot is not None and len(slot.ids) >= real
                row_keys, row_values = slot.layers[layer]
                batch_keys[i, :, cached - real :] = row_keys[0, :, :real]
                batch_values[i, :, cached - real :] = row_values[0, :, :real]
        pairs.append((batch_keys, batch_values))
    return DynamicCache(ddp_cache_data=pairs, config=model.config)


def row_slot(cache: Any, row: int, ids: list[int], start: int) -> KVSlot:
    """Row ``row``'s keys and values out of a batch cache, from position ``start`` (its left padding
    skipped), as far as ``ids`` (its prompt and new tokens) and the cache go; copies, so the batch
    cache can be freed."""
    end = min(start + len(ids), cache.layers[0].keys.shape[2])
    return KVSlot(
        ids[: end - start],
        [
            (
                layer.keys[row : row + 1, :, start:end].clone(),
                layer.values[row : row + 1, :, start:end].clone(),
            )
            for layer in cache.layers
        ],
    )
