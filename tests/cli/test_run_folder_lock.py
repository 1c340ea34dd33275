"""One writer per run folder, through the CLI with real processes.

A real process holds a run folder's lock the way a running evaluation does; `spacetools eval`, `robot eval`
and the training stages started into that folder are refused in one line naming the holder's pid, and once
the holder is killed with -9 its lock is taken over. A folder that two runs once wrote into (before the
lock) is summarised one row per sample.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.bench.runfolder import SAMPLES_FILE, read_rows
from spacetools.bench.runlock import LOCK_FILE
from spacetools.bench.spatialsim import generator
from spacetools.bench.summary import Summary
from spacetools.cli.main import app

BENCH = "spatialsim_cvb2drelation"
HOLD = """
import sys
from spacetools.bench.runlock import run_folder_lock
with run_folder_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def spacetools(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "spacetools.cli.main", *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spatialsim")
    generator.export(folder, n=2, seed=11, families=["cvb2drelation"])
    return folder


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live process holding the lock of `tmp_path / "run"`."""
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    yield process, out
    process.kill()
    process.wait(timeout=30)


def _refused(result: subprocess.CompletedProcess[str], pid: int) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.stderr
    assert f"in use by another run (pid {pid})" in lines[0]


def _eval(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return spacetools("eval", "--policy", "scripted", "--data", data, "--bench", BENCH, "--out", out, *extra)


def test_a_second_eval_is_refused_and_a_dead_holders_lock_is_taken_over(
    data: Path, holder: tuple[subprocess.Popen[str], Path]
) -> None:
    process, out = holder
    _refused(_eval(data, out), process.pid)
    assert not (out / SAMPLES_FILE).exists()
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert (out / LOCK_FILE).read_text().strip() == str(process.pid)  # the dead holder's pid stays
    result = _eval(data, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(read_rows(out / SAMPLES_FILE)) == 2
    assert (out / LOCK_FILE).read_text().strip() != str(process.pid)


def test_robot_eval_and_training_stages_are_refused_too(
    holder: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    process, out = holder
    model, traces, config = tmp_path / "model", tmp_path / "traces.jsonl", tmp_path / "dirl.yaml"
    model.mkdir()
    (model / "config.json").write_text("{}")  # passes the start-up check, so the lock is what refuses
    traces.write_text("")
    config.write_text("turn_check: false\n")  # a default config: its families need the turn check off
    commands = [
        ["robot", "eval", "--policy", "scripted", "--tasks-per-category", "1", "--out", out],
        ["train", "sft", "--model", model, "--data", traces, "--out", out],
        ["train", "dirl", "--config", config, "--out", out],
    ]
    started = [  # at once: most of each command's time is its start-up
        subprocess.Popen(
            [sys.executable, "-m", "spacetools.cli.main", *map(str, command)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    for command, running in zip(commands, started, strict=True):
        stdout, stderr = running.communicate(timeout=300)
        _refused(subprocess.CompletedProcess(command, running.returncode, stdout, stderr), process.pid)
    assert sorted(path.name for path in out.iterdir()) == [LOCK_FILE]  # nothing written by the refused runs


def test_a_folder_two_runs_wrote_into_is_summarised_once_per_sample(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = ["eval", "--policy", "scripted", "--data", str(data), "--bench", BENCH, "--out", str(out)]
    assert CliRunner().invoke(app, command).exit_code == 0
    samples = out / SAMPLES_FILE
    rows = samples.read_text().splitlines()
    samples.write_text("\n".join(rows + rows) + "\n")  # what two concurrent runs used to leave
    assert CliRunner().invoke(app, command).exit_code == 0
    summary = Summary.load(out)
    assert summary.n == 2 and summary.benchmarks[BENCH].n == 2
