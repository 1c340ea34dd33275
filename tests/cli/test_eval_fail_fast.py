"""`spacetools eval` with a model that cannot be reached stops with one `Error:` line and exit 1, keeps
the failed samples for the next run, and the terminal table counts the policy errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.chat_server import ScriptedChatServer
from typer.testing import CliRunner

from spacetools.bench.dataset import Sample, write_parquet
from spacetools.cli.main import app

runner = CliRunner()
SAMPLES = 5


@pytest.fixture
def data(tmp_path: Path) -> Path:
    samples = [
        Sample(
            data_source="spatialsim_cvb2drelation",
            prompt=[{"role": "user", "content": "<image>\nWhich is left? (A) mug (B) box"}],
            images=[np.zeros((8, 8, 3), np.uint8)],
            ground_truth="(A)",
            extra_info={"index": index, "question": "Which is left?", "choices": ["mug", "box"]},
        )
        for index in range(SAMPLES)
    ]
    write_parquet(samples, tmp_path / "data" / "spatialsim_cvb2drelation.parquet")
    return tmp_path / "data"


def _eval(data: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return [
        "eval", "--policy", "openai", "--option", "model=m", "--option", f"base_url={base_url}",
        "--option", "max_retries=0", "--data", str(data), "--out", str(out), "--concurrency", "1",
        "--profile", "exact", *extra,
    ]  # fmt: skip


def test_an_unreachable_model_stops_the_run_and_a_rerun_resumes(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    server = ScriptedChatServer()  # its port is chosen, nothing listens on it until it starts
    result = runner.invoke(app, _eval(data, out, server.base_url, "--max-policy-errors", "2"))
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: 2 episodes in a row ended with a policy error")
    assert "Connection" in lines[0]
    samples = out / "samples.jsonl"
    assert not samples.exists() or samples.read_text() == ""  # nothing recorded for the failed samples

    with server:  # the model comes up: the same command resumes and runs every sample
        server.script.extend(["<answer>(A)</answer>"] * SAMPLES)
        again = runner.invoke(app, _eval(data, out, server.base_url))
    assert again.exit_code == 0, again.output
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == SAMPLES and all(row["score"]["score"] == 1.0 for row in rows)


def test_scattered_policy_errors_are_recorded_and_counted_in_the_table(data: Path, tmp_path: Path) -> None:
    with ScriptedChatServer() as server:
        # 400 is not retried: each is one failed episode, never two in a row.
        server.script.extend(
            [400, "<answer>(A)</answer>", 400, "<answer>(A)</answer>", "<answer>(B)</answer>"]
        )
        result = runner.invoke(
            app, [*_eval(data, tmp_path / "run", server.base_url), "--max-policy-errors", "2"]
        )
    assert result.exit_code == 0, result.output
    assert "p.err" in result.output
    header = next(line for line in result.output.splitlines() if "p.err" in line and "benchmark" in line)
    row = next(line for line in result.output.splitlines() if line.strip().startswith("cvb2drelation"))
    end = header.index("p.err") + len("p.err")  # a right-aligned column: its figures end where it does
    assert row[:end].split()[-1] == "2"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["benchmarks"]["spatialsim_cvb2drelation"]["finish_reasons"]["policy_error"] == 2
