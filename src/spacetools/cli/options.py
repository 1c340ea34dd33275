"""Options shared by several commands, validated in one place: a bad value is one clear line, exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from spacetools.bench.runlock import LOCK_FILE
from spacetools.kit.ownfolders import ForeignFolderError, check_own_folder
from spacetools.sim.realism import PROFILE_NAMES, get_profile
from spacetools.toolshed.connection import DEFAULT_PROFILE


def _check_profile(value: str) -> str:
    try:
        get_profile(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    return value


def _profile_help() -> str:
    return f"Tool realism: {', '.join(PROFILE_NAMES)} (every command defaults to {DEFAULT_PROFILE})."


ProfileOption = Annotated[str, typer.Option("--profile", callback=_check_profile, help=_profile_help())]
"""`--profile`: the realism profile of the simulated tools, checked before the command runs (its default is
`DEFAULT_PROFILE` everywhere)."""

TOOLSET_CONFIG_HELP = "Tool-set config YAML (backends, models, devices)"


def toolset_config_option(help: str = "overrides --toolset") -> Any:
    """`--toolset-config`: a tool-set config YAML, the one name every command gives this file."""
    return typer.Option("--toolset-config", help=f"{TOOLSET_CONFIG_HELP}; {help}.")


def seed_option(help: str) -> Any:
    """`--seed`: a non-negative integer (the Toolshed and the generator take seeds from 0 up)."""
    return typer.Option("--seed", min=0, help=help)


RUN_FOLDER = (LOCK_FILE, "a spacetools run folder")
"""The `own` of `check_out_folder` for the commands that write a run folder (the lock is written first)."""


def check_out_folder(path: Path, param_hint: str = "--out", *, own: tuple[str, str] | None = None) -> Path:
    """``path`` as a folder to write into: it, or the nearest part of it that exists, must be a folder.
    ``own``: (the file the command writes first, what such a folder is): a folder that is not empty must
    hold it, and no symlink at its top (`kit.ownfolders`)."""
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                where = "is a file" if part == path else f"is under {part}, which is a file"
                raise typer.BadParameter(f"{path} {where}, not a folder", param_hint=param_hint)
            break
    if own is not None:
        try:
            check_own_folder(path, *own, option=param_hint)
        except ForeignFolderError as error:
            raise typer.BadParameter(str(error), param_hint=param_hint) from None
    return path


def check_out_file(path: Path, param_hint: str = "--out") -> Path:
    """``path`` as a file to write (a file the user names is replaced, as `cp` does), never through a
    symlink, which would truncate whatever it points at."""
    if path.is_symlink():
        raise typer.BadParameter(
            f"{path} is a symlink; nothing was written through it: delete it or give another {param_hint}",
            param_hint=param_hint,
        )
    return path


def read_text_file(path: Path, param_hint: str) -> str:
    """The UTF-8 text of a file the user named, or one clear line saying why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise typer.BadParameter(
            f"{path} is not UTF-8 text ({error.reason} at byte {error.start})", param_hint=param_hint
        ) from None
    except IsADirectoryError:
        raise typer.BadParameter(f"{path} is a folder, not a file", param_hint=param_hint) from None
    except OSError as error:
        raise typer.BadParameter(
            f"cannot read {path}: {error.strerror or error}", param_hint=param_hint
        ) from None


def comma_list(values: list[str] | None) -> list[str] | None:
    """`--bench a,b --bench c` → [a, b, c]."""
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def key_values(values: list[str] | None, param_hint: str = "--option") -> dict[str, Any]:
    """`key=value` pairs; values are read as JSON when they parse (numbers, booleans, objects)."""
    options: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint=param_hint)
        try:
            options[key.strip()] = json.loads(raw, parse_float=_finite, parse_constant=_finite)
        except json.JSONDecodeError:
            options[key.strip()] = raw
        except ValueError as error:
            raise typer.BadParameter(f"{item!r}: {error}", param_hint=param_hint) from None
    return options


def _finite(text: str) -> float:
    """A JSON number that is finite (`1e999`, `Infinity` and `NaN` are refused, as in every config)."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is not a finite number")
    return number


def toolset_deployments(toolset: str, config: Path | None, config_option: str = "--toolset-config") -> Any:
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


def check_device(device: str, param_hint: str) -> str:
    """A torch device present on this machine (checked before any model loads), or one clear line."""
    from spacetools.kit.loading import torch_device

    try:
        torch_device(device)
    except RuntimeError as error:  # CUDA absent, too few GPUs, or not a device name at all
        raise typer.BadParameter(" ".join(str(error).split()), param_hint=param_hint) from None
    return device


def check_model_folder(path: Path, param_hint: str) -> Path:
    """A saved model's (or LoRA adapter's) folder whose config is a JSON object (an empty or cut-short one
    would fail deep inside transformers)."""
    from spacetools.kit.loading import check_model_folder as check

    try:
        check(path)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=param_hint) from None
    return path
