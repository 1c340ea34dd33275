"""`spacetools eval` argument errors, and the installed command as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
