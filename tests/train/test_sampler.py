"""A training policy records its episodes token-exactly: the model scores its own sampled ids as it sampled them."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from spacetools.agent.rollout import RolloutConfig, run_episodes
from spacetools.agent.types import Task
from spacetools.tools.diagnostics import EchoTool
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.shed import Toolshed
from tiny_qwen import build_tiny_qwen25_vl

torch = pytest.importorskip("torch")

from spacetools.kit.loading import load_processor  # noqa: E402
from spacetools.train.episodes import forward_logprobs  # noqa: E402
from spacetools.train.sampler import TracingPolicy  # noqa: E402


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> TracingPolicy:
    from transformers import AutoModelForImageTextToText

    directory: Path = tmp_path_factory.mktemp("tiny-qwen")
    build_tiny_qwen25_vl(directory)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(directory, local_files_only=True).eval()
    return TracingPolicy(model, load_processor(directory), max_new_tokens=12)


def _run(policy: TracingPolicy, ids: list[str]) -> list[object]:
    image = np.full((56, 56, 3), 120, np.uint8)
    tasks = [
        Task(id=i, data_source="robospatial", question="Is the mug left of the bowl?", images=[image])
        for i in ids
    ]
    # A random model rarely calls a tool: being told to go on gives every episode three sampled turns.
    config = RolloutConfig(max_turns=3, feedback_on_no_answer=True, concurrency=2)

    async def go() -> list[object]:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            return list(await run_episodes(policy, shed, tasks, config=config))

    return asyncio.run(go())


def _sampled_turns(example: object) -> list[list[int]]:
    """The runs of consecutive mask-1 ids: one per sampled turn."""
    turns: list[list[int]] = []
    previous = 0
    for token, bit in zip(example.ids.tolist(), example.mask.tolist(), strict=True):  # type: ignore[attr-defined]
        if bit and not previous:
            turns.append([])
        if bit:
            turns[-1].append(token)
        previous = bit
    return turns


def test_recorded_ids_are_what_the_model_sampled_with_the_logprobs_it_sampled_them_with(
    policy: TracingPolicy,
) -> None:
    policy.reset_stats()
    trajectories = _run(policy, ["a#0", "a#1"])
    sampled = sum(int(policy.example(t.task_id).mask.sum()) for t in trajectories)  # type: ignore[attr-defined]
    # Every sampled token's distribution counted once; a random tiny model is far from certain.
    assert policy.sampled_tokens == sampled and 0.5 < policy.entropy <= math.log(
        len(policy.processor.tokenizer)
    )
    for trajectory in trajectories:
        example = policy.example(trajectory.task_id)  # type: ignore[attr-defined]
        model_turns = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]  # type: ignore[attr-defined]
        assert len(model_turns) == 3
        tokenizer = policy.processor.tokenizer
        assert [
            tokenizer.decode(turn, skip_special_tokens=True) for turn in _sampled_turns(example)
        ] == model_turns
        with torch.no_grad():
            rescored = forward_logprobs(policy.model, example, "cpu", policy.blocked)[0]
        mask = example.mask.bool()
        assert example.logprobs is not None
        # Temperature 1 and no top-k: the sampling distribution is the model's own.
        assert torch.allclose(rescored[mask], example.logprobs[mask], atol=1e-4)
        assert (example.logprobs[~mask] == 0).all()
        assert not set(example.ids[mask].tolist()) & set(policy.blocked)  # pixels are never written
    policy.forget()
    with pytest.raises(KeyError):
        policy.example("a#0")


@pytest.fixture(scope="module")
def penalised_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model saved with Qwen2.5 Instruct's `repetition_penalty: 1.05` in its generation_config."""
    from transformers import GenerationConfig

    directory: Path = tmp_path_factory.mktemp("tiny-qwen-penalty")
    build_tiny_qwen25_vl(directory)
    GenerationConfig(repetition_penalty=1.05, do_sample=True, temperature=0.7).save_pretrained(directory)
    return directory


@pytest.mark.parametrize(("temperature", "penalised"), [(0.7, False), (1.3, False), (0.7, True)])
def test_the_trainer_scores_the_distribution_the_sampler_sampled_from(
    policy: TracingPolicy, penalised_model: Path, temperature: float, penalised: bool
) -> None:
    from transformers import AutoModelForImageTextToText

    model = policy.model
    if penalised:
        model = AutoModelForImageTextToText.from_pretrained(penalised_model, local_files_only=True).eval()
        assert model.generation_config.repetition_penalty == 1.05
    sampler = TracingPolicy(model, policy.processor, temperature=temperature, max_new_tokens=12)
    trajectories = _run(sampler, [f"t{temperature}{penalised}#0", f"t{temperature}{penalised}#1"])
    for trajectory in trajectories:
        example = sampler.example(trajectory.task_id)  # type: ignore[attr-defined]
        with torch.no_grad():
            rescored = forward_logprobs(model, example, "cpu", sampler.blocked, temperature=temperature)[0]
        mask = example.mask.bool()
        assert example.logprobs is not None and mask.sum() > 10
        # The on-policy ratio exp(logp - old_logp) is 1 on every sampled token.
        ratio = (rescored[mask] - example.logprobs[mask]).exp()
        assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-3), (ratio.min(), ratio.max())


def test_a_checkpoint_processor_the_trainer_cannot_score_is_refused(penalised_model: Path) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(penalised_model, local_files_only=True)
    model.generation_config.min_p = 0.05
    with pytest.raises(ValueError, match="min_p"):
        TracingPolicy(model, load_processor(penalised_model))
