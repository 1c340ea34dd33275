"""GRPO end to end on a tiny random Qwen2.5-VL with the live V1 tools: metrics, checkpoints and exact resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spacetools.agent.rollout import RolloutConfig
from spacetools.bench.spatialsim.generator import generate_group, write_families
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import get_toolset
from tiny_qwen import build_tiny_qwen25_vl

torch = pytest.importorskip("torch")

from spacetools.train.config import GRPOConfig  # noqa: E402
from spacetools.train.grpo import train_grpo_async  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    model = tmp_path_factory.mktemp("tiny-qwen")
    build_tiny_qwen25_vl(model)
    data = tmp_path_factory.mktemp("data")
    write_families(data, {"robospatial": generate_group(0, "robospatial", 0, 2)})
    return model, data


def _config(model: Path, data: Path, out: Path) -> GRPOConfig:
    return GRPOConfig(
        model=model,
        data=data,
        out=out,
        steps=3,
        prompts_per_step=1,
        group_size=2,
        learning_rate=1e-3,
        rollout=RolloutConfig(max_new_tokens=8, max_turns=2),
        checkpoint_every=1,
        temperature=0.7,
    )


def _rows(out: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_grpo_steps_record_metrics_and_resume_exactly(setup: tuple[Path, Path], tmp_path: Path) -> None:
    asyncio.run(_grpo_steps_record_metrics_and_resume_exactly(*setup, tmp_path))


async def _grpo_steps_record_metrics_and_resume_exactly(model: Path, data: Path, tmp_path: Path) -> None:
    # The V1 tools in this process: one Toolshed serves the three runs.
    deployments = [d.model_copy(update={"backend": "inprocess"}) for d in get_toolset("v1")]
    async with Toolshed(deployments) as tools:
        await _runs(model, data, tmp_path, tools)


async def _runs(model: Path, data: Path, tmp_path: Path, tools: Toolshed) -> None:
    unbroken = tmp_path / "unbroken"
    trained = await train_grpo_async(_config(model, data, unbroken), tools=tools)
    assert (trained / "model.safetensors").is_file()
    rows = _rows(unbroken)
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the first step starts at the reference
    assert all(0.0 <= row["valid_turn_rate"] <= 1.0 and row["model_tokens"] > 0 for row in rows)
    # Sampled at temperature 0.7 and scored at it: on-policy, the ratio is 1 on every token.
    assert all(row["ratio_drift"] < 1e-3 for row in rows)

    class Killed(Exception):
        pass

    def kill_after_step_2(step: int, total: int, row: dict[str, object]) -> None:
        if step == 2:
            raise Killed

    broken = tmp_path / "broken"
    with pytest.raises(Killed):
        await train_grpo_async(_config(model, data, broken), progress=kill_after_step_2, tools=tools)
    await train_grpo_async(_config(model, data, broken), tools=tools)
    keys = ("reward_mean", "policy_loss", "kl", "model_tokens", "calls_per_episode")
    assert [row[k] for row in _rows(broken) for k in keys] == pytest.approx(
        [row[k] for row in rows for k in keys], rel=1e-5, abs=1e-7
    )


def test_a_stage_without_reward_says_so_and_stops(setup: tuple[Path, Path], tmp_path: Path) -> None:
    asyncio.run(_a_stage_without_reward_says_so_and_stops(*setup, tmp_path))


async def _a_stage_without_reward_says_so_and_stops(model: Path, data: Path, tmp_path: Path) -> None:
    deployments = [d.model_copy(update={"backend": "inprocess"}) for d in get_toolset("v1")]
    # A random model answers nothing: every reward is 0, every group equal. Dynamic sampling tries twice
    # per step and finds no useful group; the LoRA reference is the policy with its adapter off.
    config = _config(model, data, tmp_path / "run").model_copy(
        update={
            "steps": 5,
            "dynamic_sampling": True,
            "max_sampling_rounds": 2,
            "placebo": True,
            "zero_reward_patience": 2,
            "trainable": "lora",
            "kl_coef": 0.1,
        }
    )
    async with Toolshed(deployments) as tools:
        await train_grpo_async(config, tools=tools)
        rows = _rows(config.out)
        assert [row["step"] for row in rows] == [1, 2]
        assert "stopped" not in rows[0] and "only zero rewards for 2 steps" in str(rows[1]["stopped"])
        for row in rows:
            assert row["sampling_rounds"] == 2 and row["zero_variance_fraction"] == 1.0
            assert row["groups_trained"] == 0 and row["model_tokens"] == 0 and row["reward_mean"] == 0.0
            assert len(row["rewards"]) == 4  # both rounds' episodes are reported
        # A rerun of the stopped stage trains nothing more.
        await train_grpo_async(config, tools=tools)
    assert [row["step"] for row in _rows(config.out)] == [1, 2]


def test_the_lora_reference_is_the_policy_with_its_adapter_disabled(setup: tuple[Path, Path]) -> None:
    from spacetools.kit.loading import load_processor, load_vlm
    from spacetools.train.episodes import encode_episode, forward_logprobs
    from spacetools.train.grpo import load_policy_model, load_reference, reference_logprobs

    model_path, data = setup
    config = _config(model_path, data, Path("unused")).model_copy(
        update={"trainable": "lora", "kl_coef": 0.1}
    )
    assert load_reference(config, None, resumed=False) is None  # no second model
    policy = load_policy_model(model_path, config, resume=False)
    with torch.no_grad():  # a trained adapter: the policy moves away from its base
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.fill_(0.05)
    messages = [
        {"role": "user", "content": "Where is the mug?"},
        {"role": "assistant", "content": "(0.5, 0.5)"},
    ]
    example = encode_episode(load_processor(model_path), messages, [])
    with torch.no_grad():
        base = forward_logprobs(load_vlm(model_path), example, "cpu", temperature=config.temperature)
        moved = forward_logprobs(policy, example, "cpu", temperature=config.temperature)
    reference = reference_logprobs(policy, None, example, config, None)
    assert reference is not None and torch.allclose(reference, base, atol=1e-5)
    assert not torch.allclose(moved, base, atol=1e-3)


def test_the_last_layers_reference_shares_the_frozen_layers_and_equals_the_starting_model(
    setup: tuple[Path, Path],
) -> None:
    from spacetools.kit.loading import load_processor, load_vlm
    from spacetools.kit.trainable import decoder_layers
    from spacetools.train.episodes import encode_episode, forward_logprobs
    from spacetools.train.grpo import load_policy_model, load_reference, policy_logprobs, reference_logprobs
    from spacetools.train.reference import LastLayersReference

    model_path, data = setup
    config = _config(model_path, data, Path("unused")).model_copy(
        update={"trainable": "last_layers:1", "kl_coef": 0.1}
    )
    policy = load_policy_model(model_path, config, resume=False)
    reference = load_reference(config, policy, resumed=False)
    assert isinstance(reference, LastLayersReference) and len(reference.layers) == 1
    with torch.no_grad():  # a trained last layer: the policy moves away from its start
        for weight in decoder_layers(policy)[1][-1].parameters():
            weight.add_(0.05 * torch.randn_like(weight))
    messages = [
        {"role": "user", "content": "Where is the mug?"},
        {"role": "assistant", "content": "(0.5, 0.5)"},
    ]
    example = encode_episode(load_processor(model_path), messages, [])
    start = forward_logprobs(load_vlm(model_path), example, "cpu", temperature=config.temperature)
    moved = policy_logprobs(policy, reference, example, config, None)
    shared = reference_logprobs(policy, reference, example, config, None)
    assert shared is not None and torch.allclose(shared, start.detach(), atol=1e-5)
    assert moved.requires_grad and not torch.allclose(moved.detach(), start.detach(), atol=1e-3)
    with pytest.raises(RuntimeError, match="capture"):  # one policy forward serves one reference pass
        reference.hidden()
    # A resumed stage takes the starting weights from the starting model, not from its trained policy.
    resumed = load_reference(config, policy, resumed=True)
    with resumed.capture():
        forward_logprobs(policy, example, "cpu", temperature=config.temperature)
    again = reference_logprobs(policy, resumed, example, config, None)
    assert again is not None and torch.allclose(again, start.detach(), atol=1e-5)
