"""Starting a spawned or forkserver process without running the user's main script again in it.

Such a process imports ``__main__`` again (as ``__mp_main__``) before it takes its target, so a script
without an ``if __name__ == "__main__":`` guard would run all its work again in every child (and fail
there). A child whose target lives in a package needs nothing of ``__main__``: while it starts, the main
module's file and spec are hidden (:func:`main_script_hidden`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["main_script_hidden"]


@contextlib.contextmanager
def main_script_hidden() -> Iterator[None]:
    """Hide the main module's file and spec from the processes started inside the block."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, Any] = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None  # multiprocessing reads it directly: None, not absent
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)
