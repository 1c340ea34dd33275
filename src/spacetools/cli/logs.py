"""The command line's logging: the `spacetools` loggers' records on stderr through Rich, at `--log-level`.

Library code only calls `logging.getLogger(__name__)`; a run folder's own log file is
:func:`spacetools.bench.runlog.run_log`. Command results (tables, paths) stay on stdout.
"""

from __future__ import annotations

import enum
import logging

from rich.console import Console
from rich.logging import RichHandler

from spacetools.bench.runlog import PACKAGE_LOGGER

_HANDLER_NAME = "spacetools-cli"


class LogLevel(str, enum.Enum):
    """The levels `--log-level` takes."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def setup_logging(level: LogLevel | str) -> None:
    """Show the package's records at `level` and above on stderr (set once per command)."""
    threshold: int = getattr(logging, LogLevel(level).value.upper())
    handler = RichHandler(console=Console(stderr=True), show_path=False, markup=False, log_time_format="[%X]")
    handler.setLevel(threshold)
    handler.set_name(_HANDLER_NAME)
    logger = logging.getLogger(PACKAGE_LOGGER)
    for previous in [h for h in logger.handlers if h.get_name() == _HANDLER_NAME]:  # an earlier command
        logger.removeHandler(previous)
    logger.addHandler(handler)
    # Info records still reach the run folders' log files when the terminal shows warnings only.
    logger.setLevel(min(threshold, logging.INFO))
