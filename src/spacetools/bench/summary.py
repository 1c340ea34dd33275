"""Per-benchmark summaries of an evaluation run: aggregation of scored rows, JSON, rich tables.

A row is one line of ``samples.jsonl``: ``id``, ``data_source``, ``score`` (the dict of
``spacetools.rewards.compute_score``) and ``trajectory`` (``Trajectory.to_dict()``). The metrics are
the paper's, from ``spacetools.rewards.aggregate`` (the benchmark registry's aggregators); the rest (tool calls by tool, failures, turns,
wall time) comes from the trajectories. Every metric carries a 95% bootstrap interval over the
benchmark's samples: the samples are resampled and the benchmark's own aggregator recomputed
(:mod:`spacetools.bench.bootstrap`, fixed seed, so a summary is the same on every run).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from spacetools.bench import bootstrap
from spacetools.bench.runfolder import unique_rows
from spacetools.rewards import BENCHMARKS, aggregate
from spacetools.rewards.benchmarks import headline_value, passed


@dataclass
class BenchmarkSummary:
    """One benchmark (data source) of a run."""

    key: str
    n: int
    metrics: dict[str, float]
    tool_calls_per_episode: dict[str, float]
    tool_calls_mean: float
    tool_failures: int
    tool_failure_rate: float
    turns_mean: float
    parse_errors: int
    policy_errors: int
    finish_reasons: dict[str, int]
    wall_s_total: float
    wall_s_mean: float
    invalid_turns: int = 0  # turns that did not parse as tool calls or an answer
    passed: int = 0  # samples whose headline figure reaches the pass mark (the report's "pass")
    #: ``[low, high]`` of each metric (``n`` has none); empty in a summary written before intervals.
    intervals: dict[str, list[float]] = field(default_factory=dict)

    def interval(self, metric: str = "headline") -> tuple[float, float] | None:
        """The bootstrap interval of ``metric``, or None when the summary has none."""
        bounds = self.intervals.get(metric)
        return (bounds[0], bounds[1]) if bounds else None


@dataclass
class Summary:
    """A whole run: what was evaluated how, and one :class:`BenchmarkSummary` per benchmark."""

    policy: str
    profile: str
    data: str
    n: int
    benchmarks: dict[str, BenchmarkSummary] = field(default_factory=dict)
    run_wall_s: float = 0.0
    #: How the intervals were drawn: the unit resampled, confidence, resamples and seed.
    interval_method: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible dict (the layout of ``summary.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        """Rebuild a summary written by :meth:`to_dict`."""
        try:
            benchmarks = {key: BenchmarkSummary(**value) for key, value in data["benchmarks"].items()}
            return cls(**{**data, "benchmarks": benchmarks})
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a spacetools summary: {error}") from error

    def save(self, path: str | Path) -> Path:
        """Write ``summary.json``."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Summary:
        """Read a ``summary.json`` (or the ``summary.json`` inside a run folder)."""
        path = Path(path)
        if path.is_dir():
            path = path / "summary.json"
        if not path.is_file():
            raise FileNotFoundError(f"no summary.json at {path}")
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def metric_intervals(
    key: str, scores: Sequence[dict[str, Any]], *, resamples: int = bootstrap.RESAMPLES
) -> dict[str, list[float]]:
    """``[low, high]`` of each of the benchmark's metrics (``n`` aside): the samples resampled and the
    benchmark's aggregator recomputed on each resample."""
    intervals = bootstrap.statistic_intervals(
        len(scores), lambda indices: aggregate(key, [scores[i] for i in indices]), resamples=resamples
    )
    intervals.update(_proportion_intervals(key, scores))
    return {name: [low, high] for name, (low, high) in intervals.items() if name != "n"}


def _proportion_intervals(key: str, scores: Sequence[dict[str, Any]]) -> dict[str, bootstrap.Interval]:
    """Wilson intervals (×100) for the figures that are the share of samples right, where the
    benchmark's per-sample headline figure is 0 or 1 (accuracy: not the IoU or MACE means)."""
    if key not in BENCHMARKS or not scores:
        return {}
    values = [headline_value(key, score)[1] for score in scores]
    if any(value not in (0.0, 1.0) for value in values):
        return {}
    right = int(sum(values))
    share = 100.0 * right / len(values)
    low, high = bootstrap.wilson_interval(right, len(values))
    return {
        name: (100.0 * low, 100.0 * high)
        for name, value in aggregate(key, scores).items()
        if name not in ("n", "parse_rate") and abs(value - share) < 1e-9
    }


