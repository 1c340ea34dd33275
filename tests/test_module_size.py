"""No module of the package is over 500 lines (the house style): a module that grows past it holds
more than one concept and is split by concept."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "spacetools"
MAX_LINES = 500


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_500_lines() -> None:
    too_long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _line_count(path)) > MAX_LINES
    }
    assert not too_long, f"modules over {MAX_LINES} lines (split them by concept): {too_long}"


def test_the_count_is_of_lines(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("x = 1\n" * MAX_LINES, encoding="utf-8")
    assert _line_count(module) == MAX_LINES
    module.write_text("x = 1\n" * MAX_LINES + "y = 2", encoding="utf-8")
    assert _line_count(module) == MAX_LINES + 1
