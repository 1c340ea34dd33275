"""The package's layers only import downward (docs/architecture.md): a newcomer can rely on it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "spacetools"
# Each layer may import the layers listed for it (and itself). `kit` (the tool framework and model
# loading) and `rewards` import nothing: every layer builds on kit, and verl loads rewards as a file
# (its answer-format parsers are also read by the scripted expert in `agent`). The Toolshed serves tools
# it knows by name only; the evaluation, the agent and the trainers reach them through it. The
# integrations adapt tools and the Toolshed to other frameworks; none of them trains.
ALLOWED: dict[str, set[str]] = {
    "kit": set(),
    "rewards": set(),
    "sim": {"kit"},
    "tools": {"kit", "sim"},
    "toolshed": {"kit"},
    "agent": {"kit", "toolshed", "rewards"},
    "bench": {"kit", "sim", "toolshed", "agent", "rewards"},
    "train": {"kit", "toolshed", "agent", "rewards", "bench"},
    "integrations": {"kit", "sim", "tools", "toolshed", "agent", "rewards", "bench"},
    "cli": {"kit", "sim", "tools", "toolshed", "agent", "rewards", "bench", "train", "integrations"},
}


def _imported_modules(path: Path) -> set[str]:
    """The spacetools modules (or names in them) a file imports, without the `spacetools.` prefix."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from spacetools.tools import models` imports the module spacetools.tools.models.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            # The package root (its `__version__`) is not a layer.
            if parts[0] == "spacetools" and len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
                modules.add(".".join(parts[1:]))
    return modules


def _offending(layer: str, modules: set[str]) -> list[str]:
    return sorted(module for module in modules if module.split(".")[0] not in ALLOWED[layer] | {layer})


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_downward(layer: str) -> None:
    offending = {
        str(path.relative_to(PACKAGE)): found
        for path in (PACKAGE / layer).rglob("*.py")
        if (found := _offending(layer, _imported_modules(path)))
    }
    assert not offending, f"{layer} imports what it may not: {offending}"


def test_every_layer_is_known() -> None:
    layers = {path.name for path in PACKAGE.iterdir() if path.is_dir() and not path.name.startswith("_")}
    assert layers <= set(ALLOWED), f"unknown layers: {sorted(layers - set(ALLOWED))}"


def test_the_rules_catch_an_upward_import() -> None:
    assert _offending("agent", {"tools.models.runtime", "kit.loading"}) == ["tools.models.runtime"]
    assert _offending("train", {"tools.depth", "toolshed.shed"}) == ["tools.depth"]
    assert _offending("integrations", {"train.sft", "tools.robot.backend"}) == ["train.sft"]
    assert _offending("toolshed", {"tools.definition", "kit.definition"}) == ["tools.definition"]
