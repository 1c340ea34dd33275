"""`spacetools serve`: run a tool set as an HTTP Toolshed server, or as an MCP server (`--mcp`)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from spacetools.cli.options import profile_option
from spacetools.toolshed import Toolshed
from spacetools.toolshed.toolsets import TOOLSET_NAMES, get_toolset

MCP_TRANSPORTS = ("stdio", "streamable-http")


def serve(
    toolset: Annotated[str, typer.Option(help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    profile: str = profile_option(),
    seed: Annotated[int, typer.Option(help="Toolshed seed (the same seed gives the same tool noise).")] = 0,
    mcp: Annotated[bool, typer.Option("--mcp", help="Serve the tools over MCP instead.")] = False,
    mcp_transport: Annotated[
        str,
        typer.Option(help=f"MCP transport: {', '.join(MCP_TRANSPORTS)} (at http://HOST:PORT/mcp)."),
    ] = "stdio",
) -> None:
    """Serve a tool set over HTTP until interrupted (clients: `spacetools.toolshed.client.RemoteToolshed`).

    With `--mcp`, serve it to MCP clients instead, over stdio (a client starts the server) or
    streamable HTTP.
    """
    try:
        deployments = get_toolset(toolset)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--toolset") from error
    if mcp_transport not in MCP_TRANSPORTS:
        raise typer.BadParameter(
            f"{mcp_transport!r} is not one of {', '.join(MCP_TRANSPORTS)}", param_hint="--mcp-transport"
        )
    toolshed = Toolshed(deployments, profile=profile, seed=seed)
    if mcp:
        _serve_mcp(toolshed, "stdio" if mcp_transport == "stdio" else "streamable-http", host, port)
        return
    # Imported here so the rest of the command line does not pay for the web stack.
    import uvicorn

    from spacetools.toolshed.http import create_app

    uvicorn.run(create_app(toolshed), host=host, port=port, log_level="info")


def _serve_mcp(
    toolshed: Toolshed, transport: Literal["stdio", "streamable-http"], host: str, port: int
) -> None:
    from spacetools.integrations.mcp.server import create_mcp_server

    # Over stdio the client runs the server on its own machine, so image file paths are its own.
    server = create_mcp_server(toolshed, read_local_files=transport == "stdio")
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
