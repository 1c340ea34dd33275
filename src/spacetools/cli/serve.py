"""`spacetools serve`: run a tool set as an HTTP Toolshed server, for rollouts in other processes."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from spacetools.cli.options import profile_option
from spacetools.toolshed.limits import TOKEN_ENV, ServerLimits
from spacetools.toolshed.toolsets import TOOLSET_NAMES, get_toolset

_DEFAULTS = ServerLimits()
_LIMITS = "Limits"


def serve(
    toolset: Annotated[str, typer.Option(help=f"Tool set: {', '.join(TOOLSET_NAMES)}.")] = "v1",
    host: Annotated[
        str, typer.Option(help="Address to listen on (anything but loopback requires --token).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    profile: str = profile_option(),
    seed: Annotated[int, typer.Option(help="Toolshed seed (the same seed gives the same tool noise).")] = 0,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            show_envvar=True,
            help="Bearer token clients must send (at least 16 characters).",
        ),
    ] = None,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="Largest request body.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_body_bytes,
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
    max_calls_in_flight: Annotated[
        int, typer.Option(min=1, help="Tool calls queued or running at once.", rich_help_panel=_LIMITS)
    ] = _DEFAULTS.max_calls_in_flight,
    max_queue_wait_s: Annotated[
        float,
        typer.Option(min=0.001, help="Longest a call waits for a free instance.", rich_help_panel=_LIMITS),
    ] = _DEFAULTS.max_queue_wait_s,
) -> None:
    """Serve a tool set over HTTP until interrupted (clients: `spacetools.toolshed.client.RemoteToolshed`)."""
    # Imported here so the rest of the command line does not pay for the web stack.
    import uvicorn

    from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for

    try:
        deployments = get_toolset(toolset)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--toolset") from error
    try:
        limits = ServerLimits(
            max_body_bytes=max_body_bytes,
            max_image_pixels=max_image_pixels,
            max_sessions=max_sessions,
            max_session_bytes=max_session_bytes,
            max_total_bytes=max_total_bytes,
            session_ttl_s=session_ttl_s,
            max_calls_in_flight=max_calls_in_flight,
            max_queue_wait_s=max_queue_wait_s,
            token=token,
        )
    except ValidationError as error:
        first = error.errors()[0]
        raise typer.BadParameter(first["msg"], param_hint=f"--{first['loc'][0]}".replace("_", "-")) from None
    try:
        limits.check_exposure(host)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--host") from error
    return_freed_memory()
    app = create_app(toolshed_for(deployments, limits, profile=profile, seed=seed), limits)
    uvicorn.run(app, host=host, port=port, log_level="info")
