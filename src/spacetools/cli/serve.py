"""`spacetools serve`: run a tool set as an HTTP Toolshed server, for rollouts in other processes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spacetools.cli.options import profile_option, toolset_deployments
from spacetools.toolshed import Toolshed
from spacetools.toolshed.toolsets import TOOLSET_NAMES


def serve(
    toolset: Annotated[str, typer.Option(help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Tool-set config YAML (backends, models, devices); overrides --toolset."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    profile: str = profile_option(),
    seed: Annotated[int, typer.Option(help="Toolshed seed (the same seed gives the same tool noise).")] = 0,
) -> None:
    """Serve a tool set over HTTP until interrupted (clients: `spacetools.toolshed.client.RemoteToolshed`)."""
    # Imported here so the rest of the command line does not pay for the web stack.
    import uvicorn

    from spacetools.toolshed.http import create_app

    deployments = toolset_deployments(toolset, config)
    app = create_app(Toolshed(deployments, profile=profile, seed=seed))
    uvicorn.run(app, host=host, port=port, log_level="info")
