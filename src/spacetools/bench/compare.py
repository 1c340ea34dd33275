"""Two runs side by side (``spacetools eval compare A B``): every metric with B − A and its paired
bootstrap interval.

The runs are paired per sample id: B − A is each benchmark's aggregator on B's rows minus the same on
A's rows, over the samples both runs scored, and its interval resamples those samples (the same draw
for both runs), which is far tighter than two independent intervals because a hard question is hard
for both. A difference whose interval holds 0 is marked "not significant".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from spacetools.bench import bootstrap
from spacetools.bench.runfolder import SAMPLES_FILE, read_rows
from spacetools.bench.summary import Summary, short_name
from spacetools.rewards import aggregate

#: Figures that are counts, not scores: shown, never differenced by the bootstrap.
_UNPAIRED = ("n", "headline")


@dataclass
class PairedBenchmark:
    """B − A of each metric of one benchmark over the samples both runs scored, with its interval."""

    key: str
    paired: int
    deltas: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, bootstrap.Interval] = field(default_factory=dict)


def run_rows(path: Path) -> list[dict[str, Any]] | None:
    """The rows of the run whose folder (or ``summary.json``) is ``path``; None without ``samples.jsonl``."""
    folder = path if path.is_dir() else path.parent
    samples = folder / SAMPLES_FILE
    return read_rows(samples) if samples.is_file() else None


def scores_by_benchmark(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """Score dicts by benchmark and sample id (a later row of an id replaces an earlier one)."""
    grouped: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(str(row["data_source"]), {})[str(row["id"])] = row["score"]
    return grouped


def paired_differences(
    rows_a: Sequence[Mapping[str, Any]],
    rows_b: Sequence[Mapping[str, Any]],
    *,
    resamples: int = bootstrap.RESAMPLES,
    seed: int = bootstrap.SEED,
) -> dict[str, PairedBenchmark]:
    """Per benchmark both runs have, B − A of every metric over the common sample ids, with its paired
    bootstrap interval (no common ids: no deltas)."""
    scores_a, scores_b = scores_by_benchmark(rows_a), scores_by_benchmark(rows_b)
    paired: dict[str, PairedBenchmark] = {}
    for key in scores_a.keys() & scores_b.keys():
        ids = [sample_id for sample_id in scores_a[key] if sample_id in scores_b[key]]
        left = [scores_a[key][sample_id] for sample_id in ids]
        right = [scores_b[key][sample_id] for sample_id in ids]
        paired[key] = _paired_benchmark(key, left, right, resamples=resamples, seed=seed)
    return paired


def _paired_benchmark(
    key: str,
    left: Sequence[Mapping[str, Any]],
    right: Sequence[Mapping[str, Any]],
    *,
    resamples: int,
    seed: int,
) -> PairedBenchmark:
    """B − A of one benchmark's metrics, ``left[i]`` and ``right[i]`` being the same sample."""

    def difference(indices: Iterable[int]) -> dict[str, float]:
        figures_a = aggregate(key, [left[i] for i in indices])
        figures_b = aggregate(key, [right[i] for i in indices])
        return {
            name: figures_b[name] - figures_a[name]
            for name in figures_a
            if name in figures_b and name not in _UNPAIRED
        }

    result = PairedBenchmark(key, len(left))
    if left:
        result.deltas = difference(range(len(left)))
        result.intervals = bootstrap.statistic_intervals(
            len(left), difference, resamples=resamples, seed=seed
        )
    return result


def compare_table(
    a: Summary,
    b: Summary,
    paired: Mapping[str, PairedBenchmark] | None = None,
    *,
    label_a: str = "A",
    label_b: str = "B",
) -> Table:
    """Every metric of every benchmark either run has, with B − A; with ``paired`` (from
    :func:`paired_differences`) B − A is over the samples both runs scored and has its interval."""
    caption = (
        "B − A over the samples both runs scored; 95% CI: paired bootstrap interval over those samples"
        if paired is not None
        else "B − A of the two summaries (no samples.jsonl beside a run: no paired interval)"
    )
    table = Table(
        title=f"{label_a} ({a.policy}, {a.profile})  vs  {label_b} ({b.policy}, {b.profile})",
        caption=caption,
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        show_edge=False,
        pad_edge=False,
    )
    for column in ("benchmark", "metric", label_a, label_b, "delta", "95% CI", ""):
        table.add_column(
            column, justify="left" if column in ("benchmark", "metric", "") else "right", no_wrap=True
        )
    for key in dict.fromkeys([*a.benchmarks, *b.benchmarks]):
        left, right = a.benchmarks.get(key), b.benchmarks.get(key)
        pair = (paired or {}).get(key)
        names = dict.fromkeys([*(left.metrics if left else {}), *(right.metrics if right else {})])
        table.add_row(
            short_name(key),
            "n",
            _cell(left.n if left else None),
            _cell(right.n if right else None),
            "",
            f"{pair.paired} paired" if pair is not None else "",
            "",
        )
        for name in names:
            if name in _UNPAIRED:
                continue
            x = left.metrics.get(name) if left else None
            y = right.metrics.get(name) if right else None
            table.add_row("", name, _cell(x), _cell(y), *_difference(name, x, y, pair))
        counts: tuple[tuple[str, float | None, float | None], ...] = (
            ("calls/ep", left.tool_calls_mean if left else None, right.tool_calls_mean if right else None),
            ("fails", left.tool_failures if left else None, right.tool_failures if right else None),
        )
        for name, x, y in counts:
            table.add_row(
                "", name, _cell(x), _cell(y), "" if x is None or y is None else _signed(y - x), "", ""
            )
        table.add_section()
    return table


def _difference(
    name: str, x: float | None, y: float | None, pair: PairedBenchmark | None
) -> tuple[str, str, str]:
    """The delta, interval and verdict cells of one metric."""
    if pair is None or name not in pair.deltas:
        return ("" if x is None or y is None else _signed(y - x)), "", ""
    interval = pair.intervals[name]
    verdict = "[dim]not significant[/dim]" if bootstrap.crosses_zero(interval) else ""
    return _signed(pair.deltas[name]), f"[{interval[0]:+.1f}, {interval[1]:+.1f}]", verdict


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.1f}"


def _signed(value: float) -> str:
    if isinstance(value, int):
        return f"{value:+d}"
    style = "green" if value > 1e-9 else "red" if value < -1e-9 else "dim"
    return f"[{style}]{value:+.1f}[/{style}]"
