"""`spacetools eval` argument errors, and the installed command as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacetools.bench.dataset import Sample, write_parquet
from spacetools.bench.evaluate import EvalConfig
from spacetools.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--policy", "scripted", "--out", "x"], "missing --data"),
        (["--policy", "oracle", "--data", ".", "--out", "x"], "unknown policy 'oracle'"),
        (["--policy", "scripted", "--data", ".", "--out", "x", "--profile", "perfect"], "unknown profile"),
        (["--policy", "scripted", "--data", ".", "--out", "x", "--limit", "0"], "must be at least 1"),
        (["--policy", "scripted", "--data", "/no/such/folder", "--out", "x"], "no such file or folder"),
        (["--policy", "scripted", "--data", ".", "--out", "x", "--option", "oops"], "expected key=value"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(arguments: list[str], message: str) -> None:
    result = runner.invoke(app, ["eval", *arguments])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_compare_needs_two_run_folders(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "compare", str(tmp_path), str(tmp_path)])
    assert result.exit_code == 2
    assert "no summary.json" in " ".join(result.output.split())


def test_installed_command_runs_as_a_subprocess(tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("spacetools")
    result = subprocess.run(
        [
            str(command),
            "eval",
            "--policy",
            "scripted",
            "--data",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "no such file or folder" in " ".join(result.stderr.split())
    help_text = subprocess.run([str(command), "eval", "--help"], capture_output=True, text=True, timeout=120)
    assert help_text.returncode == 0 and "compare" in help_text.stdout


def test_the_command_line_maps_onto_the_run_config_and_resume_names_what_changed(tmp_path: Path) -> None:
    sample = Sample(
        data_source="spatialsim_cvb2drelation",
        prompt=[{"role": "user", "content": "<image>\nWhich is left? (A) mug (B) box"}],
        images=[np.zeros((8, 8, 3), np.uint8)],
        ground_truth="(A)",
        extra_info={"index": 0, "question": "Which is left?", "choices": ["mug", "box"]},
    )
    write_parquet([sample], tmp_path / "data" / "spatialsim_cvb2drelation.parquet")
    out = tmp_path / "run"
    arguments = ["eval", "--policy", "scripted", "--data", str(tmp_path / "data"), "--out", str(out)]
    options = ["--profile", "exact", "--max-turns", "3", "--concurrency", "2", "--seed", "4"]
    result = runner.invoke(app, [*arguments, *options])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "run.json").read_text())
    assert (record["policy"], record["policy_options"]) == ("scripted", {"max_turns": 3})
    assert (record["tools"]["profile"], record["tools"]["seed"]) == ("exact", 4)
    assert (record["rollout"]["max_turns"], record["rollout"]["concurrency"]) == (3, 2)
    assert EvalConfig.model_validate(record).rollout.max_tool_response_chars == 2048  # run.json reads back

    again = runner.invoke(app, [*arguments, *options[:-1], "5"])
    assert again.exit_code == 2  # --out holds another run: a bad argument
    assert "other settings (tools.seed: 4 -> 5)" in " ".join(again.output.split())
