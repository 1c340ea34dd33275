"""The report's plots, as inline SVG (no plotting library at run time, a few kB in the page): the
headline score of each benchmark with its 95% interval, tool calls per episode, and failed tool calls."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

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


def bar_chart(title: str, bars: Sequence[Bar], scale_max: float, color: str) -> str:
    """A horizontal bar chart, one row per bar, on a 0..``scale_max`` scale."""
    scale_max = scale_max if scale_max > 0 else 1.0
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    height = TOP + ROW_HEIGHT * len(bars) + AXIS

    def x(value: float) -> float:
        return LABEL_WIDTH + BAR_WIDTH * min(max(value, 0.0), scale_max) / scale_max

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='plot' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label='{html.escape(title)}'>",
        f"<text x='0' y='16' font-weight='bold' font-size='13'>{html.escape(title)}</text>",
    ]
    for row, bar in enumerate(bars):
        top = TOP + ROW_HEIGHT * row
        middle = top + ROW_HEIGHT / 2
        parts.append(
            f"<text x='{LABEL_WIDTH - 6}' y='{middle + 4:.1f}' text-anchor='end' font-size='12'>"
            f"{html.escape(bar.label)}</text>"
            f"<rect x='{LABEL_WIDTH}' y='{top + 4}' width='{x(bar.value) - LABEL_WIDTH:.1f}' "
            f"height='{ROW_HEIGHT - 8}' fill='{color}'><title>{html.escape(bar.label)}: "
            f"{html.escape(bar.text)}</title></rect>"
        )
        if bar.interval is not None:
            low, high = (x(bound) for bound in bar.interval)
            parts.append(
                f"<path class='whisker' d='M{low:.1f} {middle:.1f}H{high:.1f}M{low:.1f} {top + 5}V{top + ROW_HEIGHT - 5}"
                f"M{high:.1f} {top + 5}V{top + ROW_HEIGHT - 5}' stroke='#111' stroke-width='1.5' fill='none'/>"
            )
        parts.append(
            f"<text x='{LABEL_WIDTH + BAR_WIDTH + 6}' y='{middle + 4:.1f}' font-size='12'>"
            f"{html.escape(bar.text)}</text>"
        )
    axis = TOP + ROW_HEIGHT * len(bars)
    parts.append(
        f"<path d='M{LABEL_WIDTH} {TOP}V{axis}H{LABEL_WIDTH + BAR_WIDTH}' stroke='#999' fill='none'/>"
        f"<text x='{LABEL_WIDTH}' y='{axis + 13}' font-size='10' fill='#777'>0</text>"
        f"<text x='{LABEL_WIDTH + BAR_WIDTH}' y='{axis + 13}' font-size='10' fill='#777' text-anchor='end'>"
        f"{scale_max:g}</text></svg>"
    )
    return "".join(parts)


def plots_html(summary: Summary) -> str:
    """The plots section: score with interval bars, tool calls and tool failures per benchmark."""
    benches = list(summary.benchmarks.values())
    if not benches:
        return ""
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
    charts = (
        bar_chart("Score (headline) with its 95% interval", scores, 100.0, "#60a5fa"),
        bar_chart("Tool calls per episode", calls, max(bar.value for bar in calls), "#a3a3a3"),
        bar_chart("Failed tool calls (share of calls)", failures, max(b.value for b in failures), "#f87171"),
    )
    return (
        "<h2 id='plots'>Plots</h2><p class='muted'>Whiskers: the 95% bootstrap interval over the "
        "benchmark's samples (its aggregator recomputed on resampled samples).</p>"
        f"<div class='plots'>{''.join(charts)}</div>"
    )
