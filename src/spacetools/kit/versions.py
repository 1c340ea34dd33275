"""What a run was made with: the package, Python, the libraries that change results, and the git commit.

Read from the installed distributions' metadata (nothing is imported, so asking costs no torch import)
and from git where the package runs from a checkout. `run.json` records it; `spacetools env` prints it.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

#: The distributions whose versions change what a run computes or how it runs, core and extras.
LIBRARIES = (
    "numpy", "scipy", "pybullet", "pydantic", "pillow", "torch", "transformers", "peft", "accelerate",
    "openai", "fastapi", "uvicorn", "mcp", "ray", "omegaconf", "wandb",
)  # fmt: skip


def library_version(name: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit(folder: Path | None = None) -> str | None:
    """The commit of the checkout the package runs from (with ``-dirty`` when it has local changes),
    or None for an installed wheel or without git."""
    where = folder or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=where, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return commit or None


def versions() -> dict[str, str | None]:
    """spacetools, Python, platform, git commit and each library's version (None: not installed)."""
    return {
        "spacetools": library_version("spacetools"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
        **{name: library_version(name) for name in LIBRARIES},
    }
