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
    """A module of an extra the command needs is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(f"{module} is not installed", name=module)
        self.extra = extra


def require_extra(extra: str) -> None:
    """Raise :class:`MissingExtraError` when a module of ``extra`` is not installed (checked, not imported)."""
    for module in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module entry without a spec
            found = False
        if not found:
            raise MissingExtraError(module, extra)


def command_words(args: Sequence[str]) -> str:
    """``spacetools serve`` for ``serve --mcp …``: the command and sub-command names given."""
    words = []
    for arg in args:
        if arg.startswith("-"):
            break
        words.append(arg)
    return " ".join(["spacetools", *words[:2]])


def missing_extra_line(error: ModuleNotFoundError, args: Sequence[str]) -> str | None:
    """The one error line for a module an extra would install; None for any other missing module."""
    module = (error.name or "").split(".")[0]
    extra = error.extra if isinstance(error, MissingExtraError) else MODULE_EXTRAS.get(module)
    if extra is None:
        return None
    return (
        f"Error: {module} is not installed; {command_words(args)} needs the {extra} extra: "
        f'pip install -e ".[{extra}]" (or make install)'
    )
