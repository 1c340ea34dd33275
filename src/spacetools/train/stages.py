"""A run folder of stages: each stage runs once, leaves a `DONE` marker with its wall time, and is skipped
when the same command runs again; training stages show a progress bar and report their figures."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.train.config import GRPOConfig, SFTConfig
from spacetools.train.monitor import StageMonitor

DONE = "DONE"
logger = logging.getLogger("spacetools.train.dirl")  # the recipe's stage lines, whichever run writes them


class StagedRun:
    """The stages of one run folder `out`; `console` (optional) shows progress."""

    def __init__(self, out: Path, console: Console | None = None) -> None:
        self.out = out
        self.console = console

    def monitor(self, config: SFTConfig | GRPOConfig) -> StageMonitor:
        """The progress bar and live figures (the config's `report_to`) of the training stage in `config.out`."""
        stage = config.out.name
        return StageMonitor.reporting_to(
            config.report_to,
            stage,
            config.out,
            self.out / "tensorboard" / stage,
            self.console,
            config=json.loads(config.model_dump_json()),
        )

    def stage_dir(self, name: str) -> Path:
        return self.out / name

    async def stage(self, name: str, work: Callable[[Path], Any]) -> None:
        """Run `work(folder)` unless the stage finished before; mark it done after."""
        folder = self.stage_dir(name)
        if (folder / DONE).is_file():
            self._note(f"[{name}] done before, skipped")
            return
        with run_folder_lock(folder), run_log(folder):  # the lock first: it marks the folder as a run's
            self._note(f"[{name}] …")
            started = time.perf_counter()
            result = work(folder)
            if asyncio.iscoroutine(result):
                await result
            seconds = time.perf_counter() - started
            # Wall time of the stage's last (possibly resumed) run, for the per-stage report.
            (folder / DONE).write_text(json.dumps({"wall_s": round(seconds, 1)}) + "\n", encoding="utf-8")
            self._note(f"[{name}] done in {seconds:.0f} s")

    def _note(self, line: str) -> None:
        """A stage's line: the command's own progress on the console, and the run's logs."""
        logger.info(line)
        if self.console is not None:
            self.console.print(line, highlight=False, markup=False)
