"""The one place the project imports pybullet, without the build-time banner it prints.

pybullet's C module prints "pybullet build time: ..." when it is imported, once in every process (each
evaluation worker showed it again), on standard output (on standard error when standard output is a
terminal). Every module that needs pybullet imports it from here:
`from spacetools.sim.bullet import pybullet, pybullet_data`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (a banner printed into a pipe waits there, not on its fd)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _output_silenced() -> Iterator[None]:
    """Send file descriptors 1 and 2 to the null device for the duration (C-level writes included).

    pybullet writes its banner to standard output, or to standard error when standard output is a
    terminal, so both are silenced (only for the import, which reports failures as exceptions).
    """
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError, AttributeError):  # no usable standard streams (closed or replaced)
        yield
        return
    _flush_c_stdio()  # what was written before goes where it was meant to
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
        yield
        _flush_c_stdio()  # the banner, still buffered, goes to the null device
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


with _output_silenced():
    import pybullet
import pybullet_data  # noqa: E402 (after the banner is silenced)

__all__ = ["pybullet", "pybullet_data"]