def summarize_benchmark(
    key: str, rows: Sequence[dict[str, Any]], *, resamples: int = bootstrap.RESAMPLES
) -> BenchmarkSummary:
    """Aggregate the rows of one benchmark (taken in sample id order, so that the bootstrap intervals do
    not depend on the order in which the episodes finished)."""
    rows = sorted(rows, key=lambda row: str(row.get("id", "")))
    trajectories = [row["trajectory"] for row in rows]
    scores = [row["score"] for row in rows]
    n = len(rows)
    by_tool: Counter[str] = Counter()
    failures = 0
    for trajectory in trajectories:
        for call in trajectory["tool_calls"]:
            by_tool[call["name"]] += 1
            failures += bool(call["is_error"])
    total_calls = sum(by_tool.values())
    walls = [float(t["wall_s"]) for t in trajectories]
    return BenchmarkSummary(
        key=key,
        n=n,
        metrics={name: float(value) for name, value in aggregate(key, scores).items()},
        tool_calls_per_episode={tool: count / n for tool, count in sorted(by_tool.items())},
        tool_calls_mean=total_calls / n if n else 0.0,
        tool_failures=failures,
        tool_failure_rate=failures / total_calls if total_calls else 0.0,
        turns_mean=_mean([float(t["turns"]) for t in trajectories]),
        parse_errors=sum(int(t["parse_errors"]) for t in trajectories),
        policy_errors=sum(t.get("error") is not None for t in trajectories),
        finish_reasons=dict(sorted(Counter(t.get("finish_reason", "answer") for t in trajectories).items())),
        wall_s_total=float(sum(walls)),
        wall_s_mean=_mean(walls),
        invalid_turns=sum(int(t.get("stats", {}).get("invalid_turns", 0)) for t in trajectories),
        passed=sum(passed(str(row.get("data_source", key)), row["score"]) for row in rows),
        intervals=metric_intervals(key, scores, resamples=resamples),
    )


def summarize(
    rows: Iterable[dict[str, Any]],
    *,
    policy: str,
    profile: str,
    data: str,
    run_wall_s: float = 0.0,
    resamples: int = bootstrap.RESAMPLES,
) -> Summary:
    """Group rows by data source (in first-seen order) and summarize each benchmark; a sample id counts
    once (its first row), however many rows a run folder holds for it."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in unique_rows(rows):
        grouped.setdefault(row["data_source"], []).append(row)
    benchmarks = {key: summarize_benchmark(key, group, resamples=resamples) for key, group in grouped.items()}
    return Summary(
        policy=policy,
        profile=profile,
        data=data,
        n=sum(b.n for b in benchmarks.values()),
        benchmarks=benchmarks,
        run_wall_s=run_wall_s,
        interval_method={
            "kind": "percentile bootstrap over samples",
            "confidence": bootstrap.CONFIDENCE,
            "resamples": resamples,
            "seed": bootstrap.SEED,
        },
    )


def short_name(key: str) -> str:
    """A benchmark's name in tables: its family (``boppose`` for ``spatialsim_boppose``)."""
    entry = BENCHMARKS.get(key)
    return entry.family if entry is not None else key


#: Figures ``aggregate`` returns that the tables leave out (n has its own column; headline repeats one).
HIDDEN_METRICS = frozenset({"n", "headline", "parse_rate"})


def format_interval(bounds: Sequence[float] | None, digits: int = 1) -> str:
    """``low–high``, or an empty string for no interval."""
    return f"{bounds[0]:.{digits}f}–{bounds[1]:.{digits}f}" if bounds else ""


def format_metrics(metrics: dict[str, float], intervals: dict[str, list[float]] | None = None) -> str:
    """``name value`` pairs of the paper's figures, in the order ``aggregate`` returns them, each with
    its interval in brackets when ``intervals`` has one."""
    intervals = intervals or {}
    return ", ".join(
        f"{name} {value:.1f}" + (f" [{format_interval(intervals[name])}]" if intervals.get(name) else "")
        for name, value in metrics.items()
        if name not in HIDDEN_METRICS
    )


def other_figures(metrics: dict[str, float]) -> str:
    """The figures beside the headline as ``name=value`` pairs (a narrow column wraps between pairs);
    empty when the benchmark has only the one figure the headline repeats."""
    named = [name for name in metrics if name not in HIDDEN_METRICS]
    if len(named) < 2:
        return ""
    return " ".join(f"{name}={metrics[name]:.1f}" for name in named)


def summary_table(summary: Summary) -> Table:
    """The end-of-run table, one row per benchmark, readable in an 80-column terminal."""
    table = Table(
        title=f"{summary.policy} on {summary.data} ({summary.profile} tools)",
        caption="score: the paper's headline figure; 95% CI: its bootstrap interval over samples (Wilson for "
        "a share of samples right); pass: "
        "samples whose own headline figure is at least 0.5 (the report's pass); calls: tool "
        "calls per episode; fails: failed tool calls in all; p.err: episodes ended by a policy error (model "
        "unreachable); s/ep: seconds per episode",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        show_edge=False,
    )
    table.add_column("benchmark", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True, style="bold")
    table.add_column("95% CI", justify="right", no_wrap=True)
    table.add_column("pass", justify="right", no_wrap=True)
    table.add_column("other figures", ratio=1, min_width=12)
    for column in ("calls", "fails", "p.err", "turns", "s/ep"):
        table.add_column(column, justify="right", no_wrap=True)
    for bench in summary.benchmarks.values():
        table.add_row(
            short_name(bench.key),
            str(bench.n),
            f"{bench.metrics.get('headline', float('nan')):.1f}",
            format_interval(bench.interval(), digits=0),
            f"{bench.passed}/{bench.n}",
            other_figures(bench.metrics),
            f"{bench.tool_calls_mean:.1f}",
            str(bench.tool_failures),
            str(bench.finish_reasons.get("policy_error", 0)),
            f"{bench.turns_mean:.1f}",
            f"{bench.wall_s_mean:.1f}",
        )
    return table
