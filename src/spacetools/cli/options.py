"""Options shared by several commands, validated in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from spacetools.tools.realism import PROFILE_NAMES, get_profile


def _check_profile(value: str) -> str:
    try:
        get_profile(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    return value


def profile_option(default: str = "realistic") -> Any:
    """`--profile`: the realism profile of the simulated tools, checked before the command runs."""
    return typer.Option(
        default, "--profile", callback=_check_profile, help=f"Tool realism: {', '.join(PROFILE_NAMES)}."
    )


def toolset_deployments(toolset: str, config: Path | None, config_option: str = "--config") -> Any:
    """The deployments of a tool-set config file when given, else of the named tool set."""
    from spacetools.toolshed.config import load_toolset_config
    from spacetools.toolshed.toolsets import get_toolset

    if config is not None:
        try:
            return load_toolset_config(config)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint=config_option) from None
    try:
        return get_toolset(toolset)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--toolset") from None
