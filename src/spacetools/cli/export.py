"""`spacetools export`: configs for other frameworks (today: verl's trainer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spacetools.cli.options import check_out_folder
from spacetools.toolshed.toolsets import TOOLSET_NAMES, get_toolset

app = typer.Typer(no_args_is_help=True)


@app.command("verl")
def verl(
    out: Annotated[Path, typer.Option(help="Folder to write the files into.")],
    url: Annotated[
        str, typer.Option(help="The Toolshed server the trainer's tools call (`spacetools serve`).")
    ] = "http://127.0.0.1:8765",
    toolset: Annotated[str, typer.Option(help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    data: Annotated[
        Path | None,
        typer.Option(help="A parquet data set (file or folder) to copy with the tools' create arguments."),
    ] = None,
) -> None:
    """Write verl's tool config, the multi-turn rollout settings and the reward function path."""
    try:
        get_toolset(toolset)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--toolset") from error
    if not url.startswith(("http://", "https://")):
        raise typer.BadParameter(f"expected an http(s) URL, got {url!r}", param_hint="--url")
    if data is not None and not data.exists():
        raise typer.BadParameter(f"{data} does not exist", param_hint="--data")
    from spacetools.integrations.verl.export import TOOL_CONFIG_FILE, export_verl

    check_out_folder(out, own=(TOOL_CONFIG_FILE, "a verl export folder"))
    _warn_if_silent(url)

    try:
        written = export_verl(toolset, url.rstrip("/"), out, data)
    except (FileNotFoundError, ValueError) as error:
        raise typer.BadParameter(str(error), param_hint="--data") from error
    typer.echo(f"tool config    {written.tool_config}")
    typer.echo(f"rollout config {written.rollout}")
    typer.echo(f"overrides      {written.overrides}")
    files = f"data.train_files=[{','.join(str(path) for path in written.data)}] " if written.data else ""
    typer.echo(
        f"train with     python -m verl.trainer.main_ppo $(cat {written.overrides}) {files}"
        "<your data and model>"
    )


def _warn_if_silent(url: str) -> None:
    """Warn (the export still runs) when no Toolshed answers at ``url``: the trainer's first tool call
    would fail there, long after the launch."""
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=3.0).raise_for_status()
    except httpx.HTTPError as error:
        typer.echo(
            f"Warning: no Toolshed answers at {url} ({type(error).__name__}: {error}); "
            "start it with `spacetools serve` before training.",
            err=True,
        )
