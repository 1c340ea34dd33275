"""Every CLI parameter is declared in typer's `Annotated` style (`x: Annotated[T, typer.Option(...)] = 3`),
never with the option as its default (`x: T = typer.Option(3, ...)`): one style, the one typer recommends."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import typer
from typer.models import ParameterInfo

from spacetools.cli.main import app

CLI = Path(__file__).resolve().parents[2] / "src" / "spacetools" / "cli"
TYPER_PARAMETERS = {"Option", "Argument"}


def _is_typer_parameter(call: ast.Call) -> bool:
    """`typer.Option(...)`, `typer.Argument(...)`, or the same names imported bare."""
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr in TYPER_PARAMETERS
    return isinstance(function, ast.Name) and function.id in TYPER_PARAMETERS


def _typer_defaults(source: str, filename: str) -> Iterator[str]:
    """``function(parameter)`` for each parameter whose default holds a typer Option or Argument."""
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        positional = [*node.args.posonlyargs, *node.args.args]
        with_defaults = [
            *zip(positional[len(positional) - len(node.args.defaults) :], node.args.defaults, strict=True),
            *(
                (arg, default)
                for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
                if default
            ),
        ]
        for arg, default in with_defaults:
            if any(isinstance(part, ast.Call) and _is_typer_parameter(part) for part in ast.walk(default)):
                yield f"{node.name}({arg.arg})"


def test_no_cli_parameter_has_a_typer_option_as_its_default() -> None:
    found = {
        str(path.relative_to(CLI)): names
        for path in sorted(CLI.rglob("*.py"))
        if (names := list(_typer_defaults(path.read_text(encoding="utf-8"), str(path))))
    }
    assert not found, f"write these as `name: Annotated[T, typer.Option(...)] = default`: {found}"


def test_no_registered_command_takes_a_typer_option_as_a_default() -> None:
    """Also the options built by helpers (`seed_option(...)`), which the source check cannot see."""
    root = typer.main.get_command(app)
    commands, found = [root], []
    while commands:
        command = commands.pop()
        commands.extend(getattr(command, "commands", {}).values())
        if command.callback is None:
            continue
        callback = inspect.unwrap(command.callback)
        found += [
            f"{callback.__module__}.{callback.__name__}({name})"
            for name, parameter in inspect.signature(callback).parameters.items()
            if isinstance(parameter.default, ParameterInfo)
        ]
    assert not found, f"write these as `name: Annotated[T, typer.Option(...)] = default`: {found}"


def test_the_source_check_catches_both_styles_of_default() -> None:
    source = (
        "def command(a: int = typer.Option(1, '--a'), *, b: list[str] = Argument(...), c: int = 3,\n"
        "            d: Annotated[int, typer.Option('--d')] = 4) -> None: ..."
    )
    assert list(_typer_defaults(source, "example.py")) == ["command(a)", "command(b)"]
