"""`spacetools export verl` warns when no Toolshed answers at `--url`, and stays quiet when one does."""

from __future__ import annotations

from pathlib import Path

from tests.chat_server import ScriptedChatServer
from tests.toolshed.serving import serving
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.toolshed.http import toolshed_for
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.toolsets import get_toolset

runner = CliRunner()


def test_export_warns_when_the_toolshed_does_not_answer(tmp_path: Path) -> None:
    port = ScriptedChatServer().port  # a free port nothing listens on
    url = f"http://127.0.0.1:{port}"
    result = runner.invoke(app, ["export", "verl", "--url", url, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output  # the files are still written, for a server started later
    assert (tmp_path / "overrides.txt").is_file()
    warning = " ".join(result.stderr.split())
    assert warning.startswith(f"Warning: no Toolshed answers at {url}") and "spacetools serve" in warning


def test_export_is_quiet_when_the_toolshed_answers(tmp_path: Path) -> None:
    with serving(toolshed_for(get_toolset("v1"), ServerLimits())) as url:
        result = runner.invoke(app, ["export", "verl", "--url", url, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr
