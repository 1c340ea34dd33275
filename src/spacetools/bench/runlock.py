"""One writer per run folder: an evaluation, a robot evaluation or a training stage holds its folder's lock
for its whole life, so a second run into the same ``--out`` is refused instead of mixing its rows in.

A folder that is not empty is written only when it is a run folder of ours (it holds ``run.lock``) with no
symlink at its top (`kit.ownfolders`): a run never deletes or writes through what it did not create.

The lock is an ``flock`` on ``run.lock`` in the folder, which names the holder's pid. The kernel drops it
when the holder dies (even with -9), so the lock of a dead run is simply taken over. The file stays after
the run: deleting it would let a waiting opener and a new creator both hold a lock. Within the flow of
control that holds a folder (a command that locks before it opens its TensorBoard writer, then trains),
taking it again is a no-op.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from spacetools.kit.lockfiles import open_lock_file
from spacetools.kit.ownfolders import check_own_folder

LOCK_FILE = "run.lock"
# The folders this flow of control holds (a context variable: a thread or task started inside the `with`
# block inherits it, a sibling run does not).
_held: ContextVar[frozenset[Path]] = ContextVar("held_run_folders", default=frozenset())


class RunFolderBusyError(ValueError):
    """Another live run writes into the folder."""


def make_run_folder(folder: Path) -> None:
    """Create the run folder (and its parents); one clear line when a part of the path is a file."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"--out {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(f"--out {folder}: a part of the path is a file, not a folder") from None


@contextlib.contextmanager
def run_folder_lock(folder: str | Path) -> Iterator[Path]:
    """Hold ``folder`` (created if missing) for the ``with`` block; ``RunFolderBusyError`` naming the
    holder's pid when another live process holds it."""
    folder = Path(folder)
    make_run_folder(folder)
    key = folder.resolve()
    if key in _held.get():
        yield folder
        return
    check_own_folder(folder, LOCK_FILE, "a spacetools run folder")  # the lock is the first file a run writes
    descriptor = open_lock_file(folder / LOCK_FILE)  # never through a symlink, even one planted just now
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunFolderBusyError(
                f"{folder} is in use by another run (pid {holder}); wait for it to end or use another --out"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
        token = _held.set(_held.get() | {key})
        try:
            yield folder
        finally:
            _held.reset(token)
    finally:
        os.close(descriptor)  # releases the lock
