"""Timeouts for many awaits at once, with one event-loop timer for all of them.

A timer per await costs a handle to schedule and another to cancel: more than a no-op tool call does
on the event loop. The awaits of one `Deadlines` (a tool's calls) mostly share one timeout, so their
deadlines come in the order they start, and one timer set at the earliest pending deadline serves them
all: it cancels the awaits whose deadline has come and is set again at the next pending one. An await
that ends leaves the timer as it is; a caller calling again and again thus sets about one timer per
timeout period instead of one per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["Deadlines"]

_T = TypeVar("_T")


class _Wait:
    """One await under a deadline: the task to cancel and, once cancelled for it, `fired`."""

    __slots__ = ("fired", "task", "when")

    def __init__(self, task: asyncio.Task[object], when: float) -> None:
        self.task = task
        self.when = when
        self.fired = False


class Deadlines:
    """Runs awaits each under a timeout (`within`), all on one timer of the running event loop."""

    def __init__(self) -> None:
        self._waits: set[_Wait] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._when = 0.0  # when the timer fires
        self._loop: asyncio.AbstractEventLoop | None = None

    async def within(self, seconds: float, awaitable: Awaitable[_T]) -> _T:
        """`await awaitable`, cancelled with an `asyncio.TimeoutError` after `seconds`.

        The caller's own task is cancelled, as `asyncio.timeout` does (`asyncio.wait_for`, before Python
        3.12, runs the awaitable in a task of its own, which costs more than a no-op call). A wait that
        ends leaves the set before anything else runs, so a cancellation that arrives is the deadline's
        (or, on Python 3.11+, counted apart: one from elsewhere still propagates).
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None, "runs in a task"
        wait = _Wait(task, loop.time() + seconds)
        if loop is not self._loop:  # a new event loop: what was pending belonged to the last one
            self._waits = set()
            self._timer = None
            self._loop = loop
        self._waits.add(wait)
        if self._timer is None or wait.when < self._when:
            self._arm(wait.when)
        try:
            return await awaitable
        except asyncio.CancelledError:
            uncancel = getattr(task, "uncancel", None)
            if wait.fired and (uncancel is None or uncancel() == 0):
                raise asyncio.TimeoutError from None
            raise
        finally:
            self._waits.discard(wait)

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._expire)
        self._when = when

    def _expire(self) -> None:
        """Cancel the awaits whose deadline has come; set the timer at the next pending deadline."""
        self._timer = None
        due = [wait for wait in self._waits if wait.when <= self._when]
        for wait in due:
            self._waits.discard(wait)
            wait.fired = True
            wait.task.cancel()
        if self._waits:
            self._arm(min(wait.when for wait in self._waits))
