"""The package's layers only import downward (docs/architecture.md): a newcomer can rely on it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "spacetools"
# Each layer may import the layers listed for it (and itself). `rewards` imports nothing, so that verl
# can load it as a file; its answer-format parsers are also read by the scripted expert in `agent`.
# `integrations` (verl, MCP) sits on top: only `cli` imports it.
ALLOWED: dict[str, set[str]] = {
    "sim": set(),
    "tools": {"sim"},
    "toolshed": {"sim", "tools"},
    "agent": {"sim", "tools", "toolshed", "rewards"},
    "rewards": set(),
    "bench": {"sim", "tools", "toolshed", "agent", "rewards"},
    "train": {"sim", "tools", "toolshed", "agent", "rewards", "bench"},
    "integrations": {"sim", "tools", "toolshed", "agent", "rewards", "bench", "train"},
    "cli": {"sim", "tools", "toolshed", "agent", "rewards", "bench", "train", "integrations"},
}


def _imported_layers(path: Path) -> set[str]:
    layers = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "spacetools" and len(parts) > 1:
                layers.add(parts[1])
    return layers


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_downward(layer: str) -> None:
    offending = {
        str(path.relative_to(PACKAGE)): sorted(imported - ALLOWED[layer] - {layer})
        for path in (PACKAGE / layer).rglob("*.py")
        if (imported := _imported_layers(path)) - ALLOWED[layer] - {layer}
    }
    assert not offending, f"{layer} imports upward: {offending}"


def test_every_layer_is_known() -> None:
    layers = {path.name for path in PACKAGE.iterdir() if path.is_dir() and not path.name.startswith("_")}
    assert layers <= set(ALLOWED), f"unknown layers: {sorted(layers - set(ALLOWED))}"
