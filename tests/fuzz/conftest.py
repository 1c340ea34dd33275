"""Print how many inputs the fuzz tests tried (``make fuzz`` records the figure)."""

from __future__ import annotations

import pytest

from .corpus import TRIED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TRIED:
        return
    failed = len(terminalreporter.stats.get("failed", []))
    terminalreporter.write_line(
        f"fuzz: {sum(TRIED.values())} inputs tried, {failed} failing tests; "
        + ", ".join(f"{name} {count}" for name, count in sorted(TRIED.items()))
    )
