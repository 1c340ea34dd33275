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


def test_the_readme_calls_json_runs_on_its_scene(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    (block,) = re.findall(r"```json\n(.*?)```", text[text.index("`calls.json` lists") :], re.DOTALL)[:1]
    calls = tmp_path / "calls.json"
    calls.write_text(block, encoding="utf-8")
    command = Path(sys.executable).with_name("spacetools")
    arguments = ["tools", "run", "--scene", "3", "--calls", str(calls), "--profile", "exact"]
    done = subprocess.run([str(command), *arguments], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert [r["is_error"] for r in results] == [False] * len(json.loads(block))
    assert results[0]["text"].startswith("Detected 1 instance(s) of 'yellow mug'")
    assert results[-1]["text"].startswith("Pixel value at (0.500, 0.500) is 0.794")
