"""Run `spacetools eval` through the real typer app and read back its run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from spacetools.bench.evaluate import REPORT_FILE, SAMPLES_FILE, SUMMARY_FILE, read_rows
from spacetools.cli.main import app


def run_eval(arguments: list[str]) -> None:
    """`spacetools eval …` in-process; fails the test with the command's output when it exits non-zero."""
    result = CliRunner().invoke(app, ["eval", *arguments])
    assert result.exit_code == 0, (
        f"spacetools eval exited {result.exit_code}:\n{result.output}\n{result.exception!r}"
    )


def read_run(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and the summary of a finished run folder, after checking its report was written."""
    report = out / REPORT_FILE
    assert report.is_file() and report.stat().st_size > 0, f"no report at {report}"
    return read_rows(out / SAMPLES_FILE), json.loads((out / SUMMARY_FILE).read_text())
