"""Dynamic batching: concurrent calls of one batched tool method gathered and run as one call.

A call waits at most `window_s` for others to join it; a batch leaves as soon as it is full. The batch
goes through the tool's router like any call (queue, timeout, restarts), so a timeout or a crash fails
every call of the batch with the same error, while a tool error stays with the call that caused it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from spacetools.kit.batched_methods import BatchResult, has_batched_method
from spacetools.kit.definition import BATCH_CALL, ToolContext, ToolResult, tool_methods
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.router import ToolRouter

__all__ = ["Batcher", "batchers_for"]


@dataclass
class _Pending:
    kwargs: dict[str, Any]
    ctx: ToolContext
    future: asyncio.Future[ToolResult]


class Batcher:
    """Gathers the calls of one tool method into batches of up to `batch_size` for its router."""

    def __init__(self, router: ToolRouter, method: str, batch_size: int, window_s: float) -> None:
        if batch_size < 2:
            raise ValueError("a Batcher needs batch_size of at least 2")
        self.router = router
        self.method = method
        self.batch_size = batch_size
        self.window_s = window_s
        self.batches = 0
        self.batched_calls = 0
        self._pending: list[_Pending] = []
        self._timer: asyncio.TimerHandle | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def call(self, name: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Join the next batch of `name` and wait for this call's own result."""
        loop = asyncio.get_running_loop()
        pending = _Pending(kwargs, ctx, loop.create_future())
        self._pending.append(pending)
        if len(self._pending) >= self.batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        return await pending.future

    def snapshot(self) -> dict[str, Any]:
        """Batch counts for the statistics."""
        return {
            "method": self.method,
            "batch_size": self.batch_size,
            "batches": self.batches,
            "calls": self.batched_calls,
            "mean_batch": round(self.batched_calls / self.batches, 3) if self.batches else None,
        }

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            batch, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size :]
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[_Pending]) -> None:
        self.batches += 1
        self.batched_calls += len(batch)
        if len(batch) == 1:
            results = [await self.router.call(self.method, batch[0].kwargs, batch[0].ctx)]
        else:
            arguments = {
                "method": self.method,
                "calls": [item.kwargs for item in batch],
                "contexts": [item.ctx for item in batch],
            }
            outcome = await self.router.call(BATCH_CALL, arguments, batch[0].ctx)
            if isinstance(outcome, BatchResult):
                results = outcome.results
            else:  # the batch as a whole failed (timeout, crash, shutdown): every call reports it
                text = outcome.text.replace(BATCH_CALL, self.method)
                results = [ToolResult(text=text, is_error=True) for _ in batch]
        for item, result in zip(batch, results, strict=True):
            if not item.future.done():  # a caller may have been cancelled meanwhile
                item.future.set_result(result)


def batchers_for(deployment: ToolDeployment, router: ToolRouter) -> dict[str, Batcher]:
    """A batcher for each batched method of the deployment's tool, when it asks for batches."""
    if deployment.batch_size < 2:
        return {}
    tool_class = deployment.tool_class()
    return {
        name: Batcher(router, name, deployment.batch_size, deployment.batch_window_ms / 1000)
        for name in tool_methods(tool_class)
        if has_batched_method(tool_class, name)
    }
