"""Every bad command-line input: one clear line naming what is wrong, exit status 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacetools.bench.dataset import Sample, write_parquet
from spacetools.bench.evaluate import EvalConfig
from spacetools.cli.main import app
from spacetools.toolshed import ToolsConfig

runner = CliRunner()
BENCH = "spatialsim_cvb2drelation"


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with one real benchmark file, a plain file, a non-UTF-8 file and a non-parquet file."""
    root = tmp_path_factory.mktemp("inputs")
    sample = Sample(
        data_source=BENCH,
        prompt=[{"role": "user", "content": "<image>\nWhich is left? (A) mug (B) box"}],
        images=[np.zeros((8, 8, 3), np.uint8)],
        ground_truth="(A)",
        extra_info={"index": 0, "question": "Which is left?"},
    )
    write_parquet([sample], root / "data" / f"{BENCH}.parquet")
    (root / "file.txt").write_text("a file\n")
    (root / "latin1.txt").write_bytes(b"caf\xe9 {tools}\n")
    (root / "fake.parquet").write_text("not a table\n")
    (root / "other_run").mkdir()
    # The run.json of this folder's eval with exact tools (the scripted policy gets the turn limit).
    other = EvalConfig(
        data=root / "data",
        out=root / "other_run",
        policy="scripted",
        policy_options={"max_turns": 8},
        tools=ToolsConfig(profile="exact"),
    )
    (root / "other_run" / "run.json").write_text(json.dumps(other.run_record()))
    (root / "other_run" / "run.lock").write_text("")  # the first file a run writes: the folder is a run's
    return root


def eval_args(place: Path, *extra: str, out: str = "run") -> list[str]:
    return ["eval", "--policy", "scripted", "--data", str(place / "data"), "--out", str(place / out), *extra]


Case = Callable[[Path], list[str]]

CASES: list[tuple[str, Case, str]] = [
    ("out-is-a-file", lambda p: eval_args(p, out="file.txt"), "is a file, not a folder"),
    ("out-under-a-file", lambda p: eval_args(p, out="file.txt/run"), "which is a file, not a folder"),
    ("demo-out-under-a-file", lambda p: ["demo", "--out", str(p / "file.txt" / "d")], "which is a file"),
    ("missing-data", lambda p: [*eval_args(p)[:3], "--data", str(p / "nope"), "--out", "x"], "no such file"),
    ("unknown-bench", lambda p: eval_args(p, "--bench", "spatialsim_nope"), "no parquet for keys"),
    ("bad-option", lambda p: eval_args(p, "--option", "oops"), "expected key=value"),
    (
        "unknown-option",
        lambda p: eval_args(p, "--option", "colour=1"),
        "has no option 'colour'; its options: max_turns",
    ),
    (
        "unknown-policy",
        lambda p: [*eval_args(p)[:1], "--policy", "oracle", *eval_args(p)[3:]],
        "unknown policy",
    ),
    (
        "missing-replay-file",
        lambda p: [
            *eval_args(p, "--option", f"trajectories={p / 'none.jsonl'}")[:1],
            "--policy",
            "replay",
            *eval_args(p, "--option", f"trajectories={p / 'none.jsonl'}")[3:],
        ],
        "No such file",
    ),
    (
        "openai-without-model",
        lambda p: [*eval_args(p)[:1], "--policy", "openai", *eval_args(p)[3:]],
        "missing 1 required positional argument: 'model'",
    ),
    (
        "seed-negative",
        lambda p: eval_args(p, "--seed", "-1"),
        "--seed': Input should be greater than or equal to 0",
    ),
    (
        "demo-seed-negative",
        lambda p: ["demo", "--seed", "-1"],
        "--seed': Input should be greater than or equal to 0",
    ),
    (
        "generate-seed-negative",
        lambda p: ["data", "generate", "--out", "x", "--n", "1", "--seed", "-1"],
        "greater than or equal to 0",
    ),
    (
        "tools-seed-negative",
        lambda p: ["tools", "run", "--scene", "1", "--calls", "c", "--seed", "-1"],
        "greater than or equal to 0",
    ),
    ("limit-zero", lambda p: eval_args(p, "--limit", "0"), "must be at least 1, got 0"),
    ("concurrency-zero", lambda p: eval_args(p, "--concurrency", "0"), "must be at least 1, got 0"),
    ("max-turns-not-a-number", lambda p: eval_args(p, "--max-turns", "many"), "valid integer"),
    ("unknown-profile", lambda p: eval_args(p, "--profile", "perfect"), "unknown profile"),
    (
        "prompt-not-utf8",
        lambda p: eval_args(p, "--system-prompt", str(p / "latin1.txt")),
        "is not UTF-8 text",
    ),
    ("prompt-missing", lambda p: eval_args(p, "--system-prompt", str(p / "none.txt")), "does not exist"),
    ("prompt-is-a-folder", lambda p: eval_args(p, "--system-prompt", str(p)), "is a directory"),
    ("url-not-http", lambda p: eval_args(p, "--toolshed-url", "127.0.0.1:8100"), "expected an http(s) URL"),
    (
        "show-not-parquet",
        lambda p: ["data", "show", str(p / "fake.parquet"), "--index", "0"],
        "not a readable",
    ),
    (
        "show-out-under-a-file",
        lambda p: ["data", "show", str(p / "data"), "--index", "0", "--out", str(p / "file.txt" / "x.png")],
        "cannot write",
    ),
    ("calls-not-utf8", lambda p: ["tools", "run", "--scene", "1", "--calls", str(p / "latin1.txt")], "UTF-8"),
    (
        "calls-missing",
        lambda p: ["tools", "run", "--scene", "1", "--calls", str(p / "none.json")],
        "no such file",
    ),
    (
        "mix-unknown-thoughts",
        lambda p: ["train", "mix", "--source", f"{p / 'file.txt'}=1", "--out", "x", "--thoughts", "some"],
        "'some' is not one of 'full', 'empty'",
    ),
    ("unknown-command", lambda p: ["evaluate"], "No such command 'evaluate'"),
    (
        "robot-out-is-a-file",
        lambda p: ["robot", "eval", "--policy", "scripted", "--out", str(p / "file.txt")],
        "is a file, not a folder",
    ),
    (
        "resume-other-settings",
        lambda p: eval_args(p, "--profile", "harsh", out="other_run"),
        "holds a run with other settings (tools.profile: 'exact' -> 'harsh')",
    ),
    (
        "option-not-finite",
        lambda p: eval_args(p, "--option", "temperature=1e999"),
        "1e999 is not a finite number",
    ),
    ("generate-into-a-full-folder", lambda p: ["data", "generate", "--out", str(p), "--n", "1"], "not empty"),
    (
        "serve-empty-call-body-limit",
        lambda p: ["serve", "--max-call-body-bytes", "0"],
        "--max-call-body-bytes",
    ),
]


@pytest.mark.parametrize(
    ("case", "message"), [(build, message) for _, build, message in CASES], ids=[name for name, _, _ in CASES]
)
def test_a_bad_input_is_one_clear_line_and_exit_2(place: Path, case: Case, message: str) -> None:
    result = runner.invoke(app, case(place))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "╭" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert message in lines[0]


def test_the_installed_command_prints_one_line_on_stderr(place: Path) -> None:
    command = Path(sys.executable).with_name("spacetools")
    arguments = ["tools", "run", "--scene", "1", "--calls", str(place / "latin1.txt")]
    result = subprocess.run([str(command), *arguments], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "is not UTF-8 text" in result.stderr
