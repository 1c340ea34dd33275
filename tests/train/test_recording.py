"""The `hf` policy returns its episodes token-exactly on the trajectories: the trainer scores the sampled ids as
they were sampled, and an episode samples the same tokens whichever episodes share its batch."""

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

from spacetools.agent.policies.hf import HFPolicy  # noqa: E402
from spacetools.kit.loading import load_processor  # noqa: E402
from spacetools.train.episodes import forward_logprobs, sampled_example  # noqa: E402


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> HFPolicy:
    from transformers import AutoModelForImageTextToText

    directory: Path = tmp_path_factory.mktemp("tiny-qwen")
    build_tiny_qwen25_vl(directory)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(directory, local_files_only=True).eval()
    return HFPolicy(model, load_processor(directory), temperature=1.0, max_new_tokens=12, record=True)


def _run(policy: HFPolicy, ids: list[str], concurrency: int = 2) -> list[object]:
    image = np.full((56, 56, 3), 120, np.uint8)
    tasks = [
        Task(id=i, data_source="robospatial", question="Is the mug left of the bowl?", images=[image])
        for i in ids
    ]
    # A random model rarely calls a tool: being told to go on gives every episode three sampled turns.
    config = RolloutConfig(max_turns=3, feedback_on_no_answer=True, concurrency=concurrency)

    async def go() -> list[object]:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            try:
                return list(await run_episodes(policy, shed, tasks, config=config))
            finally:
                await policy.aclose()

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
    policy: HFPolicy,
) -> None:
    policy.reset_stats()
    trajectories = _run(policy, ["a#0", "a#1"])
    sampled = sum(int(sampled_example(t).mask.sum()) for t in trajectories)  # type: ignore[arg-type]
    stats = policy.stats()
    # Every sampled token's distribution counted once; a random tiny model is far from certain.
    assert stats["new_tokens"] == sampled
    assert 0.5 < stats["entropy"] <= math.log(len(policy.processor.tokenizer))
    assert stats["max_batch"] == 2  # the two episodes' turns share each generate call
    for trajectory in trajectories:
        example = sampled_example(trajectory)  # type: ignore[arg-type]
        tokens = trajectory.tokens  # type: ignore[attr-defined]
        assert (
            tokens.blocked == policy.blocked
            and tokens.prompt_ids == example.ids[: tokens.prompt_length].tolist()
        )
        assert tokens.response_mask[0] == 1 and not any(tokens.mask[: tokens.prompt_length])
        assert "tokens" not in trajectory.to_dict()  # type: ignore[attr-defined]
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


def test_an_episode_samples_the_same_tokens_whichever_episodes_share_its_batch(policy: HFPolicy) -> None:
    together = _run(policy, ["b#0", "b#1", "b#2"], concurrency=3)
    assert policy.stats()["max_batch"] == 3
    batched = {t.task_id: sampled_example(t) for t in together}  # type: ignore[attr-defined, arg-type]
    alone = HFPolicy(
        policy.model, policy.processor, temperature=1.0, max_new_tokens=12, batch_size=1, record=True
    )
    apart = _run(alone, ["b#2", "b#1"])  # other company, other order, one episode per generate call
    assert alone.stats()["max_batch"] == 1
    by_id = {t.task_id: sampled_example(t) for t in apart}  # type: ignore[attr-defined, arg-type]
    for episode_id in ("b#1", "b#2"):
        single = by_id[episode_id]
        assert single.ids.tolist() == batched[episode_id].ids.tolist()
        assert single.logprobs is not None and batched[episode_id].logprobs is not None
        # Left padding in a batch moves the logits by float rounding at most.
        assert torch.allclose(single.logprobs, batched[episode_id].logprobs, atol=1e-5)
    assert batched["b#0"].ids.tolist() != batched["b#1"].ids.tolist()  # each episode its own seed


@pytest.fixture(scope="module")
def penalised_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model saved with Qwen2.5-VL Instruct's generation_config (a repetition penalty, near-greedy
    top-k and top-p) plus a min-p."""
    from transformers import GenerationConfig

    directory: Path = tmp_path_factory.mktemp("tiny-qwen-penalty")
    build_tiny_qwen25_vl(directory)
    GenerationConfig(
        repetition_penalty=1.05, do_sample=True, temperature=0.1, top_k=1, top_p=0.001, min_p=0.05
    ).save_pretrained(directory)
    return directory


@pytest.mark.parametrize(("temperature", "penalised"), [(0.7, False), (1.3, False), (0.7, True)])
def test_the_trainer_scores_the_distribution_the_sampler_sampled_from(
    policy: HFPolicy, penalised_model: Path, temperature: float, penalised: bool
) -> None:
    from transformers import AutoModelForImageTextToText

    model = policy.model
    if penalised:
        model = AutoModelForImageTextToText.from_pretrained(penalised_model, local_files_only=True).eval()
        assert model.generation_config.repetition_penalty == 1.05
    sampler = HFPolicy(model, policy.processor, temperature=temperature, max_new_tokens=12, record=True)
    trajectories = _run(sampler, [f"t{temperature}{penalised}#0", f"t{temperature}{penalised}#1"])
    assert sampler.stats()["max_batch"] == 2  # scored one by one, sampled in a batch
    for trajectory in trajectories:
        example = sampled_example(trajectory)  # type: ignore[arg-type]
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
    model.generation_config.min_new_tokens = 4
    with pytest.raises(ValueError, match="min_new_tokens"):
        HFPolicy(model, load_processor(penalised_model), temperature=1.0, record=True)
    HFPolicy(model, load_processor(penalised_model))  # evaluation decodes as the checkpoint asks


def test_the_rollout_s_token_limits_bound_the_sampled_turns_and_the_count_is_the_trace_s(
    policy: HFPolicy,
) -> None:
    image = np.full((56, 56, 3), 120, np.uint8)
    tasks = [
        Task(id=f"budget#{k}", data_source="robospatial", question="Mug left?", images=[image])
        for k in range(2)
    ]
    config = RolloutConfig(max_turns=3, feedback_on_no_answer=True, max_new_tokens=5, max_episode_tokens=12)

    async def go() -> list[object]:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            try:
                return list(await run_episodes(policy, shed, tasks, config=config))
            finally:
                await policy.aclose()

    for trajectory in asyncio.run(go()):
        example = sampled_example(trajectory)  # type: ignore[arg-type]
        turns = _sampled_turns(example)
        assert all(1 <= len(turn) <= 5 for turn in turns)
        tokens = trajectory.stats["model_tokens"]  # type: ignore[attr-defined]
        assert tokens == int(example.mask.sum()) <= 12
        assert (trajectory.finish_reason == "max_episode_tokens") == (tokens == 12)  # type: ignore[attr-defined]
