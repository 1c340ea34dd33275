"""A run folder's log file: the package's log records, written while the run works in that folder.

Evaluations, robot evaluations and every training stage write `run.log` into their folder; a resumed run
appends to it. The records are those the `spacetools` logger lets through (info and above under the
command line, see `spacetools.cli.logs`; a library user's own logging set-up decides otherwise).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOG_FILE", "PACKAGE_LOGGER", "run_log"]

LOG_FILE = "run.log"
PACKAGE_LOGGER = "spacetools"
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


@contextmanager
def run_log(folder: Path) -> Iterator[Path]:
    """Copy the package's log records into `folder/run.log` while the block runs; yields the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOG_FILE
    logger = logging.getLogger(PACKAGE_LOGGER)
    if any(getattr(h, "baseFilename", None) == os.path.abspath(path) for h in logger.handlers):
        yield path  # a run inside a stage of the same folder (DIRL's evaluations): each record once
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        handler.close()
