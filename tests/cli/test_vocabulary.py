"""One vocabulary across commands (issue 22, item 5): `--toolset-config` everywhere, one default realism
profile stated in `--help`, `--version`, API-valid names from `tools schemas --format openai`, and the
`--out` rules of `data generate` and `data show`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spacetools import __version__
from spacetools.cli.main import app
from spacetools.kit.function_names import FUNCTION_NAME_RE, FunctionNames

runner = CliRunner()
SNAPSHOT = Path(__file__).parents[1] / "tools" / "v1_schemas.json"
PROFILED = [["eval"], ["serve"], ["demo"], ["robot", "eval"], ["tools", "run"]]
TOOLSET_CONFIGURED = [["eval"], ["serve"], ["tools", "run"], ["tools", "list"], ["tools", "schemas"]]


def _command(path: list[str]) -> Any:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]  # a group, down to the command
    return command


def _option(path: list[str], name: str) -> Any:
    (option,) = [p for p in _command(path).params if name in getattr(p, "opts", [])]
    return option


def _text(help_page: str) -> str:
    """The words of a help page, without the panels' borders and line breaks."""
    return " ".join(help_page.replace("│", " ").split())


def test_the_version_prints_from_the_installed_command() -> None:
    command = Path(sys.executable).with_name("spacetools")
    done = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == f"spacetools {__version__}\n"


@pytest.mark.parametrize("path", PROFILED, ids=" ".join)
def test_every_command_with_simulated_tools_defaults_to_one_profile_and_says_so(path: list[str]) -> None:
    assert _option(path, "--profile").default == "realistic"
    shown = runner.invoke(app, [*path, "--help"])
    assert shown.exit_code == 0 and "every command defaults to realistic" in _text(shown.output)


@pytest.mark.parametrize("path", TOOLSET_CONFIGURED, ids=" ".join)
def test_the_tool_set_file_is_toolset_config_everywhere(path: list[str]) -> None:
    assert "--toolset-config" in _option(path, "--toolset-config").opts
    shown = runner.invoke(app, [*path, "--help"])
    assert "--toolset-config" in shown.output and " --config " not in shown.output


def test_openai_schemas_carry_names_the_api_accepts() -> None:
    result = runner.invoke(app, ["tools", "schemas", "--toolset", "v1", "--format", "openai"])
    assert result.exit_code == 0, result.output
    schemas = json.loads(result.output)
    assert all(FUNCTION_NAME_RE.match(s["function"]["name"]) for s in schemas)
    snapshot = json.loads(SNAPSHOT.read_text())  # the tag protocol's names, as the hermes block shows them
    names = FunctionNames(s["function"]["name"] for s in snapshot)
    for schema in snapshot:
        schema["function"]["name"] = names.to_wire(schema["function"]["name"])
    assert schemas == snapshot
    assert schemas[0]["function"]["name"] == "roborefer-detect_one"  # the mapping of MCP and native mode


def test_generate_refuses_a_folder_that_is_not_empty_without_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "set"
    out.mkdir()
    (out / "spatialsim_robospatial.parquet").write_text("an older set")
    arguments = [
        "data",
        "generate",
        "--out",
        str(out),
        "--n",
        "1",
        "--families",
        "detect2d",
        "--workers",
        "1",
    ]
    refused = runner.invoke(app, arguments)
    assert refused.exit_code == 2 and "is not empty; give --overwrite" in " ".join(refused.output.split())
    assert (out / "spatialsim_robospatial.parquet").read_text() == "an older set"

    replaced = runner.invoke(app, [*arguments, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert sorted(p.name for p in out.iterdir()) == ["spatialsim_detect2d.parquet"]  # no stale family

    shown = runner.invoke(app, ["data", "show", str(out), "--index", "0", "--out", str(tmp_path / "pics")])
    assert shown.exit_code == 0, shown.output
    assert (tmp_path / "pics" / "show_spatialsim_detect2d_0.png").is_file()  # a folder: the PNG inside
    target = tmp_path / "deep" / "er" / "q0.png"
    shown = runner.invoke(app, ["data", "show", str(out), "--index", "0", "--out", str(target)])
    assert shown.exit_code == 0 and target.is_file(), shown.output
