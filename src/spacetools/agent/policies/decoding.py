"""A decode loop for text-only models' batches that drops each row from the batch as soon as it has ended.

transformers' ``generate`` keeps a batch whole until its last row ends: the rows that ended keep being
computed as padding, so on a CPU (where a step's cost grows with its rows) a batch with one long row costs
its longest row times every row. Here each step feeds only the rows still writing; a row that ends gives
its KV cache back at once and leaves the batch (its keys and values are selected out of the batch cache).

What a row samples is what :func:`~spacetools.agent.policies.generation.generate_rows` samples: the same
left-padded prefill, the same positions (the attention mask's running count, as ``generate`` computes
them) and the same :class:`~spacetools.agent.policies.generation.RowSampler`, whose draws depend on the
row's own seed only. A VLM's rows go through ``generate`` (its rotary positions come from its
image grid, which this loop does not build).

torch and transformers are imported inside the function, so the package imports without them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from spacetools.agent.policies.generation import Row, RowSampler, Sampled, left_padded
from spacetools.agent.policies.kvcache import KVSlot, row_slot


def decode_rows(
    model: Any,
    rows: list[Row],
    *,
    pad_token_id: int,
    temperature: float,
    blocked: list[int],
    ends: set[int],
    past: Any = None,
    interrupt: threading.Event | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[list[Sampled], list[KVSlot | None]]:
    """Continue every row; each ends at an end token or at its own limit. Returns each row's new tokens
    and, for the rows that keep a cache (``Row.cache``), the keys and values of its prompt and new tokens
    (all but the last, which was never fed).

    `past`: the cache of the batch's first positions (see :func:`~spacetools.agent.policies.kvcache.batch_cache`);
    `interrupt`: once set, decoding stops after the current step (the caller discards the batch);
    `on_step`: called after each step with the number of rows still writing (live progress).
    """
    import torch
    from transformers import DynamicCache

    ids, mask = left_padded(rows, pad_token_id)  # (B, W)
    width = ids.shape[1]
    cached = 0 if past is None else past.get_seq_length()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (B, W), as `generate` numbers them
    cache = past if past is not None else DynamicCache(config=model.config)
    sampler = RowSampler([row.seed for row in rows], temperature, blocked)
    new: list[list[int]] = [[] for _ in rows]
    logprobs: list[list[float]] = [[] for _ in rows]
    entropy = [0.0] * len(rows)
    slots: list[KVSlot | None] = [None] * len(rows)
    writing = list(range(len(rows)))  # the batch's rows, by their index in `rows`
    device = model.device
    step_ids, step_positions = ids[:, cached:], positions[:, cached:]
    with torch.inference_mode():
        while writing:
            out = model(
                input_ids=step_ids.to(device),
                attention_mask=mask.to(device),
                position_ids=step_positions.to(device),
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            chosen, logp, entropies = sampler.choose(out.logits[:, -1, :], writing)
            tokens, token_logprobs, token_entropies = chosen.tolist(), logp.tolist(), entropies.tolist()
            keep = []
            for at, index in enumerate(writing):
                new[index].append(tokens[at])
                logprobs[index].append(token_logprobs[at])
                entropy[index] += token_entropies[at]
                row = rows[index]
                if tokens[at] in ends or len(new[index]) >= row.max_new_tokens:
                    if row.cache is not None:
                        slots[index] = row_slot(cache, at, row.ids + new[index], width - len(row.ids))
                else:
                    keep.append(at)
            if on_step is not None:
                on_step(len(keep))
            if not keep or (interrupt is not None and interrupt.is_set()):
                break
            if len(keep) < len(writing):
                kept = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(kept.to(device))
                mask, chosen, step_positions = mask[kept], chosen[kept], step_positions[kept]
                writing = [writing[at] for at in keep]
            mask = torch.cat([mask, mask.new_ones((len(writing), 1))], dim=-1)
            step_ids = chosen.unsqueeze(-1).cpu()  # (B', 1)
            step_positions = step_positions[:, -1:] + 1
    sampled = [Sampled(ids=new[i], logprobs=logprobs[i], entropy=entropy[i]) for i in range(len(rows))]
    return sampled, slots
