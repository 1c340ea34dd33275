"""Folders a command writes into: never one it did not create, never through a symlink planted in one.

Every command that writes a folder (`eval`, `robot eval`, the training stages, `export`, `demo`) either
gets a new or empty folder, or one it wrote before, which it knows by a file of its own (the run lock,
the exported tool config). Anything else is refused in one line naming the folder and the way out, so a
mistyped `--out ~/models` deletes and truncates nothing. A symlink at the top of a folder of ours (a
folder received as an archive can plant one where a file is written) is refused too: writing through it
would truncate whatever it points at.
"""

from __future__ import annotations

from pathlib import Path


class ForeignFolderError(ValueError):
    """The folder is not one this command wrote, or holds a symlink where it writes its files."""


def check_own_folder(folder: Path, marker: str, what: str, option: str = "--out") -> None:
    """Refuse ``folder`` unless it is missing, empty, or holds ``marker`` (a file or folder the command
    writes first, not a symlink) and no symlink at its top. ``what`` names such a folder in the message."""
    if not folder.is_dir():
        return
    entries = sorted(folder.iterdir())
    own = folder / marker
    if entries and not own.is_symlink() and not own.exists():
        raise ForeignFolderError(
            f"{folder} is not empty and is not {what} (it has no {marker}); nothing in it was touched: "
            f"give a new or empty {option}"
        )
    for entry in entries:
        if entry.is_symlink():
            raise ForeignFolderError(
                f"{entry} is a symlink, which {what} never holds; nothing was written: delete it or give "
                f"another {option}"
            )
