"""Which optional extra (pyproject's ``[project.optional-dependencies]``) brings a missing module.

A command that needs an extra the install lacks (``make demo`` installs the core only) ends in one line
that names the extra and how to install it, instead of a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

#: Top-level module -> the extra that installs it (the smallest one that does).
MODULE_EXTRAS: dict[str, str] = {
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "httptools", "prometheus_client"), "server"),
    "mcp": "integrations",
    **dict.fromkeys(("torch", "transformers", "gguf", "accelerate", "safetensors", "tokenizers"), "hf"),
    "openai": "openai",
    "ray": "ray",
    **dict.fromkeys(("peft", "matplotlib", "tensorboard", "omegaconf"), "train"),
    "wandb": "wandb",
}


#: What a command that needs an extra checks before it starts (training needs the train extra whole,
#: not only the part it would import first).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "server": ("fastapi", "uvicorn"),
    "integrations": ("fastapi", "uvicorn", "mcp"),
    "hf": ("torch", "transformers"),
    "openai": ("openai",),
    "ray": ("ray",),
    "train": ("torch", "transformers", "peft", "omegaconf", "matplotlib"),
    "wandb": ("wandb",),
}


class MissingExtraError(ModuleNotFoundError):
    """Modules of the extras a command needs are not installed."""

    def __init__(self, modules: Sequence[str], extras: Sequence[str]) -> None:
        super().__init__(f"{', '.join(modules)} not installed", name=modules[0])
        self.modules = tuple(modules)
        self.extras = tuple(extras)


def require_extra(*extras: str) -> None:
    """Raise :class:`MissingExtraError` naming every one of ``extras`` with a module not installed (checked,
    not imported), so that one install command brings all that the command needs, not the first of them."""
    missing: dict[str, str] = {}  # extra -> its first module not installed (the one the line names)
    for extra in extras:
        absent = [module for module in EXTRA_MODULES[extra] if not _installed(module)]
        if absent:
            missing[extra] = absent[0]
    if missing:
        raise MissingExtraError(list(dict.fromkeys(missing.values())), list(missing))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module entry without a spec
        return False


def command_words(args: Sequence[str]) -> str:
    """``spacetools serve`` for ``serve --mcp …``: the command and sub-command names given."""
    words = []
    for arg in args:
        if arg.startswith("-"):
            break
        words.append(arg)
    return " ".join(["spacetools", *words[:2]])


def missing_extra_line(error: ModuleNotFoundError, args: Sequence[str]) -> str | None:
    """The one error line for modules extras would install; None for any other missing module."""
    if isinstance(error, MissingExtraError):
        modules, extras = error.modules, error.extras
    else:
        module = (error.name or "").split(".")[0]
        if module not in MODULE_EXTRAS:
            return None
        modules, extras = (module,), (MODULE_EXTRAS[module],)
    verb = "is" if len(modules) == 1 else "are"
    noun = f"the {extras[0]} extra" if len(extras) == 1 else f"the {' and '.join(extras)} extras"
    return (
        f"Error: {', '.join(modules)} {verb} not installed; {command_words(args)} needs {noun}: "
        f'pip install -e ".[{",".join(extras)}]" (or make install)'
    )
