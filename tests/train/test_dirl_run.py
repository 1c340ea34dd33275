"""`spacetools train dirl` end to end on a miniature config: every stage, the ablation, the results, a rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.train.config import DIRLConfig
from spacetools.train.dirl import DIRLRun

MINIATURE = {
    "base_model": "tiny",
    "tiny": {"vocab_size": 384, "hidden_size": 32, "layers": 1, "heads": 2, "max_pixels": 112 * 84},
    "data": {
        "train_n": 1,
        "train_seed": 100,
        "eval_n": 1,
        "eval_seed": 200,
        "families": ["robospatial", "blinkdepth"],
    },
    "system_prompt": "Answer with <tool_call>{...}</tool_call> or <answer>...</answer>.\n{tools}",
    "irl": {"steps": 1, "prompts_per_step": 1, "group_size": 2, "max_new_tokens": 8, "max_turns": 1},
    "mix": {"irl": 1, "universal": 1},
    "sft": {"epochs": 1, "batch_size": 2},
    "grpo": {"steps": 2, "prompts_per_step": 1, "group_size": 2, "max_new_tokens": 8, "max_turns": 1},
    "eval_max_new_tokens": 8,
    "eval_max_turns": 1,
    "ablation": True,
}


@pytest.mark.slow
def test_the_whole_recipe_runs_and_a_rerun_only_reports(tmp_path: Path) -> None:
    config = tmp_path / "dirl.yaml"
    config.write_text(yaml.safe_dump(MINIATURE))
    out = tmp_path / "run"
    command = ["train", "dirl", "--config", str(config), "--out", str(out)]
    # A random tiny model answers nothing, so its IRL teacher keeps no trace; a hand-written one stands in,
    # so that DIRL without stage 1 trains on other data than the full run.
    irl = {
        "id": "spatialsim_robospatial/0",
        "data_source": "spatialsim_robospatial",
        "family": "robospatial",
        "teacher": "hand",
        "score": 1.0,
        "messages": [
            {"role": "user", "content": "Is the mug left of the box? Answer yes or no."},
            {"role": "assistant", "content": "<answer>Yes</answer>"},
        ],
        "images": [],
    }
    (out / "traces_irl").mkdir(parents=True)
    (out / "traces_irl" / "traces.jsonl").write_text(json.dumps(irl) + "\n")
    (out / "traces_irl" / "DONE").write_text("{}\n")

    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    for stage in ("sft", "grpo", "sft_no_irl", "grpo_no_irl"):
        assert (out / stage / "model" / "config.json").is_file() and (out / f"{stage}.png").is_file()
        assert any((out / "tensorboard" / stage).iterdir())
    results = json.loads((out / "results.json").read_text())
    columns = results["evaluations"]
    assert list(columns) == ["untrained", "SFT only", "without stage 1", "full DIRL"]
    assert [c["stage"] for c in columns.values()] == ["eval_base", "eval_sft", "eval_no_irl", "eval_dirl"]
    assert all(
        set(c["headline"]) == {"spatialsim_robospatial", "spatialsim_blinkdepth"} for c in columns.values()
    )
    gain = results["stage2_reward_gain"]
    assert gain["steps"] == 2 and gain["prompts_first"] == gain["prompts_last"] == 1
    assert "untrained" in result.output and "valid turn rate" in result.output
    assert "stage 2 GRPO: reward, last fifth of 2 steps" in result.output
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 0, again.output
    assert "[grpo_no_irl] done before, skipped" in again.output and "…" not in again.output
    assert json.loads((out / "results.json").read_text()) == results


def test_without_stage_1_is_the_full_run_when_the_irl_teacher_gave_nothing(tmp_path: Path) -> None:
    run = DIRLRun(DIRLConfig(), tmp_path)
    rows = ['{"id": 1}', '{"id": 2}']
    for stage, written in (("traces_mix", rows), ("traces_no_irl", rows[::-1])):
        (tmp_path / stage).mkdir()
        (tmp_path / stage / "traces.jsonl").write_text("\n".join(written) + "\n")
    assert run._no_irl_is_full()  # the same rows, in another order
    (tmp_path / "traces_mix" / "traces.jsonl").write_text(rows[0] + "\n")
    assert not run._no_irl_is_full()
