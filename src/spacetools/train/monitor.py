"""What a researcher watches while a stage trains: a progress bar, and TensorBoard scalars as each step ends."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# The figures shown beside the bar, per stage kind (all of a row's numbers go to TensorBoard).
HEADLINE = {"sft": ("loss",), "grpo": ("reward_mean", "valid_turn_rate", "kl")}


class StageMonitor:
    """The `progress(step, total, row)` callback of `train_sft` and `train_grpo`, as a context manager.

    Each metrics row becomes `<stage>/<name>` scalars in `logdir` (flushed per step, so TensorBoard shows
    a run while it trains) and one advance of a progress bar on `console` (none: no bar).
    """

    def __init__(self, stage: str, logdir: Path | None, console: Console | None = None) -> None:
        self.stage = stage
        self.logdir = logdir
        self._progress = (
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[figures]}"),
                console=console,
            )
            if console is not None
            else None
        )
        self._bar: Any = None
        self._writer: Any = None

    def __enter__(self) -> StageMonitor:
        if self.logdir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.logdir))
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._writer is not None:
            self._writer.close()

    def __call__(self, step: int, total: int, row: dict[str, Any]) -> None:
        kind = str(row.get("stage", self.stage))
        if self._writer is not None:
            for name, value in row.items():
                if name not in ("stage", "step") and isinstance(value, int | float):
                    self._writer.add_scalar(f"{self.stage}/{name}", value, step)
            self._writer.flush()
        if self._progress is not None:
            figures = "  ".join(
                f"{name} {row[name]:.3g}"
                for name in HEADLINE.get(kind, ())
                if isinstance(row.get(name), float)
            )
            if self._bar is None:
                self._bar = self._progress.add_task(self.stage, total=total, completed=step - 1, figures="")
            self._progress.update(self._bar, completed=step, figures=figures)
