"""The ``hf`` policy on a tiny, randomly initialised Qwen2.5-VL built and saved in the test (no downloads)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spacetools.agent.policies import make_policy
from spacetools.agent.policies.hf import ChatFormat, HFPolicy, load_hf_policy, template_renders_tool_role
from spacetools.agent.types import EpisodeState, Policy, Task
from tiny_qwen import CHAT_TEMPLATE, build_tiny_qwen25_vl

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    directory = tmp_path_factory.mktemp("tiny-qwen2.5-vl")
    return directory, build_tiny_qwen25_vl(directory)


@pytest.fixture(scope="module")
def policy(tiny_model: tuple[Path, int]) -> HFPolicy:
    return load_hf_policy(str(tiny_model[0]), max_new_tokens=6, batch_size=8, batch_wait_ms=20)


def image(seed: int, size: int = 56) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def episode(question: str, seed: int, with_tool_turn: bool = False) -> EpisodeState:
    images = [image(seed)]
    task = Task(id=f"t{seed}", data_source="spatialsim_blinkdepth", question=question, images=images)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Answer inside <answer></answer>."},
        {"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": question}]},
    ]
    if with_tool_turn:
        images = [*images, image(seed + 100)]
        messages += [
            {"role": "assistant", "content": '<tool_call>{"name": "echo.echo", "arguments": {}}</tool_call>'},
            {
                "role": "tool",
                "content": [
                    {"type": "text", "text": "<tool_response>\nok\n</tool_response>"},
                    {"type": "image", "index": 1},
                ],
            },
        ]
    return EpisodeState(task=task, messages=messages, images=images, turn=len(messages) // 2, tool_specs=[])


def spy_on_generate(policy: HFPolicy, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Record (input ids, output ids) of every real ``generate`` call."""
    calls: list[tuple[Any, Any]] = []
    generate = policy.model.generate

    def recording_generate(**inputs: Any) -> Any:
        output = generate(**inputs)
        calls.append((inputs["input_ids"], output.sequences))
        return output

    monkeypatch.setattr(policy.model, "generate", recording_generate)
    return calls


async def act_all(policy: HFPolicy, states: list[EpisodeState]) -> list[str]:
    return list(await asyncio.gather(*(policy.act(state) for state in states)))


