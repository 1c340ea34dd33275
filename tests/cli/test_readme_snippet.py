"""The README's Python evaluation snippet, pasted into a file as it is (no `if __name__ == "__main__":`
guard), runs as a script: worker processes do not run it again, and a second run resumes the first."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from spacetools.cli.main import app

README = Path(__file__).parents[2] / "README.md"


def _evaluation_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    (snippet,) = [block for block in blocks if "evaluate(" in block]
    return snippet


def test_the_readme_snippet_runs_as_a_script_twice(tmp_path: Path) -> None:
    snippet = _evaluation_snippet()
    assert "__main__" not in snippet  # the snippet as a newcomer pastes it
    data = re.search(r'data="([^"]+)"', snippet)
    out = re.search(r'out="([^"]+)"', snippet)
    assert data and out, snippet
    generated = CliRunner().invoke(
        app,
        ["data", "generate", "--out", str(tmp_path / data[1]), "--n", "1", "--families", "cvb2drelation",
         "--workers", "1"],
    )  # fmt: skip
    assert generated.exit_code == 0, generated.output
    script = tmp_path / "evaluate_scripted.py"
    script.write_text(snippet, encoding="utf-8")

    for run in ("first", "resumed"):
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{run} run: {done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    summary = json.loads((tmp_path / out[1] / "summary.json").read_text())
    assert summary["n"] == 1 and summary["policy"] == "scripted"
