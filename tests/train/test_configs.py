"""The shipped DIRL configs load into the config objects, and bad settings are one clear line from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.train.config import DIRLConfig, GRPOConfig, SFTConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["dirl-tiny.yaml", "dirl-qwen2.5-vl-3b.yaml", "dirl-smollm2.yaml"])
def test_shipped_configs_validate_with_their_stage_settings(name: str, tmp_path: Path) -> None:
    config = load_config(DIRLConfig, CONFIGS / name)
    assert config.data.train_seed != config.data.eval_seed
    paths = {"model": tmp_path, "data": tmp_path, "out": tmp_path}
    SFTConfig.model_validate({**paths, **config.sft})
    GRPOConfig.model_validate({**paths, **config.grpo})
    GRPOConfig.model_validate({**paths, **config.irl})


def test_paper_settings_are_the_defaults_of_the_stage_objects(tmp_path: Path) -> None:
    sft = SFTConfig(model=tmp_path, data=tmp_path, out=tmp_path)
    assert (sft.epochs, sft.warmup_ratio, sft.freeze_vision) == (2, 0.1, True)
    grpo = GRPOConfig(model=tmp_path, data=tmp_path, out=tmp_path)
    assert (grpo.group_size, grpo.learning_rate, grpo.kl_coef, grpo.max_turns) == (5, 1e-6, 0.01, 8)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("sft: [1, 2]\n", "sft"),
        ("unknown_setting: 3\n", "unknown_setting"),
        ("- a list\n", "mapping"),
    ],
)
def test_a_bad_config_is_one_line(yaml_text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    result = CliRunner().invoke(app, ["train", "dirl", "--config", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
