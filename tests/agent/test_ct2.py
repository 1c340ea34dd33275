"""The ``ct2`` rollout engine against the ``hf`` path on tiny random Llama and Qwen2 models built here (and
on SmolLM2-135M): the same greedy tokens, sampled log-probabilities that a transformers forward recomputes,
blocked tokens never written, each row's own limit, and new weights served after a refresh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("ctranslate2")

from tests.smollm2 import smollm2_folder  # noqa: E402
from tests.tiny_qwen import build_tiny_tokenizer  # noqa: E402

from spacetools.agent.policies.ct2 import CT2Engine, shared_prefix  # noqa: E402
from spacetools.agent.policies.engine import GenerationInterrupted  # noqa: E402
from spacetools.agent.policies.generation import (  # noqa: E402
    Row,
    end_token_ids,
    generate_rows,
    generation_config,
)

# float32 CTranslate2 against float32 transformers on the same tokens: kernels differ in summation order.
LOGPROB_TOLERANCE = 1e-3


def tiny_model(kind: str, vocab_size: int) -> Any:
    """A random two-layer causal LM whose logits are peaked enough for greedy ties to be rare."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_class, model_class = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }[kind]
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return model_class(config).eval()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def rows_of(tokenizer: Any, limits: tuple[int, ...] = (12, 5, 9)) -> list[Row]:
    """Prompts of different lengths sharing a system prefix, each with its own seed and limit."""
    system = [{"role": "system", "content": "<think>The mug is left of the bowl.</think> " * 3}]
    questions = ["How far is the red cup?", "<answer>(A)</answer>", "How far is the red cup from the camera?"]
    rows = []
    for index, (question, limit) in enumerate(zip(questions, limits, strict=True)):
        chat = [*system, {"role": "user", "content": question}]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        rows.append(Row(tokenizer.encode(ids), [], seed=index, max_new_tokens=limit))
    return rows


def hf_greedy(model: Any, tokenizer: Any, rows: list[Row], blocked: list[int]) -> list[list[int]]:
    config = generation_config(model, tokenizer, 16, neutral=True)
    ends = end_token_ids(config, tokenizer)
    sampled, _ = generate_rows(model, rows, config, temperature=0.0, blocked=blocked, ends=ends)
    return [result.ids for result in sampled]


def recomputed_logprobs(
    model: Any, row: Row, ids: list[int], temperature: float, blocked: list[int] = ()
) -> list[float]:
    """The tokens' log-probabilities under softmax(logits / temperature) with the blocked tokens removed."""
    with torch.no_grad():
        logits = model(torch.tensor([row.ids + ids])).logits[0, len(row.ids) - 1 : -1]
    logits[:, list(blocked)] = float("-inf")
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1).tolist()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_greedy_tokens_equal_the_hf_paths(kind: str, tokenizer: Any) -> None:
    model = tiny_model(kind, len(tokenizer))
    rows = rows_of(tokenizer)
    ends = end_token_ids(generation_config(model, tokenizer, 16, neutral=True), tokenizer)
    engine = CT2Engine(
        model, tokenizer, temperature=0.0, ends=ends, compute_type="float32", min_static_prompt=4
    )
    assert shared_prefix(row.ids for row in rows) >= 4  # the shared prefix path runs
    results = engine.generate(rows)
    ct2 = [result.ids for result in results]
    assert ct2 == hf_greedy(model, tokenizer, rows, blocked=[])
    for row, result in zip(rows, results, strict=True):  # greedy: log-probabilities under softmax(logits)
        assert result.logprobs == pytest.approx(
            recomputed_logprobs(model, row, result.ids, 1.0), abs=LOGPROB_TOLERANCE
        )
    assert [len(ids) for ids in ct2] == [12, 5, 9]  # each row its own limit (no end token in a random model)
    # The converter deletes the modules it read; the engine's view keeps the live model whole.
    assert len(model.model.layers[0].self_attn.q_proj.weight) == 64


def test_sampled_logprobs_are_the_tempered_distributions_and_blocked_tokens_never_come(
    tokenizer: Any,
) -> None:
    model = tiny_model("llama", len(tokenizer))
    rows = rows_of(tokenizer, limits=(16, 16, 16))
    greedy = hf_greedy(model, tokenizer, rows, blocked=[])
    blocked = sorted({ids[0] for ids in greedy})  # each row's likeliest first token
    engine = CT2Engine(
        model,
        tokenizer,
        temperature=0.7,
        ends=[],
        blocked=blocked,
        compute_type="float32",
        min_static_prompt=4,
    )
    sampled = engine.generate(rows)
    for row, result in zip(rows, sampled, strict=True):
        assert result.logprobs is not None and len(result.logprobs) == len(result.ids) == 16
        assert not set(result.ids) & set(blocked)
        expected = recomputed_logprobs(model, row, result.ids, 0.7, blocked)
        assert result.logprobs == pytest.approx(expected, abs=LOGPROB_TOLERANCE)
        assert result.entropy == pytest.approx(-sum(result.logprobs))
    # Draws continue one stream from the refresh on: the same batch again draws other tokens, while an
    # engine built alike (same seed, same number of refreshes) draws the same ones.
    assert [result.ids for result in engine.generate(rows)] != [result.ids for result in sampled]
    twin = CT2Engine(
        model,
        tokenizer,
        temperature=0.7,
        ends=[],
        blocked=blocked,
        compute_type="float32",
        min_static_prompt=4,
    )
    assert [result.ids for result in twin.generate(rows)] == [result.ids for result in sampled]


