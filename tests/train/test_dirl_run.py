"""`spacetools train dirl` end to end on a miniature config: every stage, the ablation, the results, a rerun."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
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
    "tools": {"profile": "exact"},
    "rollout": {
        "system_prompt": "Answer with <tool_call>{...}</tool_call> or <answer>...</answer>.\n{tools}",
        "max_new_tokens": 8,
        "max_turns": 1,
    },
    "universal_teacher": {"rollout": {"max_turns": 8}},
    "irl": {"steps": 1, "prompts_per_step": 1, "group_size": 2},
    "mix": {"irl": 1, "universal": 1},
    "sft": {"epochs": 1, "batch_size": 2},
    "grpo": {
        "steps": 2,
        "prompts_per_step": 1,
        "group_size": 2,
        "checkpoint_every": 1,
    },
    "ablation": True,
    "turn_check": False,  # the plumbing on one-turn episodes, not families a model could finish
}


# A random tiny model answers nothing, so its IRL teacher keeps no trace; a hand-written one stands in,
# so that DIRL without stage 1 trains on other data than the full run.
IRL_TRACE = {
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


def _prepare(tmp_path: Path, name: str) -> tuple[list[str], Path]:
    config = tmp_path / "dirl.yaml"
    config.write_text(yaml.safe_dump(MINIATURE))
    out = tmp_path / name
    (out / "traces_irl").mkdir(parents=True)
    (out / "run.lock").write_text("")  # a run folder's first file: this one holds a finished stage
    (out / "traces_irl" / "traces.jsonl").write_text(json.dumps(IRL_TRACE) + "\n")
    (out / "traces_irl" / "DONE").write_text("{}\n")
    return ["train", "dirl", "--config", str(config), "--out", str(out)], out


@pytest.mark.slow
def test_the_whole_recipe_runs_resumes_after_kill_9_and_a_rerun_only_reports(tmp_path: Path) -> None:
    command, out = _prepare(tmp_path, "run")
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    for stage in ("sft", "grpo", "sft_no_irl", "grpo_no_irl"):
        assert (out / stage / "model" / "config.json").is_file() and (out / f"{stage}.png").is_file()
        assert any((out / "tensorboard" / stage).iterdir())
    results = json.loads((out / "results.json").read_text())
    held_out = results["held_out"]["eval"]
    columns = held_out["evaluations"]
    assert list(columns) == ["untrained", "IRL teacher (stage 1)", "SFT only", "without stage 1", "full DIRL"]
    folders = ["eval_base", "eval_irl", "eval_sft", "eval_no_irl", "eval_dirl"]
    assert [c["folder"] for c in columns.values()] == folders
    keys = {"spatialsim_robospatial", "spatialsim_blinkdepth"}
    # The IRL teacher is evaluated on its own families only, with its one tool set.
    irl_families = {f"spatialsim_{family}" for family in DIRLConfig.model_validate(MINIATURE).irl_families}
    assert set(columns["IRL teacher (stage 1)"]["benchmarks"]) == irl_families & keys
    assert all(set(c["benchmarks"]) == keys for name, c in columns.items() if name != "IRL teacher (stage 1)")
    # The constant guess and the paired SFT → DIRL gain sit beside the models, per benchmark.
    assert set(held_out["constant_guess"]) == keys and set(held_out["grpo_gain"]) == keys
    assert (out / "results.md").read_text() in result.output
    gain = results["training_reward_gain"]
    assert gain["steps"] == 2 and gain["prompts_first"] == gain["prompts_last"] == 1
    assert "untrained" in result.output and "valid turn rate" in result.output
    assert "stage 2 GRPO, training prompts: reward, last fifth of 2 steps" in result.output
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 0, again.output
    assert "[grpo_no_irl] done before, skipped" in again.output and "…" not in again.output
    assert json.loads((out / "results.json").read_text()) == results
    # The trained checkpoint is a model `spacetools eval --policy hf` runs.
    evaluated = CliRunner().invoke(
        app,
        [
            "eval", "--policy", "hf", "--option", f"model_path={out / 'grpo' / 'model'}",
            "--option", "max_new_tokens=8", "--data", str(out / "data" / "eval"),
            "--out", str(tmp_path / "eval"), "--max-turns", "1",
        ],
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["n"] == 2

    # The same run killed with -9 once stage 2 has checkpointed its first step (eval, the ablation's SFT,
    # GRPO and eval still ahead), then the same command again: it continues and ends where the unbroken
    # run ended.
    command, killed = _prepare(tmp_path, "killed")
    process = subprocess.Popen(
        [sys.executable, "-c", "from spacetools.cli.main import app; app()", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first_step = killed / "grpo" / "metrics.jsonl"
    while process.poll() is None and not (first_step.is_file() and first_step.read_text().strip()):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (killed / "results.json").exists()
    resumed = CliRunner().invoke(app, command)
    assert resumed.exit_code == 0, resumed.output
    assert "[sft] done before, skipped" in resumed.output
    assert json.loads((killed / "results.json").read_text()) == results
    steps = [
        json.loads(line)["step"] for line in (killed / "grpo" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2]


def test_without_stage_1_is_the_full_run_when_the_irl_teacher_gave_nothing(tmp_path: Path) -> None:
    run = DIRLRun(DIRLConfig(), tmp_path)
    rows = ['{"id": 1}', '{"id": 2}']
    for stage, written in (("traces_mix", rows), ("traces_no_irl", rows[::-1])):
        (tmp_path / stage).mkdir()
        (tmp_path / stage / "traces.jsonl").write_text("\n".join(written) + "\n")
    assert run._no_irl_is_full()  # the same rows, in another order
    (tmp_path / "traces_mix" / "traces.jsonl").write_text(rows[0] + "\n")
    assert not run._no_irl_is_full()


def test_both_mixes_carry_the_configs_teacher_thoughts(tmp_path: Path) -> None:
    turn = "<think>The mug is at (0.4, 0.5).</think>\n<answer>Yes</answer>"
    row = {"id": "u", "messages": [{"role": "assistant", "content": turn}]}
    for stage in ("traces_irl", "traces_universal"):
        (tmp_path / stage).mkdir()
        (tmp_path / stage / "traces.jsonl").write_text(json.dumps(row) + "\n")
    run = DIRLRun(DIRLConfig(teacher_thoughts="empty"), tmp_path)
    for stage, mix in (("traces_mix", run._mix), ("traces_no_irl", run._mix_without_irl)):
        (tmp_path / stage).mkdir()
        mix(tmp_path / stage)
        written = [json.loads(line) for line in (tmp_path / stage / "traces.jsonl").read_text().splitlines()]
        assert {r["messages"][0]["content"] for r in written} == {"<think></think>\n<answer>Yes</answer>"}
