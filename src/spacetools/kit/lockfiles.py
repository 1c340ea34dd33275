"""Lock files opened safely: never through a symlink, only as a regular file.

A folder received from elsewhere (an archive of a run folder, a shared cache) can hold a symlink where a
lock file goes; opening it the ordinary way would truncate or write into whatever it points at.
`open_lock_file` refuses that with one line naming the file and the way out.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path


class UnsafeLockFileError(ValueError):
    """A lock file's path is a symlink or not a regular file."""


def open_lock_file(path: Path) -> int:
    """A descriptor of the regular file at ``path`` (created when missing, never followed as a symlink)."""
    try:
        descriptor = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644
        )
    except OSError as error:
        if path.is_symlink():
            raise UnsafeLockFileError(
                f"{path} is a symlink, not a lock file; nothing was written: delete it or use another folder"
            ) from None
        raise UnsafeLockFileError(f"cannot open lock file {path}: {error.strerror or error}") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UnsafeLockFileError(
            f"{path} is not a regular file, so not a lock file; nothing was written: delete it or use "
            "another folder"
        )
    os.set_blocking(descriptor, True)
    return descriptor


@contextlib.contextmanager
def holding(path: Path) -> Iterator[int]:
    """Hold an exclusive ``flock`` on the lock file ``path`` for the ``with`` block, waiting for it."""
    descriptor = open_lock_file(path)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield descriptor
    finally:
        os.close(descriptor)  # closing drops the lock
