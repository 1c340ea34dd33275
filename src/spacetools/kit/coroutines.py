"""Running an ``async def`` tool method from code without an event loop (a worker process, a Ray actor,
an instance's thread, a batch): to completion, on an event loop that the calling thread keeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

__all__ = ["run_to_completion"]


class _LoopOfThread:
    """The event loop on which one thread runs coroutines to completion, made on its first one and kept
    (a new loop per call, as `asyncio.run` makes, costs several times a call)."""

    __slots__ = ("loop",)

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        # Dropped with its thread's locals as the thread ends: close the loop's file descriptors.
        if not self.loop.is_running():
            self.loop.close()


_thread_locals = threading.local()


def run_to_completion(coroutine: Coroutine[Any, Any, Any], what: str) -> Any:
    """Run ``coroutine`` (the call of the tool method ``what``) on the calling thread's loop; its output.

    A `RuntimeError` when this thread already runs an event loop (there the caller awaits instead), or
    when the coroutine cancelled itself (nobody outside cancels a call run to completion)."""
    if _loop_running():
        coroutine.close()
        raise RuntimeError(
            f"{what} is async and this thread runs an event loop: await invoke_tool_method_async"
        )
    holder: _LoopOfThread | None = getattr(_thread_locals, "loop", None)
    if holder is None or holder.loop.is_closed():
        holder = _thread_locals.loop = _LoopOfThread()
    try:
        return holder.loop.run_until_complete(coroutine)
    except asyncio.CancelledError:
        raise RuntimeError(f"{what} was cancelled") from None


def _loop_running() -> bool:
    """Whether the calling thread is running an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
