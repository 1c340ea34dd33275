"""Ctrl-C during `eval --policy hf`: generation stops at the next token, the command says how to resume and
exits 130, and the same command then finishes the run without running a finished sample again."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spacetools.bench.evaluate import SAMPLES_FILE
from spacetools.bench.runfolder import read_rows
from tiny_qwen import build_tiny_qwen25_vl

from .eval_run import read_run, run_eval

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.slow
def test_ctrl_c_stops_between_generate_calls_and_the_run_resumes(
    spatialsim_data: Path, tmp_path: Path
) -> None:
    model = tmp_path / "tiny-qwen2.5-vl"
    build_tiny_qwen25_vl(model)
    out = tmp_path / "run"
    arguments = [
        "--policy", "hf", "--option", f"model_path={model}", "--option", "max_new_tokens=150",
        "--data", str(spatialsim_data), "--out", str(out), "--profile", "exact",
        "--max-turns", "1", "--concurrency", "1",
    ]  # fmt: skip
    command = [str(Path(sys.executable).with_name("spacetools")), "eval", *arguments]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = out / SAMPLES_FILE
    deadline = time.monotonic() + 600  # a bound on the wait, not a measurement
    while not (samples.is_file() and samples.read_text().strip()) and process.poll() is None:
        assert time.monotonic() < deadline, "no sample was written"
        time.sleep(0.2)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)  # mid-way through the next sample's generation
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "rerun the same command to resume" in stderr
    finished = {row["id"] for row in read_rows(samples)}
    assert finished

    run_eval(arguments)
    rows, summary = read_run(out)
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)) == summary["n"]
    assert finished <= set(ids)
