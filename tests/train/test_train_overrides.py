"""Train configs as verl and TRL users drive them: `key=value` overrides on the command line, the resolved
config recorded in the run folder, `report_to: [tensorboard, wandb]` (W&B offline without an account)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.kit import imagecodec
from spacetools.train.config import DIRLConfig, load_config
from spacetools.train.dirl import DIRLRun

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
runner = CliRunner()


def test_dotted_overrides_reach_nested_settings_and_keep_the_rest_of_the_file() -> None:
    overrides = ["sft.epochs=2", "grpo.learning_rate=1e-6", "report_to=[tensorboard,wandb]", "data.eval_n=3"]
    config = load_config(DIRLConfig, CONFIGS / "dirl-tiny.yaml", overrides)
    assert config.sft.epochs == 2 and config.sft.batch_size == 4  # merged into the file's sft
    assert config.grpo.learning_rate == 1e-6 and config.grpo.steps == 20
    assert config.report_to == ["tensorboard", "wandb"]
    assert (config.data.eval_n, config.data.train_n) == (3, 48)


def test_every_stage_reports_where_the_recipe_says_unless_its_own_settings_say_otherwise(
    tmp_path: Path,
) -> None:
    run = DIRLRun(DIRLConfig(report_to=["wandb"], grpo={"report_to": []}), tmp_path)
    assert run._grpo_config(run.config.irl, tmp_path, tmp_path / "irl").report_to == ["wandb"]
    assert run._grpo_config(run.config.grpo, tmp_path, tmp_path / "grpo").report_to == []


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sft.epochs=two", "sft.epochs: Input should be a valid integer"),
        ("sft.epoch=2", "sft.epoch: unknown key"),
        ("grpo.group_size=1", "grpo.group_size: Input should be greater than or equal to 2"),
        ("grpo.max_turns=4", "grpo.max_turns: unknown key"),  # now grpo.rollout.max_turns
        ("report_to=[mlflow]", "report_to.0: Input should be 'tensorboard' or 'wandb'"),
        ("nonsense=1", "nonsense: unknown key"),
        ("sft.epochs", "expected key=value, got 'sft.epochs'"),
        ("sft=[1", "'sft=[1': not a YAML value"),
        ("a." * 2000 + "b=1", "a key has at most 16 dotted levels"),
        ("base_model=${oc.env:HOME}", "interpolation (${...}) is not supported"),
        ("base_model=${", "interpolation (${...}) is not supported"),
        ("sft.learning_rate=.inf", "sft.learning_rate: Input should be a finite number"),
        ("grpo.kl_coef=.nan", "grpo.kl_coef: Input should be a finite number"),
    ],
)
def test_a_bad_override_is_one_error_line_before_anything_runs(
    override: str, message: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    command = ["train", "dirl", "--config", str(CONFIGS / "dirl-tiny.yaml"), "--out", str(out), override]
    result = runner.invoke(app, command)
    assert result.exit_code == 2
    assert result.output.startswith("Error:") and len(result.output.strip().splitlines()) == 1
    assert message in result.output
    assert not out.exists()


def _traces(path: Path) -> Path:
    image = imagecodec.to_data_url(np.full((56, 56, 3), 90, np.uint8))
    rows = [
        {
            "messages": [
                {"role": "system", "content": "system"},
                {
                    "role": "user",
                    "content": [{"type": "image", "index": 0}, {"type": "text", "text": "Which?"}],
                },
                {"role": "assistant", "content": f"<answer>{answer}</answer>"},
            ],
            "images": [image],
        }
        for answer in ("(A)", "(B)")
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_sft_takes_overrides_records_them_and_keeps_an_offline_wandb_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    wandb = pytest.importorskip("wandb")
    from tiny_qwen import build_tiny_qwen25_vl

    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # no account, no network: W&B keeps the run offline
    monkeypatch.delenv("WANDB_MODE", raising=False)
    model = tmp_path / "model"
    build_tiny_qwen25_vl(model)
    config = tmp_path / "sft.yaml"
    config.write_text("epochs: 3\nbatch_size: 2\nlearning_rate: 1.0e-3\n")
    out = tmp_path / "run"
    command = [
        "train", "sft", "--model", str(model), "--data", str(_traces(tmp_path / "traces.jsonl")),
        "--out", str(out), "--config", str(config), "epochs=1", "learning_rate=5e-3", "report_to=[wandb]",
    ]  # fmt: skip
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output

    recorded = json.loads((out / "config.json").read_text())  # the resolved config
    assert (recorded["epochs"], recorded["batch_size"], recorded["learning_rate"]) == (1, 2, 5e-3)
    assert recorded["report_to"] == ["wandb"]
    assert not (out / "tensorboard").exists()  # not asked for
    wandb.teardown()  # W&B's service writes the run's records as it stops (at the command's exit)
    (wandb_run,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    assert b"sft/loss" in wandb_run.read_bytes()  # the step's figures are in the run's records
    log = (out / "run.log").read_text()
    assert "W&B run" in log and "(offline)" in log
