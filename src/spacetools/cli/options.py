"""Options shared by several commands, validated in one place."""

from __future__ import annotations

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
