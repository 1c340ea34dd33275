"""`spacetools serve`: run a tool set as an HTTP Toolshed server, or as an MCP server (`--mcp`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import ValidationError

from spacetools.cli.options import ProfileOption, toolset_config_option, toolset_deployments
from spacetools.toolshed import Toolshed
from spacetools.toolshed.connection import DEFAULT_PROFILE
from spacetools.toolshed.limits import TOKEN_ENV, ServerLimits
from spacetools.toolshed.toolsets import TOOLSET_NAMES, on_backend, with_profile

_DEFAULTS = ServerLimits()
_LIMITS = "Limits"
MCP_TRANSPORTS = ("stdio", "streamable-http")


def serve(
    toolset: Annotated[str, typer.Option(help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    toolset_config: Annotated[Path | None, toolset_config_option()] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (anything but loopback requires --token).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    profile: ProfileOption = DEFAULT_PROFILE,
    seed: Annotated[int, typer.Option(help="Toolshed seed (the same seed gives the same tool noise).")] = 0,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            show_envvar=True,
            help="Bearer token clients must send, over HTTP and MCP streamable HTTP (at least 16 characters).",
        ),
    ] = None,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="Largest request body.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_body_bytes,
    max_call_body_bytes: Annotated[
        int, typer.Option(min=1, help="Largest body of a turn's tool calls.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_call_body_bytes,
    call_body_timeout_s: Annotated[
        float,
        typer.Option(
            min=0.001, help="Longest an admitted call's body may take to arrive.", rich_help_panel=_LIMITS
        ),
    ] = _DEFAULTS.call_body_timeout_s,
    max_image_pixels: Annotated[
        int, typer.Option(min=1, help="Largest image (width x height).", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_image_pixels,
    max_sessions: Annotated[
        int, typer.Option(min=1, help="Open sessions at once.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_sessions,
    max_session_bytes: Annotated[
        int, typer.Option(min=1, help="Images and variables per session.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_session_bytes,
    max_total_bytes: Annotated[
        int, typer.Option(min=1, help="Images and variables of all sessions.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_total_bytes,
    session_ttl_s: Annotated[
        float, typer.Option(min=0.001, help="Idle seconds before a session expires.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.session_ttl_s,
    max_connections: Annotated[
        int,
        typer.Option(
            min=1, help="Open connections (past them every request gets a 503).", rich_help_panel=_LIMITS
        ),
    ] = _DEFAULTS.max_connections,
    max_calls_in_flight: Annotated[
        int, typer.Option(min=1, help="Tool calls queued or running at once.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_calls_in_flight,
    max_queue_wait_s: Annotated[
        float,
        typer.Option(min=0.001, help="Longest a call waits for a free instance.", rich_help_panel=_LIMITS),
    ] = _DEFAULTS.max_queue_wait_s,
    mcp: Annotated[bool, typer.Option("--mcp", help="Serve the tools over MCP instead.")] = False,
    mcp_transport: Annotated[
        str,
        typer.Option(help=f"MCP transport: {', '.join(MCP_TRANSPORTS)} (at http://HOST:PORT/mcp)."),
    ] = "stdio",
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
    """Serve a tool set over HTTP until interrupted (clients: `spacetools.toolshed.client.RemoteToolshed`).

    With `--mcp`, serve it to MCP clients instead, over stdio (a client starts the server) or
    streamable HTTP.
    """
    deployments = with_profile(toolset_deployments(toolset, toolset_config), profile)
    if mcp_transport not in MCP_TRANSPORTS:
        raise typer.BadParameter(
            f"{mcp_transport!r} is not one of {', '.join(MCP_TRANSPORTS)}", param_hint="--mcp-transport"
        )
    try:
        limits = ServerLimits(
            max_body_bytes=max_body_bytes,
            max_call_body_bytes=max_call_body_bytes,
            call_body_timeout_s=call_body_timeout_s,
            max_image_pixels=max_image_pixels,
            max_sessions=max_sessions,
            max_session_bytes=max_session_bytes,
            max_total_bytes=max_total_bytes,
            session_ttl_s=session_ttl_s,
            max_connections=max_connections,
            max_calls_in_flight=max_calls_in_flight,
            max_queue_wait_s=max_queue_wait_s,
            token=token,
        )
    except ValidationError as error:
        first = error.errors()[0]
        raise typer.BadParameter(first["msg"], param_hint=f"--{first['loc'][0]}".replace("_", "-")) from None
    if address is not None and backend != "ray":
        raise typer.BadParameter("--address only applies with --backend ray", param_hint="--address")
    if backend is not None:
        deployments = on_backend(deployments, backend)
    if backend == "ray":
        from spacetools.toolshed.backends.ray import connect

        try:
            connect(address)
        except ModuleNotFoundError:  # Ray not installed: the one line of cli.extras
            raise
        except Exception as error:  # Ray raises ConnectionError, ValueError, … for an unreachable cluster
            raise typer.BadParameter(
                f"cannot join the Ray cluster: {error}", param_hint="--address"
            ) from error
    # Imported here so the rest of the command line does not pay for the web stack.
    from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for

    if not mcp or mcp_transport == "streamable-http":  # stdio: the client runs the server itself
        try:
            limits.check_exposure(host)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--host") from error
    return_freed_memory()
    if mcp:
        toolshed = toolshed_for(deployments, limits, seed=seed)
        _serve_mcp(toolshed, limits, "stdio" if mcp_transport == "stdio" else "streamable-http", host, port)
        return
    import uvicorn

    from spacetools.toolshed.admission import server_options

    app = create_app(toolshed_for(deployments, limits, seed=seed), limits)
    uvicorn.run(app, host=host, port=port, log_level="info", **server_options(limits.max_connections))


def _serve_mcp(
    toolshed: Toolshed,
    limits: ServerLimits,
    transport: Literal["stdio", "streamable-http"],
    host: str,
    port: int,
) -> None:
    import logging

    from spacetools.integrations.mcp.server import create_mcp_server, shorten_log_lines, streamable_http_app

    # Over stdio the client runs the server on its own machine, so image file paths are its own.
    server = create_mcp_server(toolshed, read_local_files=transport == "stdio", limits=limits)
    if transport == "stdio":
        shorten_log_lines()
        server.run("stdio")
        return
    import uvicorn

    from spacetools.toolshed.admission import server_options

    shorten_log_lines(logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn.access"))
    app = streamable_http_app(server, limits, host)
    uvicorn.run(app, host=host, port=port, log_level="info", **server_options(limits.max_connections))
