"""`spacetools serve`: run a tool set as an HTTP Toolshed server, or as an MCP server (`--mcp`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError

from spacetools.cli.extras import require_extra
from spacetools.cli.options import ProfileOption, toolset_config_option, toolset_deployments
from spacetools.toolshed import Toolshed
from spacetools.toolshed.connection import DEFAULT_PROFILE
from spacetools.toolshed.limits import TOKEN_ENV, ServerLimits
from spacetools.toolshed.toolsets import TOOLSET_NAMES, on_backend, with_profile

MCP_TRANSPORTS = ("stdio", "streamable-http")


def with_limit_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with a `--<limit>` option for each `ServerLimits` field but the token (an option of its
    own, read from the environment too): type, default and help come from the field, so a new limit
    gets its option; `command` receives their values as one dict, `limit_options`."""
    fields = {name: field for name, field in ServerLimits.model_fields.items() if name != "token"}
    options = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=Annotated[
                field.annotation, typer.Option(help=field.description, rich_help_panel="Limits")
            ],
        )
        for name, field in fields.items()
    ]
    # Evaluated annotations: typer reads the `typer.Option`s inside them.
    signature = inspect.signature(command, eval_str=True)
    own = [parameter for parameter in signature.parameters.values() if parameter.name != "limit_options"]

    @functools.wraps(command)
    def command_with_limits(**arguments: Any) -> None:
        limit_options = {name: arguments.pop(name) for name in fields}
        command(**arguments, limit_options=limit_options)

    # typer reads the parameters from `__signature__` (inspect's protocol, which mypy does not know).
    command_with_limits.__signature__ = signature.replace(parameters=[*own, *options])  # type: ignore[attr-defined]
    return command_with_limits


@with_limit_options
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
    *,
    limit_options: dict[str, Any],
) -> None:
    """Serve a tool set over HTTP until interrupted (clients: `spacetools.toolshed.client.RemoteToolshed`).

    With `--mcp`, serve it to MCP clients instead, over stdio (a client starts the server) or
    streamable HTTP.
    """
    # Every extra this command line needs, in one line: one install, not one per missing extra.
    require_extra("integrations" if mcp else "server", *(["ray"] if backend == "ray" else []))
    deployments = with_profile(toolset_deployments(toolset, toolset_config), profile)
    if mcp_transport not in MCP_TRANSPORTS:
        raise typer.BadParameter(
            f"{mcp_transport!r} is not one of {', '.join(MCP_TRANSPORTS)}", param_hint="--mcp-transport"
        )
    try:
        limits = ServerLimits(**limit_options, token=token)
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

    from spacetools.toolshed.slow_clients import server_options

    app = create_app(toolshed_for(deployments, limits, seed=seed), limits)
    uvicorn.run(app, host=host, port=port, log_level="info", **server_options(limits))


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

    from spacetools.toolshed.slow_clients import server_options

    shorten_log_lines(logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn.access"))
    app = streamable_http_app(server, limits, host)
    uvicorn.run(app, host=host, port=port, log_level="info", **server_options(limits))
