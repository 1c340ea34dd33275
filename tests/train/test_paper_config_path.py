"""The 3B config's code path with tiny shapes: its SFT, IRL and GRPO settings (bf16, gradient checkpointing,
frozen vision tower) train a tiny Qwen2.5-VL on the CPU, changing only sizes. The GPU run uses the same code."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spacetools.bench.spatialsim.generator import generate_group, write_families
from spacetools.kit import imagecodec
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import get_toolset
from tiny_qwen import build_tiny_qwen25_vl

torch = pytest.importorskip("torch")

from transformers import AutoModelForImageTextToText  # noqa: E402

from spacetools.train.config import DIRLConfig, GRPOConfig, SFTConfig, load_config  # noqa: E402
from spacetools.train.grpo import train_grpo_async  # noqa: E402
from spacetools.train.sft import train_sft  # noqa: E402

PAPER = load_config(DIRLConfig, Path(__file__).resolve().parents[2] / "configs" / "dirl-qwen2.5-vl-3b.yaml")
# What a CPU test changes: sizes and the device, never the precision, checkpointing or freezing.
TINY_SIZES = {"device": "cpu", "checkpoint_every": 1}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-qwen")
    build_tiny_qwen25_vl(directory)
    return directory


def _episode(answer: str) -> dict[str, Any]:
    call = (
        '<tool_call>{"name": "depth_estimator.estimate_depth", "arguments": {"image_index": 0}}</tool_call>'
    )
    return {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "index": 0}, {"type": "text", "text": "How far?"}],
            },
            {"role": "assistant", "content": call},
            {"role": "tool", "content": "Depth range 0.65m to 1.29m"},
            {"role": "assistant", "content": f"<answer>{answer}</answer>"},
        ],
        "images": [imagecodec.to_data_url(np.full((56, 56, 3), 90, np.uint8))],
    }


def _dtypes(model_dir: Path) -> set[torch.dtype]:
    model = AutoModelForImageTextToText.from_pretrained(model_dir, local_files_only=True, dtype="auto")
    return {parameter.dtype for parameter in model.parameters()}


def test_the_paper_sft_settings_train_in_bf16_with_checkpointing(tiny_model: Path, tmp_path: Path) -> None:
    settings = PAPER.sft
    assert (settings["dtype"], settings["gradient_checkpointing"], settings["freeze_vision"]) == (
        "bfloat16",
        True,
        True,
    )
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(_episode(a)) + "\n" for a in ("(A)", "(B)")), encoding="utf-8")
    config = SFTConfig.model_validate(
        {**settings, **TINY_SIZES, "model": tiny_model, "data": traces, "out": tmp_path / "sft", "epochs": 1}
    )
    trained = train_sft(config)
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1  # two episodes, batch 8: one step
    assert np.isfinite(rows[0]["loss"]) and rows[0]["loss"] > 0 and rows[0]["grad_norm"] > 0
    assert _dtypes(trained) == {torch.bfloat16}
    # The frozen vision tower left SFT unchanged; the language model moved.
    before = AutoModelForImageTextToText.from_pretrained(
        tiny_model, local_files_only=True, dtype=torch.bfloat16
    )
    after = AutoModelForImageTextToText.from_pretrained(trained, local_files_only=True, dtype="auto")
    moved = {
        name: not torch.equal(parameter, after.state_dict()[name])
        for name, parameter in before.state_dict().items()
    }
    assert not any(changed for name, changed in moved.items() if "visual" in name)
    assert any(changed for name, changed in moved.items() if "language_model" in name)


@pytest.mark.parametrize("stage", ["irl", "grpo"])
def test_the_paper_grpo_settings_run_a_step_in_bf16_with_checkpointing(
    stage: str, tiny_model: Path, tmp_path: Path
) -> None:
    settings = getattr(PAPER, stage)
    assert (settings["dtype"], settings["gradient_checkpointing"]) == ("bfloat16", True)
    data = tmp_path / "data"
    write_families(data, {"robospatial": generate_group(0, "robospatial", 0, 1)})
    sizes = {"steps": 1, "prompts_per_step": 1, "group_size": 2, "max_new_tokens": 8, "max_turns": 2}
    config = GRPOConfig.model_validate(
        {**settings, **TINY_SIZES, **sizes, "model": tiny_model, "data": data, "out": tmp_path / stage}
    )
    assert config.learning_rate == settings["learning_rate"] and config.kl_coef == settings["kl_coef"]

    async def train() -> Path:
        deployments = [d.model_copy(update={"backend": "inprocess"}) for d in get_toolset("v1")]
        async with Toolshed(deployments) as tools:
            return await train_grpo_async(config, tools=tools)

    trained = asyncio.run(train())
    rows = [json.loads(line) for line in (tmp_path / stage / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1]
    assert np.isfinite(rows[0]["policy_loss"]) and np.isfinite(rows[0]["kl"]) and rows[0]["model_tokens"] > 0
    assert _dtypes(trained) == {torch.bfloat16}
