"""Progress on the long commands when piped (a line per 10% with rate and ETA), and `robot eval`
resuming like `eval`: episodes already written are not run again, other settings are refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.chat_server import ScriptedChatServer
from typer.testing import CliRunner

from spacetools.cli.main import app

runner = CliRunner()
PROGRESS_LINE = re.compile(
    r"^(\w+): (\d+)/(\d+) \((\d+)%\), [\d.–]+ (?:\w+/s|s/\w+), elapsed \d+:\d\d:\d\d, ETA (?:\d+:\d\d:\d\d|\?)$"
)


def _progress(output: str, name: str) -> list[tuple[int, int]]:
    found = [PROGRESS_LINE.match(line) for line in output.splitlines()]
    return [(int(m[2]), int(m[3])) for m in found if m and m[1] == name]


def test_data_generate_piped_prints_a_progress_line_per_step(tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("spacetools")
    arguments = [
        "data",
        "generate",
        "--out",
        str(tmp_path),
        "--n",
        "6",
        "--families",
        "detect2d,cvb2drelation",
    ]
    done = subprocess.run(
        [str(command), *arguments, "--workers", "1"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # Four scenes of three questions: a line as each one passes the next 10%, the last at 12/12.
    assert _progress(done.stdout, "questions") == [(3, 12), (6, 12), (9, 12), (12, 12)], done.stdout


def test_robot_eval_shows_progress_and_resumes_instead_of_starting_over(tmp_path: Path) -> None:
    out = tmp_path / "robot"

    def robot_eval(url: str, per_category: int, *extra: str) -> list[str]:
        return [
            "robot", "eval", "--policy", "openai", "--option", "model=m", "--option", f"base_url={url}",
            "--category", "pick", "--tasks-per-category", str(per_category), "--out", str(out), *extra,
        ]  # fmt: skip

    with ScriptedChatServer() as server:
        server.script.extend(["<answer>I will not move.</answer>"] * 5)
        first = runner.invoke(app, robot_eval(server.base_url, 2))
        assert first.exit_code == 0, first.output
        assert _progress(first.output, "episodes")[-1:] == [(2, 2)], first.output
        assert len(server.requests) == 2

        again = runner.invoke(app, robot_eval(server.base_url, 3))  # one more task per category
        assert again.exit_code == 0, again.output
        assert len(server.requests) == 3  # only the new task ran
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(row["id"] for row in rows) == ["pick-0-0", "pick-0-1", "pick-0-2"]
    assert json.loads((out / "summary.json").read_text())[0]["episodes"] == 3

    refused = runner.invoke(app, robot_eval(server.base_url, 3, "--seed", "1"))
    assert refused.exit_code == 2
    assert "holds a run with other settings (seed: 0 -> 1)" in " ".join(refused.output.split())

    with ScriptedChatServer() as server:
        server.script.append("<answer>I will not move.</answer>")
        afresh = runner.invoke(app, robot_eval(server.base_url, 1, "--seed", "1", "--no-resume"))
    assert afresh.exit_code == 0, afresh.output
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [row["id"] for row in rows] == ["pick-1-0"]
