"""In-process backend: each instance is a tool object served by its own daemon thread, or, for its
``async def`` methods, on the server's event loop.

For light tools. As FastAPI runs its endpoints, an instance runs the tool's ``async def`` methods on the
server's event loop itself (no thread hop: the cheapest call there is, for I/O-bound or very light work
that must never block the loop), and its plain methods, batches and unknown methods on its thread. The
router gives an instance one call at a time, so the tool object is never used from two threads at once;
for the same reason a tool with async methods frees a closed session (`Tool.release_session`) on the
loop too, after the call in progress. The router's timeout cancels an async call at its next `await`,
and the router replaces the instance.

A hung call on the thread cannot be interrupted, so `kill()` abandons the thread (it exits once its call
returns, and its result is dropped) and the router starts a fresh instance. Abandoned threads still hold
their memory and may hold the interpreter lock, so they are bounded: while `MAX_HUNG_THREADS` threads of
a tool are stuck in hung calls, no new instance of it starts (its setup fails, the router retries with
back-off and the tool reads as unavailable) until one returns. A tool whose calls can hang belongs on
the process backend, where a hung call's worker is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from typing import Any

from spacetools.kit.batched_methods import invoke_call
from spacetools.kit.definition import (
    Tool,
    ToolContext,
    ToolResult,
    invoke_tool_method_async,
    release_tool_session,
    releases_sessions,
    tool_methods,
)
from spacetools.toolshed.backends.base import SetupFailed
from spacetools.toolshed.deployment import resolve_tool_class

__all__ = ["MAX_HUNG_THREADS", "InProcessInstance"]

#: Threads of one tool (by name, in this process) left running in hung calls before no new instance
#: of it may start.
MAX_HUNG_THREADS = 4
_hung_threads: dict[str, set[threading.Thread]] = {}

_Request = tuple[str, dict[str, Any], ToolContext, "asyncio.Future[ToolResult]"]
_Release = str
"""A session id whose release the thread passes to the tool, in turn with the calls."""


class InProcessInstance:
    """A tool instance running on a dedicated thread of the server process (its async methods on the
    server's event loop)."""

    def __init__(self, tool: type[Tool] | str, config: dict[str, Any], name: str) -> None:
        self._tool_ref = tool
        self._config = dict(config)
        self._name = name
        self._requests: queue.SimpleQueue[_Request | _Release | None] = queue.SimpleQueue()
        # Plain flags, not `Thread.is_alive()` and an `Event`: the router reads `alive` twice per call.
        self._killed = False
        self._serving = False  # the thread runs (from its start until it returns)
        self._thread: threading.Thread | None = None
        self._busy = False  # a call is running on the thread
        tool_cls = resolve_tool_class(tool)
        self._releases = releases_sessions(tool_cls)
        #: Public names of the tool's `async def` methods: they run on the event loop.
        self._async_methods = frozenset(name for name, m in tool_methods(tool_cls).items() if m.is_async)
        # A tool with async methods frees sessions on the loop, after the call in progress (if any).
        self._releases_on_loop = self._releases and bool(self._async_methods)
        self._in_call = False  # a call runs (on the loop or the thread); only with _releases_on_loop
        self._pending_releases: deque[str] = deque()
        self._tool: Tool | None = None  # constructed and set up by the thread

    @property
    def alive(self) -> bool:
        """True while the serving thread runs and the instance was not killed."""
        return self._serving and not self._killed

    @property
    def pid(self) -> int | None:
        """None: the tool shares the server's process."""
        return None

    async def start(self) -> None:
        """Start the thread, which constructs the tool and runs `setup()`; `SetupFailed` while
        `MAX_HUNG_THREADS` threads of the tool are stuck in hung calls."""
        hung = _hung_threads.setdefault(self._name, set())
        hung.difference_update([thread for thread in hung if not thread.is_alive()])
        if len(hung) >= MAX_HUNG_THREADS:
            raise SetupFailed(
                f"{self._name}: {len(hung)} in-process threads are still stuck in calls that timed out; "
                "no new instance starts until one returns (serve a tool that can hang on the process backend)"
            )
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        # Daemon: a thread stuck in a hung tool must not keep the interpreter from exiting.
        self._thread = threading.Thread(
            target=self._serve, args=(loop, ready), name=f"toolshed-{self._name}", daemon=True
        )
        self._serving = True
        self._thread.start()
        await ready

    async def invoke(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run an async method on the event loop; hand any other call to the thread and wait for its
        result."""
        if not self._releases_on_loop:
            if method in self._async_methods:
                assert self._tool is not None, "start() comes first"
                return await invoke_tool_method_async(self._tool, method, kwargs, ctx)
            return await self._on_thread(method, kwargs, ctx)
        self._in_call = True
        if method in self._async_methods:
            assert self._tool is not None, "start() comes first"
            result = await invoke_tool_method_async(self._tool, method, kwargs, ctx)
        else:
            result = await self._on_thread(method, kwargs, ctx)
        # Only after a call that ended: a cancelled one may still run on the thread, and its instance
        # is replaced (the releases still pending go with it: the new instance holds no session).
        self._in_call = False
        while self._pending_releases:
            self.release_session(self._pending_releases.popleft())
        return result

    async def _on_thread(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Hand the call to the thread and wait for its result."""
        future: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._requests.put((method, kwargs, ctx, future))
        return await future

    def release_session(self, session_id: str) -> None:
        """Free the session, when the tool frees sessions, after the calls sent before: queued for the
        thread, or for a tool with async methods, on the loop (now, or after the call in progress)."""
        if not self._releases:
            return
        if not self._releases_on_loop:
            self._requests.put(session_id)
        elif self._in_call:
            self._pending_releases.append(session_id)
        elif self._tool is not None and not self._killed:
            release_tool_session(self._tool, session_id)

    async def kill(self) -> None:
        """Abandon the thread: it stops taking calls and drops the result of a call in progress."""
        self._killed = True
        self._pending_releases.clear()
        self._requests.put(None)
        if self._busy and self._thread is not None and self._thread.is_alive():
            _hung_threads.setdefault(self._name, set()).add(self._thread)

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Future[None]) -> None:
        try:
            self._serve_calls(loop, ready)
        finally:
            self._serving = False

    def _serve_calls(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Future[None]) -> None:
        try:
            tool = resolve_tool_class(self._tool_ref)(**self._config)
            tool.setup()
        except Exception as exc:
            _settle(loop, ready, SetupFailed(f"{self._name} setup failed: {type(exc).__name__}: {exc}"))
            return
        self._tool = tool  # for the calls on the loop, set before `start()` returns
        _settle(loop, ready, None)
        while True:
            request = self._requests.get()
            if request is None or self._killed:
                return
            if isinstance(request, str):
                release_tool_session(tool, request)
                continue
            method, kwargs, ctx, future = request
            self._busy = True
            result = invoke_call(tool, method, kwargs, ctx)
            self._busy = False
            if self._killed:
                return
            _settle(loop, future, result)


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], outcome: Any) -> None:
    """Complete `future` from another thread, unless it was cancelled or its loop is gone."""
    # RuntimeError: the event loop was closed while this thread was still busy.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_complete, future, outcome)


def _complete(future: asyncio.Future[Any], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
