"""The README's limits table says what is in force: every `--flag`, value pair in the columns of
`spacetools serve` (HTTP and MCP) and `spacetools robot serve` is that command's default for the flag."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from spacetools.cli.main import app

README = Path(__file__).resolve().parents[2] / "README.md"
QUANTITY = re.compile(r"`(--[a-z-]+)`[,(\s]*([0-9][0-9,.]*)(²)?\s*(KiB|MiB|GiB|s\b|h\b)?")
UNITS = {None: 1, "s": 1, "h": 3600, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
COLUMNS = {1: ("serve",), 2: ("serve",), 3: ("robot", "serve")}  # the table's columns and their commands


def _defaults(path: tuple[str, ...]) -> dict[str, object]:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # a group's subcommands
    return {opt: param.default for param in command.params for opt in param.opts if opt.startswith("--")}


def _table_rows() -> list[list[str]]:
    section = README.read_text(encoding="utf-8").split("## Toolshed server", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]


def test_every_limit_in_the_readme_table_is_the_default_in_force() -> None:
    checked = []
    for row in _table_rows():
        for column, command in COLUMNS.items():
            defaults = _defaults(command)
            for flag, number, squared, unit in QUANTITY.findall(row[column]):
                value = float(number.replace(",", "")) ** (2 if squared else 1) * UNITS[unit or None]
                assert flag in defaults, f"{' '.join(command)} has no {flag} (README row {row[0]!r})"
                assert defaults[flag] == value, (
                    f"README says {flag} {number}{squared}{unit} for `{' '.join(command)}`, the code "
                    f"{defaults[flag]} (row {row[0]!r})"
                )
                checked.append((command, flag))
    assert len(checked) >= 15, checked  # the table's limits were found, not skipped
