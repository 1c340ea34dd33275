"""The decode loop that drops each row as it ends samples what transformers' ``generate`` samples: the same
tokens, the same log-probabilities, and the same keys and values handed back to each row's cache, on a
tiny random Llama and Qwen2 with rows of different lengths, limits and end tokens, greedy and sampled."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.agent.test_ct2 import rows_of, tiny_model  # noqa: E402
from tests.tiny_qwen import build_tiny_tokenizer  # noqa: E402

from spacetools.agent.policies.decoding import decode_rows  # noqa: E402
from spacetools.agent.policies.generation import Row, generate_rows, generation_config  # noqa: E402
from spacetools.agent.policies.kvcache import KVSlot, batch_cache, encode_prefix  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def with_caches(rows: list[Row]) -> list[Row]:
    return [Row(row.ids, [], row.seed, row.max_new_tokens, cache=KVSlot()) for row in rows]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_leaving_the_batch_change_no_token_logprob_or_cached_value(
    tokenizer: Any, kind: str, temperature: float
) -> None:
    model = tiny_model(kind, len(tokenizer))
    config = generation_config(model, tokenizer, 16, neutral=True)
    # Ends drawn often by the random model, so rows end at different steps (and some at their limit).
    ends = {
        int(token)
        for token in torch.randperm(len(tokenizer), generator=torch.Generator().manual_seed(3))[:40]
    }
    settings: dict[str, Any] = {"temperature": temperature, "blocked": [5], "ends": ends}
    reference, reference_slots = generate_rows(model, with_caches(rows_of(tokenizer)), config, **settings)
    ours, our_slots = decode_rows(
        model, with_caches(rows_of(tokenizer)), pad_token_id=config.pad_token_id, **settings
    )
    assert [result.ids for result in ours] == [result.ids for result in reference]
    assert len({len(result.ids) for result in ours}) > 1  # rows really left at different steps
    for mine, theirs in zip(ours, reference, strict=True):
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-5)
        assert mine.entropy == pytest.approx(theirs.entropy, abs=1e-4)
    for row, result, mine_slot, their_slot in zip(
        rows_of(tokenizer), ours, our_slots, reference_slots, strict=True
    ):
        # A row's cache covers all it wrote but its last token, which it never fed (`generate` fed it to
        # a row that ended before the batch did: its slot may hold that one more).
        assert mine_slot is not None and their_slot is not None
        length = len(row.ids) + len(result.ids) - 1
        assert mine_slot.ids == (row.ids + result.ids)[:length] == their_slot.ids[:length]
        for (keys, values), (their_keys, their_values) in zip(
            mine_slot.layers, their_slot.layers, strict=True
        ):
            assert torch.allclose(keys, their_keys[:, :, :length], atol=1e-5)
            assert torch.allclose(values, their_values[:, :, :length], atol=1e-5)


def test_a_batch_continued_from_cached_prefixes_equals_one_encoded_whole(tokenizer: Any) -> None:
    model = tiny_model("llama", len(tokenizer))
    config = generation_config(model, tokenizer, 16, neutral=True)
    rows = rows_of(tokenizer)
    whole, _ = decode_rows(
        model, rows, pad_token_id=config.pad_token_id, temperature=0.0, blocked=[], ends=set()
    )
    # Each row's cache covers all but its last 3 tokens; the batch feeds the rest.
    cached = [
        Row(row.ids, [], row.seed, row.max_new_tokens, cache=encode_prefix(model, row.ids[:-3]))
        for row in rows
    ]
    width = max(len(row.ids) for row in rows)
    past = batch_cache(model, [(row.ids, row.cache) for row in cached], width, 3)
    continued, _ = decode_rows(
        model, cached, pad_token_id=config.pad_token_id, temperature=0.0, blocked=[], ends=set(), past=past
    )
    assert [result.ids for result in continued] == [result.ids for result in whole]
    for mine, theirs in zip(continued, whole, strict=True):
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)
