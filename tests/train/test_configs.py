"""The shipped DIRL configs load into the config objects, and bad settings are one clear line from the CLI,
before anything runs: a misspelt key in any stage's block fails in the first second, not after SFT."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.train.config import DIRLConfig, GRPOConfig, SFTConfig, TracesConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["dirl-tiny.yaml", "dirl-qwen2.5-vl-3b.yaml", "dirl-smollm2.yaml"])
def test_shipped_configs_validate_with_their_stage_settings(name: str, tmp_path: Path) -> None:
    config = load_config(DIRLConfig, CONFIGS / name)
    assert config.data.train_seed != config.data.eval_seed
    paths = {"model": tmp_path, "data": tmp_path, "out": tmp_path}
    SFTConfig.model_validate({**paths, **config.stage_settings(config.sft)})
    for block in (config.grpo, config.irl):
        grpo = GRPOConfig.model_validate({**paths, **config.stage_settings(block)})
        assert grpo.tools == config.tools and grpo.device == config.device
    traces = TracesConfig.model_validate(
        {"data": tmp_path, "out": tmp_path, **config.stage_settings(config.universal_teacher)}
    )
    assert traces.rollout.system_prompt == config.rollout.system_prompt


def test_paper_settings_are_the_defaults_of_the_stage_objects(tmp_path: Path) -> None:
    sft = SFTConfig(model=tmp_path, data=tmp_path, out=tmp_path)
    assert (sft.epochs, sft.warmup_ratio, sft.freeze_vision) == (2, 0.1, True)
    grpo = GRPOConfig(model=tmp_path, data=tmp_path, out=tmp_path)
    assert (grpo.group_size, grpo.learning_rate, grpo.kl_coef, grpo.rollout.max_turns) == (5, 1e-6, 0.01, 8)


def test_the_recipes_tools_and_rollout_reach_every_stage_with_each_blocks_own_fields_on_top() -> None:
    config = DIRLConfig.model_validate(
        {
            "tools": {"profile": "exact", "seed": 3},
            "rollout": {"max_turns": 4, "max_new_tokens": 64, "system_prompt": "Answer. {tools}"},
            "irl": {"rollout": {"max_turns": 2}, "tools": {"seed": 5}},
            "seed": 7,
        }
    )
    irl = config.stage_settings(config.irl)
    assert irl["rollout"] == {**config.rollout.model_dump(), "max_turns": 2}
    assert irl["tools"] == {**config.tools.model_dump(), "seed": 5}
    assert irl["seed"] == 7  # the recipe's training seed; the tools keep their own
    grpo = config.stage_rollout(config.grpo)
    assert (grpo.max_turns, grpo.max_new_tokens, grpo.system_prompt) == (4, 64, "Answer. {tools}")
    assert config.stage_rollout(config.universal_teacher) == config.rollout
    assert "seed" not in config.stage_settings(config.universal_teacher)  # traces have no training seed


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("sft: [1, 2]\n", "sft"),
        ("unknown_setting: 3\n", "unknown_setting"),
        ("- a list\n", "mapping"),
        ("grpo: {learnin_rate: 1.0e-6}\n", "grpo.learnin_rate: unknown key"),
        ("irl: {steps: 2, max_turns: 3}\n", "irl.max_turns: unknown key"),
        ("sft: {epoch: 2}\n", "sft.epoch: unknown key"),
        (
            "universal_teacher: {teachr: scripted}\n",
            "universal_teacher.teachr: unknown key",
        ),
        ("grpo: {rollout: {max_turn: 3}}\n", "grpo.rollout.max_turn: unknown key"),
        ("tools: {profile: perfect}\n", "unknown profile 'perfect'"),
        ("irl_toolset: pointer\n", "unknown toolset 'pointer'"),
        ("irl: {tools: {toolset: v1}}\n", "irl.tools.toolset: the IRL teacher's tool set is irl_toolset"),
        ("profile: exact\n", "profile: unknown key"),  # now tools.profile
        ("eval_max_turns: 4\n", "eval_max_turns: unknown key"),  # now rollout.max_turns
    ],
)
def test_a_bad_config_is_one_line(yaml_text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    result = CliRunner().invoke(app, ["train", "dirl", "--config", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert result.output.startswith("Error:") and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "run").exists()  # refused before the run folder is made
