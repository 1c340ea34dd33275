"""The reviewer's recipe end to end in miniature: format cold start, stage 2 on its own prompts and the
families chosen on the validation set, the placebo, a second training seed and the sampled evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_dirl_run import MINIATURE
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.train.config import DIRLConfig
from spacetools.train.dirl import run_dirl

RECIPE = {
    **MINIATURE,
    "data": {
        "train_n": 1,
        "train_seed": 100,
        "eval_n": 2,
        "eval_seed": 200,
        "validation_seed": 300,
        "grpo_seed": 400,
        "families": ["reflocation", "blinkdepth"],
    },
    "irl_families": ["reflocation"],
    # The scripted teacher points once and answers: two turns.
    "irl": {"steps": 1, "prompts_per_step": 1, "group_size": 2, "rollout": {"max_turns": 2}},
    "cold_start": {"questions": 2, "seed": 500, "sft": {"epochs": 1, "batch_size": 2}},
    "grpo": {
        "steps": 1,
        "prompts_per_step": 1,
        "group_size": 2,
        "dynamic_sampling": True,
        "max_sampling_rounds": 2,
    },
    "grpo_families": "beats_constant",
    "placebo": True,
    "grpo_seeds": [1],
    "sampled_eval": True,
    "ablation": False,
}


@pytest.mark.slow
def test_the_reviewers_recipe_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_dirl(DIRLConfig.model_validate(RECIPE), out)
    # Stage 1 starts from the format cold start: the scripted teacher's single-tool traces, then SFT.
    cold = [
        json.loads(line) for line in (out / "traces_cold_start" / "traces.jsonl").read_text().splitlines()
    ]
    assert cold and all(row["family"] == "reflocation" for row in cold)
    assert all("roborefer.detect_one" in json.dumps(row["messages"]) for row in cold)  # one tool
    assert (out / "sft_cold_start" / "model" / "config.json").is_file()
    irl_config = json.loads((out / "irl_teacher" / "config.json").read_text())
    assert irl_config["model"] == str(out / "sft_cold_start" / "model")
    # The IRL teacher is scored on the held-out questions of its family, with its one tool.
    irl_eval = json.loads((out / "eval_irl" / "run.json").read_text())
    assert irl_eval["benches"] == ["spatialsim_reflocation"] and irl_eval["tools"]["toolset"] == "pointing"
    # Stage 2: its own prompts, the families chosen on the validation set (none beats the guess here: all,
    # and it says so), DAPO's dropped fraction in every step's metrics.
    chosen = json.loads((out / "grpo_families" / "families.json").read_text())
    assert set(chosen["benchmarks"]) == {"spatialsim_reflocation", "spatialsim_blinkdepth"}
    grpo_config = json.loads((out / "grpo" / "config.json").read_text())
    assert grpo_config["data"] == str(out / "data" / "grpo_train")
    assert sorted(grpo_config["benches"]) == chosen["trained"]
    row = json.loads((out / "grpo" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= row["zero_variance_fraction"] <= 1.0 and "turns_cut" in row and "ratio_drift" in row
    assert json.loads((out / "grpo_placebo" / "config.json").read_text())["placebo"] is True
    assert json.loads((out / "grpo_seed1" / "config.json").read_text())["seed"] == 1
    # The table: every control beside the full run, with its paired gain over SFT.
    block = json.loads((out / "results.json").read_text())["held_out"]["eval"]
    assert list(block["evaluations"]) == [
        "untrained", "IRL teacher (stage 1)", "SFT only", "full DIRL", "placebo", "full DIRL, seed 1", "SFT only, sampled",
        "full DIRL, sampled",
    ]  # fmt: skip
    assert set(block["gains"]) == {"placebo", "seed 1", "sampled"}
    assert "gain, placebo (paired)" in (out / "results.md").read_text()
    # Pooled over the families stage 2 trained, for the full run and each control.
    assert block["pooled_keys"] == chosen["trained"]
    assert set(block["pooled_gains"]) == {"full DIRL", "placebo", "seed 1", "sampled"}
    assert block["pooled_gains"]["full DIRL"]["n"] == 4  # 2 questions of each family
    # A rerun only reports.
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(RECIPE))
    result = CliRunner().invoke(app, ["train", "dirl", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "[grpo_seed1] done before, skipped" in result.output
