"""The KV cache kept across an episode's turns (and the system prefix shared between episodes) changes no
token: greedy turns equal those encoded whole, and sampled log-probabilities equal a full forward's.

A tiny random Qwen2 and SmolLM2-135M (the real base of the small-model recipe), each against a live
in-process Toolshed; a random model rarely calls a tool, so being told to go on gives every episode
several turns, each prompt growing by the feedback and a new generation prompt."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spacetools.agent.rollout import RolloutConfig, run_episodes
from spacetools.agent.types import Task, Trajectory
from spacetools.tools.diagnostics import EchoTool
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.shed import Toolshed
from tiny_qwen import build_tiny_tokenizer

torch = pytest.importorskip("torch")

from spacetools.agent.policies.hf import HFPolicy  # noqa: E402
from spacetools.kit.loading import load_processor, load_vlm  # noqa: E402
from spacetools.train.episodes import forward_logprobs, sampled_example  # noqa: E402

TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SYSTEM = "You answer spatial questions about the image. Think briefly, then answer inside <answer></answer>."
QUESTIONS = ["Is the mug left of the bowl?", "How far is the chair?", "Which box is taller?"]


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    directory: Path = tmp_path_factory.mktemp("tiny-qwen2")
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = TEMPLATE
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _rollout(policy: HFPolicy, turns: int, questions: list[str] = QUESTIONS) -> list[Trajectory]:
    image = np.full((56, 56, 3), 120, np.uint8)
    tasks = [
        Task(id=f"q{i}", data_source="robospatial", question=question, images=[image])
        for i, question in enumerate(questions)
    ]
    config = RolloutConfig(
        max_turns=turns, feedback_on_no_answer=True, system_prompt=SYSTEM + "\n{tools}", sampling_seed=7
    )

    async def go() -> list[Trajectory]:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            try:
                return await run_episodes(policy, shed, tasks, config=config)
            finally:
                await policy.aclose()

    return asyncio.run(go())


def _policies(model: Any, processor: Any, **options: Any) -> tuple[HFPolicy, HFPolicy]:
    cached = HFPolicy(model, processor, kv_cache=True, **options)
    whole = HFPolicy(model, processor, kv_cache=False, **options)
    return cached, whole


def _check_greedy_equal(model: Any, processor: Any, turns: int, max_new_tokens: int) -> None:
    cached, whole = _policies(model, processor, max_new_tokens=max_new_tokens)
    with_cache, without = _rollout(cached, turns), _rollout(whole, turns)
    for fast, slow in zip(with_cache, without, strict=True):
        assert fast.tokens is not None and slow.tokens is not None
        assert fast.turns == slow.turns == turns
        assert fast.tokens.ids == slow.tokens.ids and fast.tokens.mask == slow.tokens.mask
        assert fast.messages == slow.messages
        # Later turns read the episode's own cache, first turns the shared system prefix.
        prompt = fast.stats["prompt_tokens"]
        assert fast.stats["cached_tokens"] > prompt / 2 and slow.stats["cached_tokens"] == 0
        assert torch.allclose(
            torch.tensor(fast.tokens.logprobs), torch.tensor(slow.tokens.logprobs), atol=1e-4
        )


def _check_sampled_logprobs(model: Any, processor: Any, turns: int, temperature: float) -> None:
    policy = HFPolicy(model, processor, temperature=temperature, max_new_tokens=8, record=True)
    for trajectory in _rollout(policy, turns):
        example = sampled_example(trajectory)
        assert trajectory.stats["cached_tokens"] > 0
        with torch.no_grad():
            blocked = trajectory.tokens.blocked if trajectory.tokens else None
            rescored = forward_logprobs(model, example, "cpu", blocked, temperature=temperature)[0]
        mask = example.mask.bool()
        assert example.logprobs is not None and mask.sum() >= turns
        assert torch.allclose(rescored[mask], example.logprobs[mask], atol=1e-4)


def test_tiny_qwen2_cached_greedy_turns_equal_turns_encoded_whole(tiny_qwen2: Path) -> None:
    model = load_vlm(tiny_qwen2, device="cpu", dtype="float32")
    _check_greedy_equal(model, load_processor(tiny_qwen2), turns=3, max_new_tokens=6)


def test_tiny_qwen2_cached_sampled_logprobs_equal_a_full_forward(tiny_qwen2: Path) -> None:
    model = load_vlm(tiny_qwen2, device="cpu", dtype="float32")
    _check_sampled_logprobs(model, load_processor(tiny_qwen2), turns=3, temperature=0.8)


def test_the_shared_prefix_is_dropped_when_the_weights_change(tiny_qwen2: Path) -> None:
    model = load_vlm(tiny_qwen2, device="cpu", dtype="float32")
    policy = HFPolicy(model, load_processor(tiny_qwen2), max_new_tokens=4)
    first = _rollout(policy, 1)
    engine: Any = policy.engine
    assert engine.prefix is not None and len(engine.prefix.ids) >= 16
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator))
    policy.refresh()
    assert engine.prefix is None
    fresh = HFPolicy(model, policy.processor, max_new_tokens=4, kv_cache=False)
    after, reference = _rollout(policy, 1), _rollout(fresh, 1)
    assert [t.tokens.ids for t in after if t.tokens] == [t.tokens.ids for t in reference if t.tokens]
    assert [t.tokens.ids for t in after if t.tokens] != [t.tokens.ids for t in first if t.tokens]


@pytest.mark.slow
def test_smollm2_cached_turns_equal_turns_encoded_whole_and_logprobs_a_full_forward() -> None:
    from smollm2 import smollm2_folder

    folder = smollm2_folder()
    model = load_vlm(folder, device="cpu", dtype="float32")
    processor = load_processor(folder)
    _check_greedy_equal(model, processor, turns=2, max_new_tokens=8)
    _check_sampled_logprobs(model, processor, turns=2, temperature=1.0)


def test_an_interrupt_stops_generation_at_the_next_token_and_closing_sets_it(tiny_qwen2: Path) -> None:
    import threading

    from spacetools.agent.policies.engine import GenerationInterrupted
    from spacetools.agent.policies.generation import Row

    model = load_vlm(tiny_qwen2, device="cpu", dtype="float32")
    policy = HFPolicy(model, load_processor(tiny_qwen2), max_new_tokens=40)
    engine: Any = policy.engine
    engine.ends = set()  # a random model may end early; this call must run its 40 tokens unless stopped
    ids = list(range(5, 30))
    full = engine.generate([Row(ids, [], 0, 40)])
    assert len(full[0].ids) == 40
    steps: list[int] = []

    def stop_after_three(writing: int) -> None:
        steps.append(writing)
        if len(steps) == 3:
            engine.interrupt.set()

    engine._count = stop_after_three
    with pytest.raises(GenerationInterrupted):
        engine.generate([Row(ids, [], 0, 40)])
    assert len(steps) == 3  # no step ran after the one that saw the interrupt

    # Closing the policy mid-generation (what Ctrl-C does to the run's task) sets the interrupt.
    engine.interrupt.clear()
    started = threading.Event()
    engine._count = lambda writing: started.set()

    async def close_while_generating() -> None:
        state_task = asyncio.ensure_future(policy._queue(Row(ids, [], 0, 40)))
        await asyncio.to_thread(started.wait)
        await policy.aclose()
        with pytest.raises(asyncio.CancelledError):
            await state_task

    asyncio.run(close_while_generating())
    assert engine.interrupt.is_set()
