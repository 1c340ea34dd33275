"""What a researcher watches while a stage trains: a progress bar, and the step's figures in TensorBoard and
Weights & Biases (the train configs' `report_to`) as each step ends."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

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
WANDB_PROJECT = "spacetools"
logger = logging.getLogger(__name__)


class StageMonitor:
    """The `progress(step, total, row)` callback of `train_sft` and `train_grpo`, as a context manager.

    Each metrics row becomes `<stage>/<name>` scalars in `logdir` (flushed per step, so TensorBoard shows
    a run while it trains), a W&B step of a run kept under `wandb_dir` (none: no W&B), a debug log line,
    and one advance of a progress bar on `console` (none: no bar).
    """

    def __init__(
        self,
        stage: str,
        logdir: Path | None,
        console: Console | None = None,
        *,
        wandb_dir: Path | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.stage = stage
        self.logdir = logdir
        self.wandb_dir = wandb_dir
        self.config = config or {}
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
        self._wandb: Any = None

    @classmethod
    def reporting_to(
        cls,
        report_to: Sequence[str],
        stage: str,
        run_dir: Path,
        tensorboard_dir: Path,
        console: Console | None = None,
        config: dict[str, Any] | None = None,
    ) -> StageMonitor:
        """The monitor of a stage whose config says `report_to` (tensorboard, wandb)."""
        return cls(
            stage,
            tensorboard_dir if "tensorboard" in report_to else None,
            console,
            wandb_dir=run_dir if "wandb" in report_to else None,
            config=config,
        )

    def __enter__(self) -> StageMonitor:
        if self.logdir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.logdir))
        if self.wandb_dir is not None:
            self._wandb = _start_wandb(self.stage, self.wandb_dir, self.config)
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
        if self._wandb is not None:
            self._wandb.finish(exit_code=0 if error is None else 1)

    def __call__(self, step: int, total: int, row: dict[str, Any]) -> None:
        kind = str(row.get("stage", self.stage))
        scalars = {
            f"{self.stage}/{name}": value
            for name, value in row.items()
            if name not in ("stage", "step") and isinstance(value, int | float)
        }
        logger.debug("%s step %d/%d: %s", self.stage, step, total, _figures(scalars))
        if self._writer is not None:
            for tag, value in scalars.items():
                self._writer.add_scalar(tag, value, step)
            self._writer.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if self._progress is not None:
            figures = "  ".join(
                f"{name} {row[name]:.3g}"
                for name in HEADLINE.get(kind, ())
                if isinstance(row.get(name), float)
            )
            if self._bar is None:
                self._bar = self._progress.add_task(self.stage, total=total, completed=step - 1, figures="")
            self._progress.update(self._bar, completed=step, figures=figures)


def _figures(scalars: dict[str, float]) -> str:
    return ", ".join(f"{tag.rpartition('/')[2]} {value:.4g}" for tag, value in scalars.items())


def _start_wandb(stage: str, run_dir: Path, config: dict[str, Any]) -> Any:
    """A W&B run under `run_dir/wandb`: online with an API key (or as WANDB_MODE says), else offline,
    so a machine without network or account still keeps the run (`wandb sync` uploads it later)."""
    import wandb

    # WANDB_MODE, when set, is read by wandb itself.
    mode: Literal["online", "offline"] | None = (
        None if os.environ.get("WANDB_MODE") else "online" if os.environ.get("WANDB_API_KEY") else "offline"
    )
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", WANDB_PROJECT),
        name=f"{run_dir.name}/{stage}",
        dir=str(run_dir),
        config=config,
        mode=mode,
        settings=wandb.Settings(silent=True, console="off"),
    )
    logger.info("%s: W&B run %s (%s) in %s", stage, run.id, run.settings.mode, run.settings.sync_dir)
    return run
