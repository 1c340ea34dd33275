"""A progress bar for the long commands (eval, data generate, train traces, robot eval): done/total,
rate, elapsed time and ETA, and optionally a detail that moves within an item (a local model's tokens per
second while an episode runs). In a terminal it is a live rich bar; piped or in a log it is one plain line
every ``step_percent`` percent, so a redirected run still shows that it moves and when it will end."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

#: Advances the bar by a number of finished items.
Advance = Callable[[int], None]
#: The text of the detail column, read at every refresh.
Detail = Callable[[], str]


class DetailColumn(ProgressColumn):
    """A line of text the caller computes at each refresh (e.g. tokens per second of the running episodes)."""

    def __init__(self, detail: Detail) -> None:
        super().__init__()
        self.detail = detail

    def render(self, task: Task) -> Text:
        return Text(self.detail(), style="progress.data.speed")


class RateColumn(ProgressColumn):
    """Items per second (or seconds per item when slower than one a second)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        return Text(_rate(task.speed, self.unit), style="progress.data.speed")


def _rate(per_second: float | None, unit: str) -> str:
    if not per_second:
        return f"– {unit}/s"
    return f"{per_second:.2f} {unit}/s" if per_second >= 1 else f"{1 / per_second:.1f} s/{unit}"


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


@contextlib.contextmanager
def progress_bar(
    console: Console,
    description: str,
    total: int,
    *,
    unit: str = "item",
    step_percent: int = 10,
    detail: Detail | None = None,
) -> Iterator[Advance]:
    """A bar for ``total`` items; yields ``advance(n)``. ``detail`` adds a column (and, piped, a part of
    each line) that moves while an item runs."""
    if console.is_terminal:
        columns: tuple[ProgressColumn, ...] = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            RateColumn(unit),
            *([DetailColumn(detail)] if detail is not None else []),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=console) as live:
            task = live.add_task(description, total=total)

            def advance_live(count: int = 1) -> None:
                live.advance(task, count)

            yield advance_live
        return
    started = time.monotonic()
    done, next_percent = 0, step_percent

    def advance(count: int = 1) -> None:
        nonlocal done, next_percent
        done += count
        percent = 100 * done // max(total, 1)
        if percent < next_percent and done < total:
            return
        while next_percent <= percent:
            next_percent += step_percent
        elapsed = time.monotonic() - started
        rate = done / elapsed if elapsed > 0 else None
        eta = _clock((total - done) / rate) if rate else "?"
        extra = f", {detail()}" if detail is not None else ""
        console.print(
            f"{description}: {done}/{total} ({percent}%), {_rate(rate, unit)}{extra}, "
            f"elapsed {_clock(elapsed)}, ETA {eta}",
            highlight=False,
            soft_wrap=True,
        )

    yield advance
