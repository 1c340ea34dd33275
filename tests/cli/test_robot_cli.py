"""`spacetools robot` argument errors (the evaluation itself runs in tests/bench/test_robot_bench.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.tools.robot.http_client import TOKEN_ENV as ROBOT_TOKEN_ENV

runner = CliRunner()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["eval", "--policy", "oracle"], "unknown policy 'oracle'"),
        (["eval", "--policy", "scripted", "--category", "juggle"], "unknown category 'juggle'"),
        (["eval", "--policy", "scripted", "--profile", "perfect"], "unknown profile"),
        (["eval", "--policy", "scripted", "--tasks-per-category", "0"], "--tasks-per-category"),
        (["eval", "--policy", "replay", "--option", "oops"], "expected key=value"),
        (["serve", "--category", "juggle"], "unknown category 'juggle'"),
        (["serve", "--host", "0.0.0.0"], "lets anyone on the network move the robot"),
        (["serve", "--token", "short"], "at least 16 characters"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    arguments: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ROBOT_TOKEN_ENV, raising=False)
    result = runner.invoke(app, ["robot", *arguments])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