@pytest.mark.slow
def test_concurrent_acts_share_one_left_padded_generate(
    policy: HFPolicy, tiny_model: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = spy_on_generate(policy, monkeypatch)
    states = [
        episode("How far is the cup?", 1),
        episode("Which is closer to the camera, the red cup or the bowl?", 2),
        episode("Point at the mug.", 3, with_tool_turn=True),
    ]
    texts = asyncio.run(act_all(policy, states))

    assert len(calls) == 1
    input_ids, output_ids = calls[0]
    assert input_ids.shape[0] == 3
    # Left padding: every prompt ends in the last column, right before the generated tokens.
    assert (input_ids[:, -1] == input_ids[0, -1]).all()
    assert int(output_ids.max()) < tiny_model[1] and int(output_ids.min()) >= 0
    assert 1 <= output_ids.shape[1] - input_ids.shape[1] <= 6
    assert isinstance(policy, Policy)
    assert all(isinstance(text, str) for text in texts)
    assert not any("<|im_end|>" in text or "<|endoftext|>" in text for text in texts)
    assert policy.stats()["max_batch"] >= 3


@pytest.mark.slow
def test_batched_turns_equal_turns_generated_one_by_one(tiny_model: tuple[Path, int]) -> None:
    states = [episode("How far is the cup?", 4), episode("Is the bowl left of the plate?", 5, True)]
    batched = load_hf_policy(str(tiny_model[0]), max_new_tokens=6, batch_size=8)
    alone = HFPolicy(batched.model, batched.processor, max_new_tokens=6, batch_size=1)

    together = asyncio.run(act_all(batched, states))
    one_by_one = asyncio.run(act_all(alone, states))

    assert together == one_by_one
    assert batched.stats()["batches"] == 1
    assert alone.stats()["batches"] == 2


@pytest.mark.slow
def test_each_turn_keeps_its_own_token_limit_in_a_shared_batch_and_is_counted(
    tiny_model: tuple[Path, int],
) -> None:
    short, default = episode("How far is the cup?", 4), episode("Is the bowl left of the plate?", 5, True)
    short.max_new_tokens = 2  # what the rollout sets when the episode's budget has 2 tokens left
    batched = load_hf_policy(str(tiny_model[0]), max_new_tokens=6, batch_size=8)
    texts = asyncio.run(act_all(batched, [short, default]))
    assert batched.stats()["batches"] == 1
    assert 1 <= short.model_tokens <= 2 and 1 <= default.model_tokens <= 6
    assert batched.stats()["new_tokens"] == short.model_tokens + default.model_tokens
    # The cut turn is the one a policy limited to 2 tokens writes alone (greedy decoding).
    alone = HFPolicy(batched.model, batched.processor, max_new_tokens=2, batch_size=1)
    assert asyncio.run(act_all(alone, [episode("How far is the cup?", 4)])) == texts[:1]


@pytest.mark.slow
def test_batch_size_caps_each_generate_and_sampling_runs(tiny_model: tuple[Path, int]) -> None:
    sampler = make_policy(
        "hf", model_path=str(tiny_model[0]), max_new_tokens=4, temperature=1.0, batch_size=2
    )
    assert isinstance(sampler, HFPolicy) and sampler.temperature == 1.0

    texts = asyncio.run(act_all(sampler, [episode(f"Question {i}?", 10 + i) for i in range(3)]))

    assert len(texts) == 3
    assert sampler.stats()["batches"] == 2
    assert sampler.stats()["max_batch"] == 2


@pytest.mark.slow
def test_bad_image_index_fails_that_act_only_and_policy_survives_aclose(policy: HFPolicy) -> None:
    broken = episode("How far?", 7)
    broken.messages[1]["content"][0]["index"] = 5

    async def run() -> str:
        with pytest.raises(ValueError, match="image index 5 is out of range"):
            await policy.act(broken)
        await policy.act(episode("How far?", 8))
        await policy.aclose()
        return await policy.act(episode("How far?", 9))

    assert isinstance(asyncio.run(run()), str)


def test_chat_format_groups_tool_results_as_user_turn_and_orders_images() -> None:
    images = [image(0, 8), image(1, 8), image(2, 8)]
    messages = [
        {"role": "user", "content": [{"type": "image", "index": 2}, {"type": "text", "text": "Q"}]},
        {"role": "assistant", "content": "<tool_call>…</tool_call><tool_call>…</tool_call>"},
        {"role": "tool", "content": "<tool_response>\nfirst\n</tool_response>"},
        {"role": "tool", "content": [{"type": "text", "text": "second"}, {"type": "image", "index": 0}]},
    ]

    conversation, ordered = ChatFormat(native_tool_role=False).convert(messages, images)

    assert [m["role"] for m in conversation] == ["user", "assistant", "user"]
    tool_texts = [part["text"] for part in conversation[2]["content"] if part["type"] == "text"]
    assert tool_texts == [
        "<tool_response>\nfirst\n</tool_response>",
        "\n",
        "<tool_response>\nsecond\n</tool_response>",
    ]
    assert [np.asarray(picture).tolist() for picture in ordered] == [images[2].tolist(), images[0].tolist()]

    native, _ = ChatFormat(native_tool_role=True).convert(messages, images)
    assert [m["role"] for m in native] == ["user", "assistant", "tool", "tool"]
    assert native[2]["content"] == [{"type": "text", "text": "first"}]


def test_template_detection_and_bad_messages() -> None:
    assert not template_renders_tool_role(CHAT_TEMPLATE)
    assert template_renders_tool_role("{% if message.role == 'tool' %}<tool_response>{% endif %}")
    with pytest.raises(ValueError, match="unknown role"):
        ChatFormat(native_tool_role=False).convert([{"role": "robot", "content": "hi"}], [])
    with pytest.raises(ValueError, match="uint8"):
        ChatFormat(native_tool_role=False).convert(
            [{"role": "user", "content": [{"type": "image", "index": 0}]}],
            [np.zeros((4, 4), dtype=np.float32)],
        )


def test_bad_options_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_policy(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="dtype"):
        load_hf_policy(str(tmp_path), dtype="float8")
    with pytest.raises(ValueError, match="batch_size"):
        load_hf_policy(str(tmp_path), batch_size=0)


def test_module_imports_without_torch() -> None:
    code = "import sys, spacetools.agent.policies.hf; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_smollm2_runs_a_tool_calling_episode_with_live_simulated_tools(tmp_path: Path) -> None:
    """The real pretrained base (converted once, cached) drives an episode; its images go to the tools."""
    from smollm2 import smollm2_folder
    from spacetools.agent.rollout import RolloutConfig, run_episodes
    from spacetools.bench.dataset import episode_input, load_samples
    from spacetools.bench.spatialsim.generator import generate_group, write_families
    from spacetools.kit.textonly import TEXT_ONLY_NOTE
    from spacetools.toolshed.shed import Toolshed
    from spacetools.toolshed.toolsets import with_profile

    write_families(tmp_path, {"reflocation": generate_group(0, "reflocation", 0, 1)})
    (task_id, sample), *_ = load_samples(tmp_path).items()
    prompt = (
        'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, answer as <answer>...</answer>.\n'
        'Example: <tool_call>{"name": "roborefer.detect_one", "arguments": {"obj_name": "red mug", '
        '"image_index": 0}}</tool_call>\nTools: {tools}'
    )
    policy = load_hf_policy(str(smollm2_folder()), max_new_tokens=40)
    assert not policy.vision
    seen: list[str] = []  # the prompts the model read

    class RecordingPolicy:
        name = policy.name

        async def act(self, state: EpisodeState) -> str:
            conversation, images = policy.format.convert(state.messages, state.images)
            prompt = policy.processor.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=False
            )
            seen.append(prompt)
            assert images == []
            return await policy.act(state)

    async def run() -> list[Any]:
        async with Toolshed(with_profile("v1", "exact"), seed=0) as tools:
            config = RolloutConfig(max_turns=3, system_prompt=prompt, concurrency=1)
            try:
                inputs = [episode_input(sample, task_id)]
                return list(await run_episodes(RecordingPolicy(), tools, inputs, config=config))
            finally:
                await policy.aclose()

    (trajectory,) = asyncio.run(run())
    assert trajectory.error is None and trajectory.turns >= 1
    assert TEXT_ONLY_NOTE in seen[0] and "[image 0]" in seen[0]
    assert "<|image_pad|>" not in seen[0]
    turns = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    assert len(turns) == trajectory.turns and all(turns)  # the pretrained model wrote every turn
    assert policy.stats()["new_tokens"] > 0
