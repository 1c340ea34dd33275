"""`spacetools env`: what this install is made of, to paste into a bug report (as `trl env` does)."""

from __future__ import annotations

import importlib.util
import json
from typing import Annotated

import typer

from spacetools.cli.extras import EXTRA_MODULES
from spacetools.kit.versions import versions


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def env(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of lines.")] = False,
) -> None:
    """Print the versions of spacetools, Python and the libraries, the git commit and the extras installed."""
    report: dict[str, object] = dict(versions())
    report["extras"] = {
        extra: all(_installed(module) for module in modules) for extra, modules in EXTRA_MODULES.items()
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for name, value in report.items():
        if name == "extras":
            continue
        typer.echo(f"- {name}: {value if value is not None else 'not installed'}")
    extras = report["extras"]
    assert isinstance(extras, dict)
    installed = ", ".join(extra for extra, present in extras.items() if present) or "none"
    typer.echo(f"- extras installed: {installed}")
