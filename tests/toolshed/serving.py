"""A real uvicorn server on 127.0.0.1 for the HTTP tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn

from spacetools.kit.definition import Tool, ToolError, ToolResult, tool_method
from spacetools.toolshed import Toolshed
from spacetools.toolshed.http import create_app
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.slow_clients import server_options


@contextlib.contextmanager
def serving(toolshed: Toolshed, limits: ServerLimits | None = None) -> Iterator[str]:
    """Serve `toolshed` on a free port of 127.0.0.1 in a background thread, with the settings
    `spacetools serve` runs uvicorn with; yields the base URL."""
    with serving_with_server(toolshed, limits) as (url, _server):
        yield url


@contextlib.contextmanager
def serving_with_server(
    toolshed: Toolshed, limits: ServerLimits | None = None
) -> Iterator[tuple[str, uvicorn.Server]]:
    """`serving`, also yielding the uvicorn server, whose open connections a test can see."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    limits = limits or ServerLimits()
    app = create_app(toolshed, limits)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **server_options(limits)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the Toolshed server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll `check` until it holds (a deadline only bounds a failing test)."""
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.01)


class GateTool(Tool):
    """Calls block until the test opens the gate: concurrency is then seen in `/stats`, not timed."""

    name = "gate"
    opened = threading.Event()

    @tool_method
    def wait(self, label: str) -> ToolResult:
        """Block until the gate opens, then return the label.

        Args:
            label: The text to return.
        """
        if not GateTool.opened.wait(60):
            raise ToolError("the gate never opened")
        return ToolResult(text=label)


def wait_for_stats(http: httpx.Client, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll `/stats` until `check` holds (a deadline only bounds a failing test)."""
    deadline = time.monotonic() + 30
    while True:
        stats = http.get("/stats").json()
        if check(stats):
            return stats
        assert time.monotonic() < deadline, f"never reached: {stats}"
        time.sleep(0.01)
