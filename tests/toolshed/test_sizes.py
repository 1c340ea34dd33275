"""The Toolshed keeps its walls: no class over 250 lines and no function over 100 lines in it."""

from __future__ import annotations

import ast
from pathlib import Path

import spacetools.toolshed

TOOLSHED = Path(spacetools.toolshed.__file__).parent
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 100


def _too_long() -> list[str]:
    found = []
    for path in sorted(TOOLSHED.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = (
                MAX_CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else MAX_FUNCTION_LINES
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                else None
            )
            if limit is not None and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(
                        f"{path.relative_to(TOOLSHED)}: {node.name} has {lines} lines (limit {limit})"
                    )
    return found


def test_no_class_or_function_in_the_toolshed_is_too_long() -> None:
    assert _too_long() == []
