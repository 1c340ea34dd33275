"""`--log-level` and the run folder's `run.log`: diagnostics go through logging, on stderr and into the run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacetools.bench.dataset import Sample, write_parquet
from spacetools.bench.runlog import LOG_FILE
from spacetools.cli.main import app

runner = CliRunner()
EPISODE_LINE = "spatialsim_cvb2drelation/0: score"  # the debug line of a finished episode
START_LINE = "evaluating scripted on 1 samples"  # the info line a run starts with


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    sample = Sample(
        data_source="spatialsim_cvb2drelation",
        prompt=[{"role": "user", "content": "<image>\nWhich is left? (A) mug (B) box"}],
        images=[np.zeros((8, 8, 3), np.uint8)],
        ground_truth="(A)",
        extra_info={"index": 0, "question": "Which is left?", "choices": ["mug", "box"]},
    )
    write_parquet([sample], folder / "spatialsim_cvb2drelation.parquet")
    return folder


def _eval(data: Path, out: Path, *level: str) -> tuple[str, str]:
    arguments = ["eval", "--policy", "scripted", "--data", str(data), "--out", str(out), "--profile", "exact"]
    result = runner.invoke(app, [*level, *arguments, "--max-turns", "2"])
    assert result.exit_code == 0, result.output
    return " ".join(result.stderr.split()), (out / LOG_FILE).read_text(encoding="utf-8")


def test_debug_shows_each_episode_on_stderr_and_in_the_run_log(data: Path, tmp_path: Path) -> None:
    stderr, log = _eval(data, tmp_path / "run", "--log-level", "debug")
    assert START_LINE in stderr and EPISODE_LINE in stderr and "DEBUG" in stderr
    assert START_LINE in log and EPISODE_LINE in log
    assert any(line.split()[2:4] == ["DEBUG", "spacetools.bench.evaluate:"] for line in log.splitlines())


def test_warning_quiets_the_terminal_but_the_run_log_keeps_info(data: Path, tmp_path: Path) -> None:
    stderr, log = _eval(data, tmp_path / "run", "--log-level", "warning")
    assert START_LINE not in stderr and EPISODE_LINE not in stderr
    assert START_LINE in log and EPISODE_LINE not in log
    # A resumed run appends to its log: both runs' starts are there.
    _, log = _eval(data, tmp_path / "run")
    assert log.count("evaluating scripted on 1 samples") == 2 and "(1 done before)" in log


def test_an_unknown_level_is_one_error_line() -> None:
    result = runner.invoke(app, ["--log-level", "loud", "tools", "list"])
    assert result.exit_code == 2
    assert result.output.startswith("Error:") and "loud" in result.output
    assert len(result.output.strip().splitlines()) == 1
