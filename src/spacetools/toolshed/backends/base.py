"""The instance interface every backend implements: one live copy of a tool that runs one call at a time.

The router owns queueing, timeouts and restarts; an instance only starts (constructing the tool and
running `setup()` wherever it lives), runs calls, reports a crash, passes on the release of a session
and can be killed. A Ray backend implements the same members with an actor.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from spacetools.kit.definition import ToolContext, ToolResult

__all__ = ["Instance", "InstanceCrashed", "SetupFailed"]


class InstanceCrashed(Exception):
    """The instance died while running a call or before it could take one."""

    def __init__(self, exit_code: int | None) -> None:
        super().__init__(f"instance crashed (exit code {exit_code})")
        self.exit_code = exit_code


class SetupFailed(RuntimeError):
    """The tool's construction or `setup()` failed (or did not finish in time): starting it again at
    once would fail the same way. Other start failures (the instance was killed) are worth a retry."""


@runtime_checkable
class Instance(Protocol):
    """One tool instance. `invoke` is only called when no other call is running on it."""

    @property
    def alive(self) -> bool:
        """False once the instance crashed or was killed."""
        ...

    @property
    def pid(self) -> int | None:
        """The operating-system process running the tool, if it has its own."""
        ...

    async def start(self) -> None:
        """Construct the tool and run its `setup()`; raise with a clear message when that fails."""
        ...

    async def invoke(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run one validated call; tool exceptions come back as error results, a death as InstanceCrashed."""
        ...

    def release_session(self, session_id: str) -> None:
        """Have the tool free what it holds for a closed session (`Tool.release_session`), and the
        instance drop the session's context it was sent, after the calls already sent to this
        instance; returns at once without waiting for it (a no-op when there is nothing to free)."""
        ...

    async def kill(self) -> None:
        """Stop the instance now, whatever it is doing (idempotent)."""
        ...
