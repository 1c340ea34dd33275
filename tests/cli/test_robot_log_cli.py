"""`spacetools robot eval` keeps the run's log in its run folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.bench.runlog import LOG_FILE
from spacetools.cli.main import app


@pytest.mark.slow
def test_robot_eval_writes_run_log_with_each_episode_at_debug(tmp_path: Path) -> None:
    out = tmp_path / "robot"
    command = [
        "--log-level",
        "debug",
        "robot",
        "eval",
        "--policy",
        "scripted",
        "--category",
        "pick",
        "--profile",
        "exact",
    ]
    result = CliRunner().invoke(app, [*command, "--tasks-per-category", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    log = (out / LOG_FILE).read_text()
    assert "robot evaluation of robot_scripted: 1 tasks" in log
    assert "pick-0-0: 1/1 points" in log  # the episode's debug line
    assert "1 episodes, 1 of 1 points" in log
