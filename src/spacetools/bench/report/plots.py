"""The report's plots, laid out for inline SVG (no plotting library at run time, a few kB in the page):
the headline score of each benchmark with its 95% interval, tool calls per episode, and failed tool
calls. ``templates/report_plots.html`` draws them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from spacetools.bench.summary import Summary, short_name

LABEL_WIDTH = 110
BAR_WIDTH = 220
VALUE_WIDTH = 130
ROW_HEIGHT = 22
TOP = 26  # the title's band
AXIS = 18  # the scale's band under the bars


@dataclass
class Bar:
    """One benchmark's bar: its value, an optional interval drawn as a whisker, and the text beside it."""

    label: str
    value: float
    text: str
    interval: tuple[float, float] | None = None


@dataclass(frozen=True)
class BarRow:
    """Where one bar goes: its band's top and middle, the x of the bar's end, and the whisker's SVG path."""

    bar: Bar
    top: int
    middle: float
    end: float
    whisker: str | None


@dataclass(frozen=True)
class BarChart:
    """A horizontal bar chart laid out for SVG, one row per bar, on a 0..``scale_max`` scale."""

    title: str
    rows: list[BarRow]
    scale_max: float
    color: str
    label_width: ClassVar[int] = LABEL_WIDTH
    bar_width: ClassVar[int] = BAR_WIDTH
    row_height: ClassVar[int] = ROW_HEIGHT
    top: ClassVar[int] = TOP
    width: ClassVar[int] = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH

    @property
    def axis(self) -> int:
        """The y of the scale's line."""
        return TOP + ROW_HEIGHT * len(self.rows)

    @property
    def height(self) -> int:
        return self.axis + AXIS


def bar_chart(title: str, bars: Sequence[Bar], scale_max: float, color: str) -> BarChart:
    """Lay out ``bars`` on a 0..``scale_max`` scale."""
    scale_max = scale_max if scale_max > 0 else 1.0

    def x(value: float) -> float:
        return LABEL_WIDTH + BAR_WIDTH * min(max(value, 0.0), scale_max) / scale_max

    rows = []
    for position, bar in enumerate(bars):
        top = TOP + ROW_HEIGHT * position
        middle = top + ROW_HEIGHT / 2
        whisker = None
        if bar.interval is not None:
            low, high = (x(bound) for bound in bar.interval)
            whisker = (
                f"M{low:.1f} {middle:.1f}H{high:.1f}M{low:.1f} {top + 5}V{top + ROW_HEIGHT - 5}"
                f"M{high:.1f} {top + 5}V{top + ROW_HEIGHT - 5}"
            )
        rows.append(BarRow(bar, top, middle, x(bar.value), whisker))
    return BarChart(title, rows, scale_max, color)


def plots(summary: Summary) -> list[BarChart]:
    """The plots section's charts: score with interval bars, tool calls and tool failures per benchmark."""
    benches = list(summary.benchmarks.values())
    if not benches:
        return []
    scores = []
    for bench in benches:
        headline = bench.metrics.get("headline", 0.0)
        interval = bench.interval()
        text = f"{headline:.1f}" + (f" [{interval[0]:.0f}–{interval[1]:.0f}]" if interval else "")
        scores.append(Bar(short_name(bench.key), headline, text, interval))
    calls = [Bar(short_name(b.key), b.tool_calls_mean, f"{b.tool_calls_mean:.1f}") for b in benches]
    failures = [
        Bar(short_name(b.key), b.tool_failures, f"{b.tool_failures} ({b.tool_failure_rate:.0%})")
        for b in benches
    ]
    return [
        bar_chart("Score (headline) with its 95% interval", scores, 100.0, "#60a5fa"),
        bar_chart("Tool calls per episode", calls, max(bar.value for bar in calls), "#a3a3a3"),
        bar_chart("Failed tool calls (share of calls)", failures, max(b.value for b in failures), "#f87171"),
    ]
