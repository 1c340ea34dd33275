"""How sure a score is: bootstrap intervals in summary.json and the end-of-run table, and `eval compare`
pairing two runs per sample id (issue 22, item 3)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from rich.console import Console
from typer.testing import CliRunner

from spacetools.agent.types import Trajectory
from spacetools.bench import bootstrap
from spacetools.bench.compare import paired_differences
from spacetools.bench.summary import Summary, summarize, summary_table
from spacetools.cli.main import app
from spacetools.rewards import compute_score

YES_NO = "spatialsim_robospatial"
CHOICE = "spatialsim_cvb2drelation"


def scored_row(data_source: str, index: int, answer: str, truth: str) -> dict:
    """One samples.jsonl row, scored by the real scorer."""
    trajectory = Trajectory(
        task_id=f"{data_source}/{index}",
        data_source=data_source,
        messages=[{"role": "assistant", "content": f"<answer>{answer}</answer>"}],
        tool_calls=[],
        answer=answer,
        turns=1,
        score=None,
        parse_errors=0,
        stats={},
        wall_s=0.1,
    )
    return {
        "id": f"{data_source}/{index}",
        "data_source": data_source,
        "question": "Is it there?",
        "score": compute_score(data_source, f"<answer>{answer}</answer>", truth, {"choices": ["A", "B"]}),
        "trajectory": trajectory.to_dict(),
        "tool_images": [],
    }


def yes_no_rows(correct: list[bool], data_source: str = YES_NO) -> list[dict]:
    return [scored_row(data_source, i, "Yes" if ok else "No", "Yes") for i, ok in enumerate(correct)]


def write_run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    (folder / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    summarize(rows, policy="scripted", profile="exact", data="d").save(folder / "summary.json")
    return folder


def test_every_metric_has_a_seeded_interval_around_it_and_summary_json_keeps_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    rows = yes_no_rows(list(rng.random(40) < 0.6)) + [
        scored_row(CHOICE, i, "(A)", "(A)" if i % 4 else "(B)") for i in range(12)
    ]
    summary = summarize(rows, policy="p", profile="exact", data="d")
    for bench in summary.benchmarks.values():
        assert set(bench.intervals) == set(bench.metrics) - {"n"}
        for name, (low, high) in bench.intervals.items():
            assert low <= bench.metrics[name] <= high, name
    accuracy = summary.benchmarks[YES_NO]
    low, high = accuracy.intervals["overall"]
    # 40 yes/no samples at ~60%: the binomial standard error is ~7.7 points, the 95% interval ~±15.
    assert 20 < high - low < 40
    assert summary.interval_method["confidence"] == 0.95
    again = summarize(rows, policy="p", profile="exact", data="d")
    assert again.benchmarks[YES_NO].intervals == accuracy.intervals  # fixed seed
    # Episodes finish in any order: the rows of samples.jsonl in another order give the same intervals.
    shuffled = [rows[i] for i in np.random.default_rng(6).permutation(len(rows))]
    assert summarize(shuffled, policy="p", profile="exact", data="d").benchmarks[YES_NO].intervals == (
        accuracy.intervals
    )
    loaded = Summary.load(summary.save(tmp_path / "summary.json"))
    assert loaded.benchmarks[YES_NO].interval("overall") == (low, high)


def test_a_summary_written_before_intervals_still_loads(tmp_path: Path) -> None:
    data = summarize(yes_no_rows([True, False]), policy="p", profile="exact", data="d").to_dict()
    del data["interval_method"]
    for bench in data["benchmarks"].values():
        del bench["intervals"]
    (tmp_path / "summary.json").write_text(json.dumps(data))
    assert Summary.load(tmp_path).benchmarks[YES_NO].interval() is None


def test_the_end_of_run_table_shows_the_headline_interval() -> None:
    summary = summarize(yes_no_rows([True] * 15 + [False] * 5), policy="p", profile="exact", data="d")
    low, high = summary.benchmarks[YES_NO].intervals["headline"]
    console = Console(width=80, file=io.StringIO(), record=True)
    console.print(summary_table(summary))
    text = console.export_text()
    assert "95% CI" in text
    (line,) = [line for line in text.splitlines() if line.startswith(" robospatial")]
    assert line.split()[1:4] == ["20", "75.0", f"{low:.0f}–{high:.0f}"]


def test_bootstrap_helpers_bound_a_known_mean_and_a_difference() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(10.0, 2.0, size=400)
    low, high = bootstrap.statistic_intervals(values.size, lambda i: {"mean": values[i].mean()})["mean"]
    assert low < 10.0 < high and 0.2 < high - low < 0.6  # ±1.96·2/√400 ≈ ±0.2
    low, high = bootstrap.difference_of_means(values, values + 1.0)
    assert low < 1.0 < high and not bootstrap.crosses_zero((low, high))
    assert bootstrap.statistic_intervals(0, lambda i: {"mean": 0.0}) == {}


def test_compare_pairs_by_sample_id_and_says_not_significant_where_the_interval_holds_zero(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(3)
    truth = list(rng.random(60) < 0.5)
    base = yes_no_rows(truth) + [scored_row(CHOICE, i, "(A)", "(A)") for i in range(30)]
    # B fixes 12 of A's robospatial mistakes and changes nothing on cvb2drelation; its rows are written in
    # another order, so only pairing by id lines them up.
    fixed = [i for i, ok in enumerate(truth) if not ok][:12]
    better = yes_no_rows([ok or i in fixed for i, ok in enumerate(truth)])
    b_rows = list(reversed(better)) + [scored_row(CHOICE, i, "(A)", "(A)") for i in range(30)]
    run_a, run_b = write_run(tmp_path / "a", base), write_run(tmp_path / "b", b_rows)

    paired = paired_differences(base, b_rows)
    delta = paired[YES_NO].deltas["overall"]
    low, high = paired[YES_NO].intervals["overall"]
    assert delta == 20.0 and 0 < low <= delta <= high  # 12 of 60 samples gained, none lost
    # Unpaired, the two runs' own intervals overlap; paired, B − A is clearly above 0.
    _, a_high = Summary.load(run_a).benchmarks[YES_NO].intervals["overall"]
    b_low, _ = Summary.load(run_b).benchmarks[YES_NO].intervals["overall"]
    assert b_low < a_high

    result = CliRunner().invoke(
        app, ["eval", "compare", str(run_a), str(run_b / "summary.json")], terminal_width=100
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (overall,) = [line for line in lines if line.split()[:1] == ["overall"]]
    assert "+20.0" in overall and f"[{low:+.1f}, {high:+.1f}]" in overall and "not significant" not in overall
    (accuracy,) = [line for line in lines if line.split()[:1] == ["accuracy"]]
    assert "+0.0" in accuracy and "not significant" in accuracy  # identical answers: [0, 0] holds 0
    assert "60 paired" in result.output


def test_compare_without_samples_prints_the_summaries_difference(tmp_path: Path) -> None:
    run_a = write_run(tmp_path / "a", yes_no_rows([True, False]))
    run_b = write_run(tmp_path / "b", yes_no_rows([True, True]))
    (run_b / "samples.jsonl").unlink()
    result = CliRunner().invoke(app, ["eval", "compare", str(run_a), str(run_b)], terminal_width=100)
    assert result.exit_code == 0, result.output
    assert "+50.0" in result.output and "no paired interval" in result.output


def test_compare_of_unreadable_rows_is_one_error_line(tmp_path: Path) -> None:
    run_a = write_run(tmp_path / "a", yes_no_rows([True, False]))
    run_b = write_run(tmp_path / "b", yes_no_rows([True, True]))
    (run_b / "samples.jsonl").write_text(
        json.dumps({"id": f"{YES_NO}/0", "data_source": YES_NO, "score": {}}) + "\n"
    )
    result = CliRunner().invoke(app, ["eval", "compare", str(run_a), str(run_b)])
    assert result.exit_code == 2 and "cannot be scored" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
