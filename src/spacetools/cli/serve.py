"""`spacetools serve`: run a tool set as an HTTP Toolshed server, for rollouts in other processes."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from spacetools.cli.options import profile_option
from spacetools.toolshed import Toolshed
from spacetools.toolshed.toolsets import TOOLSET_NAMES, get_toolset, on_backend


def serve(
    toolset: Annotated[str, typer.Option(help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    profile: str = profile_option(),
    seed: Annotated[int, typer.Option(help="Toolshed seed (the same seed gives the same tool noise).")] = 0,
    backend: Annotated[
        Literal["process", "ray"] | None,
        typer.Option(help="Run the tool set's worker tools as processes or Ray actors (default: as listed)."),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help='Ray cluster to join with --backend ray: "auto", "host:port" (default: a local Ray).'
        ),
    ] = None,
) -> None:
    """Serve a tool set over HTTP until interrupted (clients: `spacetools.toolshed.client.RemoteToolshed`)."""
    # Imported here so the rest of the command line does not pay for the web stack.
    import uvicorn

    from spacetools.toolshed.http import create_app

    try:
        deployments = get_toolset(toolset)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--toolset") from error
    if address is not None and backend != "ray":
        raise typer.BadParameter("--address only applies with --backend ray", param_hint="--address")
    if backend is not None:
        deployments = on_backend(deployments, backend)
    if backend == "ray":
        from spacetools.toolshed.backends.ray import connect

        try:
            connect(address)
        except Exception as error:  # Ray raises ConnectionError, ValueError, … for an unreachable cluster
            raise typer.BadParameter(
                f"cannot join the Ray cluster: {error}", param_hint="--address"
            ) from error
    app = create_app(Toolshed(deployments, profile=profile, seed=seed))
    uvicorn.run(app, host=host, port=port, log_level="info")
