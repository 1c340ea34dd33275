"""`spacetools tools`: list a tool set, print its schemas, and run tool calls on a scene or a photo."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.padding import Padding

from spacetools.cli.options import (
    ProfileOption,
    read_text_file,
    seed_option,
    toolset_config_option,
    toolset_deployments,
)
from spacetools.kit.definition import ToolSpec, hermes_tools_block, tool_specs
from spacetools.kit.function_names import FunctionNames
from spacetools.toolshed.connection import DEFAULT_PROFILE
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.toolsets import TOOLSET_NAMES

app = typer.Typer(no_args_is_help=True)
console = Console()

SCHEMA_FORMATS = ("openai", "hermes")


def _deployments(toolset: str, config: Path | None = None) -> list[ToolDeployment]:
    deployments: list[ToolDeployment] = toolset_deployments(toolset, config)
    return deployments


def _specs(deployments: list[ToolDeployment]) -> list[ToolSpec]:
    return [spec for deployment in deployments for spec in tool_specs(deployment.tool_class())]


@app.command("list")
def list_tools(
    toolset: Annotated[str, typer.Option("--toolset", help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    toolset_config: Annotated[Path | None, toolset_config_option()] = None,
) -> None:
    """List the tool methods of a tool set with their arguments and how they are served."""
    deployments = _deployments(toolset, toolset_config)
    # One block per tool rather than a table: signatures are long and must read at 80 columns.
    console.print(f"[bold]Tool set {toolset_config or toolset}[/bold]")
    for deployment in deployments:
        tool = deployment.tool_class()
        console.print(
            f"\n[bold]{tool.name}[/bold]  ({deployment.backend}, {deployment.instances} instance(s))"
        )
        for spec in tool_specs(tool):
            arguments = ", ".join(spec.parameters["properties"])
            summary = spec.description.splitlines()[0]
            console.print(f"  [cyan]{spec.name}[/cyan]({arguments})", highlight=False)
            console.print(Padding(summary, (0, 0, 0, 6), expand=False), highlight=False)


@app.command("schemas")
def schemas(
    toolset: Annotated[str, typer.Option("--toolset", help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="openai: a JSON array of function schemas, named as function-calling APIs accept (`.` is "
            "`-`, as in native mode and MCP); hermes: the <tools> prompt block (the tag protocol's names).",
        ),
    ] = "openai",
    toolset_config: Annotated[Path | None, toolset_config_option()] = None,
) -> None:
    """Print the model-facing schemas of a tool set."""
    if output_format not in SCHEMA_FORMATS:
        raise typer.BadParameter(
            f"unknown format {output_format!r}; choose one of: {', '.join(SCHEMA_FORMATS)}",
            param_hint="--format",
        )
    specs = _specs(_deployments(toolset, toolset_config))
    if output_format == "openai":
        names = FunctionNames(spec.name for spec in specs)
        schemas = [spec.to_openai() for spec in specs]
        for schema in schemas:
            schema["function"]["name"] = names.to_wire(schema["function"]["name"])
        typer.echo(json.dumps(schemas, indent=2, ensure_ascii=False))
    else:
        typer.echo(hermes_tools_block(specs))


def _read_calls(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The ``[{"name", "arguments"}, …]`` list of a calls file, validated."""
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {path}", param_hint="--calls")
    try:
        data = json.loads(read_text_file(path, "--calls"))
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"{path} is not valid JSON: {error}", param_hint="--calls") from None
    if not isinstance(data, list):
        raise typer.BadParameter(
            f'{path} must hold a JSON list of {{"name", "arguments"}}', param_hint="--calls"
        )
    calls = []
    for position, call in enumerate(data):
        if not (isinstance(call, dict) and isinstance(call.get("name"), str)):
            raise typer.BadParameter(f'call {position} needs a string "name"', param_hint="--calls")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise typer.BadParameter(
                f'call {position}: "arguments" must be a JSON object', param_hint="--calls"
            )
        calls.append((call["name"], arguments))
    return calls


def _load_image(path: Path) -> np.ndarray:
    """A photo as an RGB array."""
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise typer.BadParameter(f"no such file: {path}", param_hint="--image")
    try:
        with Image.open(path) as picture:
            return np.asarray(picture.convert("RGB"))
    except (UnidentifiedImageError, OSError) as error:
        raise typer.BadParameter(f"{path} is not an image: {error}", param_hint="--image") from None


def _load_scene(scene: str) -> tuple[np.ndarray, str]:
    """The rendered image and scene spec JSON of a scene directory or an integer seed."""
    from spacetools.sim.layout import build_scene
    from spacetools.sim.world import load_scene

    try:
        if scene.lstrip("-").isdigit():
            world = build_scene(int(scene))
        elif Path(scene).is_dir():
            world = load_scene(scene)
        else:
            raise typer.BadParameter(
                f"{scene!r} is neither a scene directory nor an integer seed", param_hint="--scene"
            )
    except (FileNotFoundError, ValueError) as error:
        raise typer.BadParameter(str(error), param_hint="--scene") from error
    with world:
        return world.render().rgb, world.spec.model_dump_json()


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[int]:
    """Send everything written to fd 1 (pybullet's C banner, worker processes) to stderr; yield the real
    stdout fd so the JSON result stays the only thing on stdout."""
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        yield real_stdout
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)


async def _run_calls(
    deployments: list[ToolDeployment],
    image: np.ndarray,
    spec_json: str | None,
    calls: list[tuple[str, dict[str, Any]]],
    profile: str,
    seed: int,
) -> list[dict[str, Any]]:
    from spacetools.toolshed import Toolshed
    from spacetools.toolshed.toolsets import with_profile

    async with Toolshed(with_profile(deployments, profile), seed=seed) as shed:
        session = shed.open_session([image], [{"scene": spec_json}])
        results = []
        for name, arguments in calls:
            result = await session.call(name, arguments)
            results.append(
                {
                    "name": name,
                    "text": result.text,
                    "is_error": result.is_error,
                    "variables": sorted(result.variables),
                    "value": result.value,
                }
            )
        session.close()
    return results


@app.command("run")
def run(
    calls: Annotated[Path, typer.Option("--calls", help='JSON list of {"name": …, "arguments": {…}}.')],
    scene: Annotated[
        str | None, typer.Option("--scene", help="A scene directory (from scene.save) or an integer seed.")
    ] = None,
    image_path: Annotated[
        Path | None,
        typer.Option("--image", help="A photo (PNG, JPEG, …) for real backends (see --toolset-config)."),
    ] = None,
    profile: ProfileOption = DEFAULT_PROFILE,
    toolset: Annotated[str, typer.Option("--toolset", help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    toolset_config: Annotated[Path | None, toolset_config_option()] = None,
    seed: Annotated[int, seed_option("Toolshed seed (the same seed gives the same results).")] = 0,
) -> None:
    """Run tool calls in order in one session on a simulated scene or a photo; print the results as JSON."""
    if (scene is None) == (image_path is None):
        raise typer.BadParameter("give exactly one of --scene and --image", param_hint="--scene, --image")
    deployments = _deployments(toolset, toolset_config)
    photo = None if image_path is None else _load_image(image_path)
    call_list = _read_calls(calls)
    with _stdout_to_stderr() as stdout_fd:
        image, spec_json = (photo, None) if photo is not None else _load_scene(str(scene))
        results = asyncio.run(_run_calls(deployments, image, spec_json, call_list, profile, seed))
        os.write(stdout_fd, (json.dumps(results, indent=2, ensure_ascii=False) + "\n").encode())
