"""Per-benchmark summaries of an evaluation run: aggregation of scored rows, JSON, rich tables.

A row is one line of ``samples.jsonl``: ``id``, ``data_source``, ``score`` (the dict of
``spacetools.rewards.compute_score``) and ``trajectory`` (``Trajectory.to_dict()``). The metrics are
the paper's, from ``spacetools.rewards.aggregate`` (the benchmark registry's aggregators); the rest (tool calls by tool, failures, turns,
wall time) comes from the trajectories.
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

from spacetools.bench.runfolder import unique_rows
from spacetools.rewards import BENCHMARKS, aggregate


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


@dataclass
class Summary:
    """A whole run: what was evaluated how, and one :class:`BenchmarkSummary` per benchmark."""

    policy: str
    profile: str
    data: str
    n: int
    benchmarks: dict[str, BenchmarkSummary] = field(default_factory=dict)
    run_wall_s: float = 0.0

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


def summarize_benchmark(key: str, rows: Sequence[dict[str, Any]]) -> BenchmarkSummary:
    """Aggregate the rows of one benchmark."""
    trajectories = [row["trajectory"] for row in rows]
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
        metrics={
            name: float(value) for name, value in aggregate(key, [row["score"] for row in rows]).items()
        },
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
    )


def summarize(
    rows: Iterable[dict[str, Any]], *, policy: str, profile: str, data: str, run_wall_s: float = 0.0
) -> Summary:
    """Group rows by data source (in first-seen order) and summarize each benchmark; a sample id counts
    once (its first row), however many rows a run folder holds for it."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in unique_rows(rows):
        grouped.setdefault(row["data_source"], []).append(row)
    benchmarks = {key: summarize_benchmark(key, group) for key, group in grouped.items()}
    return Summary(
        policy=policy,
        profile=profile,
        data=data,
        n=sum(b.n for b in benchmarks.values()),
        benchmarks=benchmarks,
        run_wall_s=run_wall_s,
    )


def short_name(key: str) -> str:
    """A benchmark's name in tables: its family (``boppose`` for ``spatialsim_boppose``)."""
    entry = BENCHMARKS.get(key)
    return entry.family if entry is not None else key


#: Figures ``aggregate`` returns that the tables leave out (n has its own column; headline repeats one).
HIDDEN_METRICS = frozenset({"n", "headline", "parse_rate"})


def format_metrics(metrics: dict[str, float]) -> str:
    """``name value`` pairs of the paper's figures, in the order ``aggregate`` returns them."""
    return ", ".join(f"{name} {value:.1f}" for name, value in metrics.items() if name not in HIDDEN_METRICS)


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
        caption="score: the paper's headline figure; calls: tool calls per episode; fails: failed tool "
        "calls in all; s/ep: seconds per episode",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        show_edge=False,
    )
    table.add_column("benchmark", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True, style="bold")
    table.add_column("other figures", ratio=1, min_width=12)
    for column in ("calls", "fails", "turns", "s/ep"):
        table.add_column(column, justify="right", no_wrap=True)
    for bench in summary.benchmarks.values():
        table.add_row(
            short_name(bench.key),
            str(bench.n),
            f"{bench.metrics.get('headline', float('nan')):.1f}",
            other_figures(bench.metrics),
            f"{bench.tool_calls_mean:.1f}",
            str(bench.tool_failures),
            f"{bench.turns_mean:.1f}",
            f"{bench.wall_s_mean:.1f}",
        )
    return table


def compare_table(a: Summary, b: Summary, *, label_a: str = "A", label_b: str = "B") -> Table:
    """Two runs side by side: every metric of every benchmark either run has, with B − A."""
    table = Table(title=f"{label_a} ({a.policy}, {a.profile})  vs  {label_b} ({b.policy}, {b.profile})")
    for column in ("benchmark", "metric", label_a, label_b, "delta"):
        table.add_column(
            column, justify="left" if column in ("benchmark", "metric") else "right", no_wrap=True
        )
    keys = list(dict.fromkeys([*a.benchmarks, *b.benchmarks]))
    for key in keys:
        left, right = a.benchmarks.get(key), b.benchmarks.get(key)
        metrics = {
            "n": (left.n if left else None, right.n if right else None),
            **{
                name: (
                    left.metrics.get(name) if left else None,
                    right.metrics.get(name) if right else None,
                )
                for name in dict.fromkeys(
                    [*(left.metrics if left else {}), *(right.metrics if right else {})]
                )
                if name not in ("n", "headline")
            },
            "calls/ep": (left.tool_calls_mean if left else None, right.tool_calls_mean if right else None),
            "tool failures": (left.tool_failures if left else None, right.tool_failures if right else None),
        }
        for position, (name, (x, y)) in enumerate(metrics.items()):
            delta = "" if x is None or y is None else _signed(y - x)
            label = short_name(key) if position == 0 else ""
            table.add_row(label, name, _cell(x), _cell(y), delta)
        table.add_section()
    return table


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.2f}"


def _signed(value: float) -> str:
    if isinstance(value, int):
        return f"{value:+d}"
    style = "green" if value > 1e-9 else "red" if value < -1e-9 else "dim"
    return f"[{style}]{value:+.2f}[/{style}]"