def test_a_refresh_serves_the_new_weights(tokenizer: Any) -> None:
    model = tiny_model("llama", len(tokenizer))
    rows = rows_of(tokenizer)
    engine = CT2Engine(model, tokenizer, temperature=0.0, ends=[], compute_type="float32")
    before = [result.ids for result in engine.generate(rows)]
    with torch.no_grad():
        model.lm_head.weight.add_(
            torch.randn_like(model.lm_head.weight, generator=torch.Generator().manual_seed(1))
        )
    assert [result.ids for result in engine.generate(rows)] == before  # stale until refreshed
    engine.refresh(model)
    after = [result.ids for result in engine.generate(rows)]
    assert after != before
    assert after == hf_greedy(model, tokenizer, rows, blocked=[])


def test_an_interrupt_stops_generation_and_a_cleared_one_generates_again(tokenizer: Any) -> None:
    engine = CT2Engine(tiny_model("llama", len(tokenizer)), tokenizer, temperature=0.0, ends=[])
    rows = rows_of(tokenizer)
    engine.interrupt.set()  # as HFPolicy does when its batching task is cancelled (Ctrl-C)
    with pytest.raises(GenerationInterrupted):
        engine.generate(rows)
    assert engine.in_flight == 0
    engine.interrupt.clear()
    assert [len(result.ids) for result in engine.generate(rows)] == [12, 5, 9]


def test_bad_input_is_refused_in_one_line(tokenizer: Any) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="GPT2Config is not supported"):
        CT2Engine(gpt2, tokenizer, temperature=1.0, ends=[])
    engine = CT2Engine(tiny_model("llama", len(tokenizer)), tokenizer, temperature=1.0, ends=[])
    with pytest.raises(ValueError, match="text-only"):
        engine.generate([Row([1, 2], [{"pixel_values": torch.zeros(1)}], 0, 4)])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate([Row([len(tokenizer) + 5], [], 0, 4)])


@pytest.mark.slow
def test_smollm2_greedy_tokens_and_sampled_logprobs_match_transformers() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rows = [
        Row(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True
            ),
            [],
            0,
            8,
        )
        for question in (
            "Where is the red mug?",
            "Which object is closer to the camera, the cup or the bowl?",
        )
    ]
    rows = [Row(list(getattr(row.ids, "input_ids", row.ids)), [], index, 8) for index, row in enumerate(rows)]
    ends = end_token_ids(generation_config(model, tokenizer, 8, neutral=True), tokenizer)
    greedy = CT2Engine(model, tokenizer, temperature=0.0, ends=ends, compute_type="float32")
    assert [result.ids for result in greedy.generate(rows)] == hf_greedy(model, tokenizer, rows, blocked=[])
    sampler = CT2Engine(model, tokenizer, temperature=1.0, ends=ends, compute_type="float32")
    for row, result in zip(rows, sampler.generate(rows), strict=True):
        assert result.logprobs == pytest.approx(
            recomputed_logprobs(model, row, result.ids, 1.0), abs=LOGPROB_TOLERANCE
        )


def test_an_engine_dropped_after_generating_frees_its_generator_without_aborting() -> None:
    # The step callback once held the engine: CTranslate2 released it on a worker thread, the engine's
    # last reference went there, and its generator joined its own thread ("Resource deadlock avoided").
    script = """
import gc, time
from tests.tiny_qwen import build_tiny_tokenizer
from tests.agent.test_ct2 import rows_of, tiny_model
from spacetools.agent.policies.ct2 import CT2Engine
tokenizer = build_tiny_tokenizer()
for _ in range(2):
    engine = CT2Engine(tiny_model("llama", len(tokenizer)), tokenizer, temperature=0.0, ends=[], threads=2)
    engine.generate(rows_of(tokenizer))
    del engine
    gc.collect()
    time.sleep(0.2)
print("freed")
"""
    root = Path(__file__).parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'src'}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "freed" in done.stdout, done.stderr[-2000:]
