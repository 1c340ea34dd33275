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
